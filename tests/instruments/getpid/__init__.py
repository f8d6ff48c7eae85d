"""A throw-away instrument (tests/test_instrument.py, tests/test_instrument_parts.py): getpid() calls per message.
It is what adding an instrument takes: this folder, plus its name in probes/registry.py's NAMES. Its row field
(instrument.py), its rule (rules.py), its report section (report.py, report.{md,html}.j2) and its judged figure
(metrics.py) are found from that name alone."""

from .instrument import Getpid

INSTRUMENT = Getpid
