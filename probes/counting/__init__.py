"""The counting set (counting.py, counting.bpf.c) and its instrument (instrument.py)."""

import importlib

from .counting import CountingProbes, ProbeDelta, Snapshot, check_available, delta, per_message_notation

__all__ = ["CountingProbes", "ProbeDelta", "Snapshot", "check_available", "delta", "per_message_notation",
           "Counting", "INSTRUMENT"]


def __getattr__(name: str):
    """The instrument on first use: it shapes rows with pandas (stats), which the compile needs not wait for
    (netprof.probes' docstring)."""
    if name not in ("Counting", "INSTRUMENT"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(".instrument", __name__).Counting
