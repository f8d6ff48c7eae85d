"""What each cell of an ab run leaves: its record, the pairs of cells and the stopping rule's reading of them. (The
processes it keeps, the speed canary and the recording loader, are run/canary.py's: knee keeps them too.)"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from netprof.profiler.ab.plan import JUDGED, LOG_JUDGED
from netprof.profiler.model import metrics, paired, results, stats
from netprof.profiler.run import turns as turns_mod

# ---------------------------------------------------------------------------------------------
# What each cell gives, and the pairs

@dataclass
class CellRecord:
    variant: int
    pair: int
    t: float  # the window's middle (monotonic)
    figures: dict[str, float]  # the judged columns this cell has
    probed: bool
    canary_ns: float
    row: dict


def figures(row: dict) -> dict[str, float]:
    """The judged columns of one row (stats.per_round derives CPU and syscall totals)."""
    df = stats.per_round(pd.DataFrame([results.flatten(row)]))
    r = df.iloc[0]
    cols = [c for c in JUDGED if c in df] + sorted(c for c in df.columns if c.startswith(metrics.KERNEL_OP_PREFIXES))
    return {c: v for c in cols if (v := stats.num(r, c)) is not None}


def _value(rec: CellRecord, col: str) -> float | None:
    """A probed cell that never made a syscall (or io_uring operation) has no column for it: that is 0, not
    unknown."""
    if col in rec.figures:
        return rec.figures[col]
    return 0.0 if rec.probed and col.startswith(metrics.KERNEL_OP_PREFIXES) else None


@dataclass
class Stall:
    """A cell in which a live server answered nothing."""

    why: str


@dataclass
class Pairs:
    """One comparison's pairs: (base cell, new cell, order)."""

    new: int  # the variant index
    items: list[tuple[CellRecord, CellRecord, str]] = field(default_factory=list)
    stalled: int = 0  # pairs lost to a cell in which a live server answered nothing

    def dropped(self) -> list[bool]:
        return paired.dropped_pairs([(b.canary_ns, n.canary_ns) for b, n, _ in self.items])

    def kept(self) -> list[tuple[CellRecord, CellRecord, str]]:
        return [p for p, drop in zip(self.items, self.dropped()) if not drop]

    def values(self, col: str) -> tuple[list[float], list[float], list[float]]:
        """One figure over the kept pairs that have it: base values, new values, each pair's Δlog canary."""
        base, new, x = [], [], []
        for b, n, _ in self.kept():
            vb, vn = _value(b, col), _value(n, col)
            if vb is None or vn is None:
                continue
            base.append(vb)
            new.append(vn)
            x.append(math.log(n.canary_ns / b.canary_ns) if b.canary_ns > 0 and n.canary_ns > 0 else math.nan)
        return base, new, x

    def judge(self, col: str) -> dict | None:
        """`paired.judge` of one figure over the kept pairs that have it; None when none does."""
        base, new, x = self.values(col)
        if not base:
            return None
        return paired.judge(base, new, x, log=col in LOG_JUDGED and min(base + new) > 0)

    def columns(self) -> list[str]:
        have = {c for b, n, _ in self.items for c in (*b.figures, *n.figures)}
        return [c for c in JUDGED if c in have] + sorted(c for c in have if c.startswith(metrics.KERNEL_OP_PREFIXES))


def converged(pairs: Pairs, metric: str, precision: float, min_pairs: int) -> bool:
    """The stopping rule (paired.converged) on the --metric's log ratios of one comparison."""
    base, new, x = pairs.values(metric)
    if not base or min(base + new) <= 0:
        return False
    d = np.log(new) - np.log(base)
    return paired.converged(paired.estimate(d, x), precision, min_pairs)


def _generation_records(gen: dict, g: int, t: float) -> list[CellRecord]:
    """Turns: one record per variant for generation `g` (the servers' processes between two restarts): its
    msgs/s is the geometric mean over the generation's rounds of its turns' messages ÷ the turn (so NEW/BASE
    is exp of the mean per-round log ratio), its other figures the mean over the generation's blocks."""
    rounds = np.log(np.asarray(gen["rounds"], dtype=float))
    out = []
    for i in range(rounds.shape[1]):
        blocks = [b[i].figures for b in gen["blocks"]]
        figs = {c: float(np.mean([f[c] for f in blocks if c in f])) for c in {c for f in blocks for c in f}}
        figs["msgs_per_sec"] = float(np.exp(rounds[:, i].mean())) / turns_mod.TURN_S
        out.append(CellRecord(i, g, t, figs, False, math.nan, gen["blocks"][-1][i].row))
    return out


# ---------------------------------------------------------------------------------------------
