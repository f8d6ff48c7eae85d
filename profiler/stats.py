"""Every metric netprof derives from raw counts, computed in one place."""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from netprof.profiler import schema

NOISY_CV = 0.10  # a cell whose coefficient of variation across rounds exceeds this is "noisy"
ACTIVE_SHARE_OF_MESSAGES = 0.95


def jain_index(counts: Sequence[float]) -> float:
    """Jain's fairness index: 1 = perfectly even, 1/n = one connection got everything."""
    x = np.asarray(counts, dtype=float)
    if x.size == 0 or not x.any():
        return float("nan")
    return float(x.sum() ** 2 / (x.size * (x * x).sum()))


def active_share(counts: Sequence[float], of_messages: float = ACTIVE_SHARE_OF_MESSAGES) -> float:
    """Smallest share of connections that together handled `of_messages` of all messages.

    Fair service gives ≈ of_messages (0.95); network_ping_test's "active vs stagnant" split gives a tiny value.
    """
    x = np.sort(np.asarray(counts, dtype=float))[::-1]
    total = x.sum()
    if x.size == 0 or total <= 0:
        return float("nan")
    needed = int(np.searchsorted(np.cumsum(x), of_messages * total - 1e-9) + 1)
    return min(needed, x.size) / x.size


def fairness(counts: Sequence[int]) -> dict:
    x = np.asarray(counts, dtype=float)
    if x.size == 0:
        return {}
    p = np.percentile(x, [5, 50, 95])
    return {
        "min": float(x.min()),
        "p5": float(p[0]),
        "p50": float(p[1]),
        "p95": float(p[2]),
        "max": float(x.max()),
        "jain": jain_index(x),
        "active_share": active_share(x),
        "idle": int((x == 0).sum()),  # connections that exchanged no message in the window
    }


def ratio(count: float, messages: int) -> float | None:
    """count per message, None without messages."""
    return count / messages if messages else None


def probe_cost(unprobed_rate: float | None, probed_rate: float | None) -> float | None:
    """The probes' cost in one cell: 1 − probed/unprobed msgs/s (negative = within noise, faster)."""
    if not unprobed_rate or probed_rate is None:
        return None
    return 1.0 - probed_rate / unprobed_rate


def per_message(counts: dict[str, float], messages: int) -> dict[str, float]:
    if messages <= 0:
        return {}
    return {k: v / messages for k, v in counts.items() if v}


