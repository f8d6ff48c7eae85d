"""The request breakdown (breakdown.py, breakdown.bpf.h) and its instrument (instrument.py)."""

from .breakdown import (
    DETAIL,
    PARTS,
    SKIPPED,
    WAIT_SYSCALLS,
    BreakdownDelta,
    BreakdownProbes,
    BreakdownSnapshot,
    breakdown_delta,
)
from .instrument import Breakdown

INSTRUMENT = Breakdown

__all__ = ["DETAIL", "PARTS", "SKIPPED", "WAIT_SYSCALLS", "BreakdownDelta", "BreakdownProbes", "BreakdownSnapshot",
           "breakdown_delta", "Breakdown", "INSTRUMENT"]
