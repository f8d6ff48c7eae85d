"""The instruments a run can carry: one folder under probes/ each, named here.

The order is the order their counters are read at a mark: the counting set first, so that the two
edges of its window lag their marks by the same time. Adding an instrument is its folder (a package
exporting INSTRUMENT, an `instrument.Instrument` subclass) plus its name in NAMES.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from .instrument import Instrument

NAMES = ("counting", "sockwait", "breakdown")


@functools.cache
def registered() -> tuple[type[Instrument], ...]:
    # By name, so that a new instrument is one word here; the packages import no bcc until opened.
    return tuple(importlib.import_module(f"{__package__}.{name}").INSTRUMENT for name in NAMES)


def by_name(name: str) -> type[Instrument] | None:
    return next((cls for cls in registered() if cls.name == name), None)


def wanted(cfg: Any) -> list[type[Instrument]]:
    """The instruments this run's configuration asks for, in reading order."""
    return [cls for cls in registered() if cls.wanted(cfg)]


def groups() -> list[str]:
    """Every registered instrument's row group (each row has all of them, attached or not)."""
    return [cls.group for cls in registered() if cls.group]