def summarize(values: Sequence[float], confidence: float = 0.95) -> dict:
    """mean, std, Student-t half-interval, its share of the mean, CV, n."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = int(x.size)
    if n == 0:
        return {"mean": float("nan"), "std": float("nan"), "ci": float("nan"), "ci_pct": float("nan"), "cv": float("nan"), "n": 0}
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    ci = float(sps.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n)) if n > 1 else float("nan")
    return {
        "mean": mean,
        "std": std,
        "ci": ci,
        "ci_pct": 100 * ci / mean if mean else float("nan"),
        "cv": std / mean if mean else float("nan"),
        "n": n,
    }


def num(row, key: str) -> float | None:
    """A finite number from a row, or None (missing column, NaN, None)."""
    try:
        v = row[key]
    except (KeyError, IndexError):
        return None
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def syscalls_of(row) -> dict[str, float] | None:
    """{syscall: per-message count} of a cell, or None when it ran without probes."""
    per = {k.split(".", 1)[1]: num(row, k) for k in row.index if k.startswith("syscalls_per_msg.")}
    per = {k: v for k, v in per.items() if v is not None}
    return per or None


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """Per-row metrics derived from the raw columns: CPU µs per message, user and kernel (/proc)."""
    df = schema.normalize(df).copy()
    msgs = df["messages"].where(df["messages"] > 0) if "messages" in df else np.nan
    for part, col in (("user", "cpu.user_s"), ("sys", "cpu.sys_s")):
        df[f"cpu_us_per_msg.{part}"] = df[col] * 1e6 / msgs if col in df else np.nan
    return df


# Columns averaged over a cell's rounds.
MEAN_PREFIXES = ("lat_us.", "per_conn.", "cpu.", "syscalls_per_msg.", "ctx.", "loader_cpu.", "faults.",
                 "cpu_us_per_msg.", "errors.", "probed.")
MEAN_COLUMNS = ("ctx_switches_per_msg", "probe_cost")


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """One line per cell (schema.CELL_KEYS) over its successful rounds: msgs/s mean ± interval,
    the mean of every per-message metric, and the speed relative to the slowest backend."""
    df = derive(df)
    ok = df[df["status"] == "ok"] if "status" in df else df
    keys = [k for k in schema.CELL_KEYS if k in df.columns]
    rows = []
    for key, g in ok.groupby(keys, sort=False, dropna=False):
        s = summarize(g["msgs_per_sec"])
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update({f"mps_{k}": v for k, v in s.items()})
        row["noisy"] = bool(s["n"] > 1 and s["cv"] > NOISY_CV)
        if "family" in g:
            row["family"] = g["family"].iloc[0]
        for col in g.columns:
            if (col.startswith(MEAN_PREFIXES) or col in MEAN_COLUMNS) and pd.api.types.is_numeric_dtype(g[col]):
                row[col] = float(g[col].mean())
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    # Relative speed among the backends of the same other dimensions: slowest = 1, as in network_ping_test.
    group = [k for k in keys if k != "backend"]
    out["relative"] = out["mps_mean"] / out.groupby(group, dropna=False)["mps_mean"].transform("min")
    return out.sort_values([k for k in keys if k != "connections"] + ["connections"]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# The figures a cell is judged by, round by round: summary.json's per-cell aggregates and
# `netprof compare` read these columns (see docs/results-format.md).

CPU_TOTAL = "cpu_us_per_msg_total"  # user + kernel CPU µs per message
SYSCALLS_TOTAL = "syscalls_per_msg_total"  # every counted syscall per message (NaN without probes)

# column → (label, unit, higher is better)
CELL_METRICS: dict[str, tuple[str, str, bool]] = {
    "msgs_per_sec": ("msgs/s", "", True),
    "lat_us.p50": ("latency p50", "µs", False),
    "lat_us.p95": ("latency p95", "µs", False),
    "lat_us.p99": ("latency p99", "µs", False),
    "lat_us.p999": ("latency p999", "µs", False),
    "cpu_us_per_msg.user": ("user CPU per message", "µs", False),
    "cpu_us_per_msg.sys": ("kernel CPU per message", "µs", False),
    CPU_TOTAL: ("CPU per message", "µs", False),
    SYSCALLS_TOTAL: ("syscalls per message", "", False),
    "ctx_switches_per_msg": ("context switches per message", "", False),
    "per_conn.jain": ("Jain index", "", True),
    "per_conn.active_share": ("share of connections that handled 95% of messages", "", True),
}
SYSCALL_PREFIX = "syscalls_per_msg."


def metric_info(col: str) -> tuple[str, str, bool]:
    """(label, unit, higher is better) of a judged column; a syscall column reads
    'epoll_ctl per message'."""
    if col.startswith(SYSCALL_PREFIX):
        return f"{col[len(SYSCALL_PREFIX):]} per message", "", False
    return CELL_METRICS[col]


def per_round(df: pd.DataFrame) -> pd.DataFrame:
    """`derive` plus the totals a comparison judges: CPU µs per message (user + kernel) and
    syscalls per message (every counted syscall). In a row measured with probes a syscall it never
    made reads 0 (the row leaves it out); without probes every syscall figure is NaN."""
    df = derive(df)
    df[CPU_TOTAL] = df["cpu_us_per_msg.user"] + df["cpu_us_per_msg.sys"]
    sc = [c for c in df.columns if c.startswith(SYSCALL_PREFIX)]
    probed = (df["probes"].fillna("").astype(str).str.len() > 0 if "probes" in df
              else pd.Series(bool(sc), index=df.index))
    for c in sc:
        df[c] = df[c].astype(float).fillna(0.0).where(probed)
    df[SYSCALLS_TOTAL] = (df[sc].sum(axis=1) if sc else pd.Series(np.nan, index=df.index)).where(probed)
    return df


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The judged columns `df` has data for: CELL_METRICS in their order, then each syscall."""
    have = [c for c in CELL_METRICS if c in df.columns and df[c].notna().any()]
    return have + sorted(c for c in df.columns if c.startswith(SYSCALL_PREFIX) and df[c].notna().any())


