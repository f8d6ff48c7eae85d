"""The socket-wait set (sockwait.py, sockwait.bpf.c) and its instrument (instrument.py)."""

from typing import Any

from netprof.profiler.core import lazy

from .sockwait import (
    CONN_WAIT_QUANTILE,
    KINDS,
    NSLOTS,
    ConnWait,
    SockWaitDelta,
    SockWaitProbes,
    SockWaitSnapshot,
    WaitDist,
    check_available,
    log2_quantile_us,
    measure_cost,
    slot_bounds,
    slot_of,
    sockwait_delta,
)

# The instrument (its rows import pandas) on first use: the set's flags come first (profiler/entry.py).
_LAZY = {"SockWait": (".instrument", "SockWait"), "INSTRUMENT": (".instrument", "SockWait"),
         "conn_rows": (".instrument", "conn_rows"), "row_fields": (".instrument", "row_fields")}


def __getattr__(name: str) -> Any:
    return lazy.attr(__name__, _LAZY, name)


__all__ = ["SockWait", "conn_rows", "row_fields", "CONN_WAIT_QUANTILE", "KINDS", "NSLOTS", "ConnWait",
           "SockWaitDelta", "SockWaitProbes", "SockWaitSnapshot", "WaitDist", "check_available",
           "log2_quantile_us", "measure_cost", "slot_bounds", "slot_of", "sockwait_delta", "INSTRUMENT"]
