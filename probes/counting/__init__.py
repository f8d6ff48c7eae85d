"""The counting set (counting.py, counting.bpf.c) and its instrument (instrument.py)."""

from .counting import CountingProbes, ProbeDelta, Snapshot, check_available, delta, per_message_notation
from .instrument import Counting

INSTRUMENT = Counting

__all__ = ["CountingProbes", "ProbeDelta", "Snapshot", "check_available", "delta", "per_message_notation",
           "Counting", "INSTRUMENT"]
