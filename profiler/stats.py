"""Every metric netprof derives from raw counts, computed in one place."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

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

    Fair service gives ≈ of_messages (0.95); the seed's "active vs stagnant" split gives a tiny value.
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


CELL_KEYS = ["backend", "interpreter", "connections", "pipeline"]


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """One line per cell (backend × interpreter × connections × pipeline) over its successful rounds."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    keys = [k for k in CELL_KEYS if k in df.columns]
    rows = []
    for key, g in ok.groupby(keys, sort=False, dropna=False):
        s = summarize(g["msgs_per_sec"])
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update({f"mps_{k}": v for k, v in s.items()})
        row["noisy"] = bool(s["n"] > 1 and s["cv"] > NOISY_CV)
        for col in g.columns:
            if col.startswith(("lat_us.", "per_conn.", "cpu.", "syscalls_per_msg.", "ctx.")) or col in (
                "ctx_switches_per_msg",
            ):
                if pd.api.types.is_numeric_dtype(g[col]):
                    row[col] = float(g[col].mean())
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    # Relative speed within each (interpreter, connections, pipeline): slowest = 1, as in the seed.
    group = [k for k in keys if k != "backend"]
    out["relative"] = out["mps_mean"] / out.groupby(group, dropna=False)["mps_mean"].transform("min")
    return out
