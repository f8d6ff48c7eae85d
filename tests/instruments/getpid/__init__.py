"""A throw-away instrument (tests/test_instrument.py): getpid() calls per message. It is what adding an
instrument takes: this folder, plus its name in probes/registry.py's NAMES."""

from .instrument import Getpid

INSTRUMENT = Getpid