def cell_summaries(df: pd.DataFrame, confidence: float = 0.95) -> list[dict]:
    """summary.json's per-cell aggregates: for each cell (schema.CELL_KEYS) its key values, label,
    successful and failed rounds, and for every judged column over the successful rounds
    {mean, std, interval: [lo, hi] (Student t, `confidence`; null below 2 rounds), n}."""
    if df.empty:
        return []
    df = per_round(df)
    keys = [k for k in schema.CELL_KEYS if k in df.columns]
    ok_mask = df["status"] == "ok" if "status" in df else pd.Series(True, df.index)
    cols = metric_columns(df[ok_mask])
    out = []
    for key, g in df.groupby(keys, sort=False, dropna=False):
        ok = g[ok_mask.loc[g.index]]
        cell = {k: _plain(v) for k, v in zip(keys, key if isinstance(key, tuple) else (key,))}
        cell["label"] = schema.cell_label(g.iloc[0])
        cell["rounds"], cell["failed_rounds"] = int(len(ok)), int(len(g) - len(ok))
        metrics = {}
        for col in cols:
            s = summarize(ok[col].tolist() if col in ok else [], confidence)
            if s["n"] == 0 or (col.startswith(SYSCALL_PREFIX) and s["mean"] == 0):
                continue
            half = s["ci"]
            metrics[col] = {"mean": s["mean"], "std": s["std"],
                            "interval": None if math.isnan(half) else [s["mean"] - half, s["mean"] + half],
                            "n": s["n"]}
        cell["metrics"] = metrics
        out.append(cell)
    return out


def _plain(v):
    """A JSON-ready scalar (numpy → Python)."""
    return v.item() if hasattr(v, "item") else v


def compare_samples(base: Sequence[float], new: Sequence[float], alpha: float = 0.05,
                    confidence: float = 0.95) -> dict:
    """NEW against BASE from per-round values.

    ratio = mean(NEW) / mean(BASE) with its `confidence` interval by Fieller's theorem for two
    independent samples, with Welch's degrees of freedom, so that the interval excludes 1 exactly
    when Welch's t-test (scipy.stats.ttest_ind, equal_var=False) gives p < 1 − confidence; it is
    unbounded (None) when BASE's mean is not clearly away from 0. Significant when p < alpha. Rounds
    with identical values on both sides (a deterministic count) give p = 1 when the means agree, else 0.
    """
    b = np.asarray([v for v in base if v is not None and not math.isnan(v)], dtype=float)
    n = np.asarray([v for v in new if v is not None and not math.isnan(v)], dtype=float)
    out = {"n_base": int(b.size), "n_new": int(n.size),
           "mean_base": float(b.mean()) if b.size else float("nan"),
           "mean_new": float(n.mean()) if n.size else float("nan"),
           "delta": float("nan"), "ratio": float("nan"), "ratio_lo": None, "ratio_hi": None,
           "p": float("nan"), "significant": False}
    if b.size == 0 or n.size == 0:
        return out
    mb, mn = out["mean_base"], out["mean_new"]
    out["delta"] = mn - mb
    out["ratio"] = mn / mb if mb else float("nan")
    if b.size < 2 or n.size < 2:
        return out
    vb, vn = b.var(ddof=1) / b.size, n.var(ddof=1) / n.size  # squared standard errors of the means
    if vb == 0 and vn == 0:
        out["p"] = 1.0 if mn == mb else 0.0
    else:
        with warnings.catch_warnings():  # nearly identical rounds: scipy warns, the p is still right
            warnings.simplefilter("ignore", RuntimeWarning)
            out["p"] = float(sps.ttest_ind(n, b, equal_var=False).pvalue)
    out["significant"] = bool(out["p"] < alpha)
    if mb:
        out["ratio_lo"], out["ratio_hi"] = _fieller(mb, vb, b.size, mn, vn, n.size, confidence)
    return out


def _fieller(mb: float, vb: float, nb: int, mn: float, vn: float, nn: int,
             confidence: float) -> tuple[float | None, float | None]:
    """Fieller interval of mn/mb: the ρ with (mn − ρ·mb)² ≤ t²·(vn + ρ²·vb), t at Welch's degrees
    of freedom (those of the t-test, so both agree at ρ = 1)."""
    if vb == 0 and vn == 0:
        return mn / mb, mn / mb
    dof = (vn + vb) ** 2 / (vn * vn / (nn - 1) + vb * vb / (nb - 1))
    t2 = float(sps.t.ppf(0.5 + confidence / 2, dof)) ** 2
    a = mb * mb - t2 * vb
    if a <= 0:  # BASE's mean is within its own interval of 0: the ratio is unbounded
        return None, None
    bq, c = -2 * mn * mb, mn * mn - t2 * vn
    disc = bq * bq - 4 * a * c
    if disc < 0:
        return None, None
    root = math.sqrt(disc)
    return float((-bq - root) / (2 * a)), float((-bq + root) / (2 * a))
