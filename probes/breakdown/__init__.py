"""The request breakdown (breakdown.py, breakdown.bpf.h) and its instrument (instrument.py)."""

from typing import Any

from netprof.profiler.core import lazy

from .breakdown import (
    DETAIL,
    PARTS,
    SKIPPED,
    TIMER,
    WAIT_SYSCALLS,
    BreakdownDelta,
    BreakdownProbes,
    BreakdownSnapshot,
    breakdown_delta,
)

# The instrument (its rows import pandas) on first use: the set's flags come first (profiler/entry.py).
_LAZY = {"Breakdown": (".instrument", "Breakdown"), "INSTRUMENT": (".instrument", "Breakdown")}


def __getattr__(name: str) -> Any:
    return lazy.attr(__name__, _LAZY, name)


__all__ = ["DETAIL", "PARTS", "SKIPPED", "TIMER", "WAIT_SYSCALLS", "BreakdownDelta", "BreakdownProbes",
           "BreakdownSnapshot", "breakdown_delta", "Breakdown", "INSTRUMENT"]
