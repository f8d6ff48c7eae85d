"""The socket-wait set (sockwait.py, sockwait.bpf.c) and its instrument (instrument.py)."""

from .instrument import SockWait, conn_rows, row_fields
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

INSTRUMENT = SockWait

__all__ = ["SockWait", "conn_rows", "row_fields", "CONN_WAIT_QUANTILE", "KINDS", "NSLOTS", "ConnWait",
           "SockWaitDelta", "SockWaitProbes", "SockWaitSnapshot", "WaitDist", "check_available",
           "log2_quantile_us", "measure_cost", "slot_bounds", "slot_of", "sockwait_delta", "INSTRUMENT"]
