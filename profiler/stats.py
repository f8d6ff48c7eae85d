"""Every metric netprof derives from raw counts, computed in one place."""

from __future__ import annotations

import math
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
                 "cpu_us_per_msg.", "errors.")
MEAN_COLUMNS = ("ctx_switches_per_msg",)


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
