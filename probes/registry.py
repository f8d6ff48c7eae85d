"""The instruments a run can carry: one folder under probes/ each, named here.

The order is the order their counters are read at a mark: the counting set first, so that the two
edges of its window lag their marks by the same time. Adding an instrument is its folder (a package
exporting INSTRUMENT, an `instrument.Instrument` subclass) plus its name in NAMES.

What an instrument adds to the judgement and the report lives in its folder too, found here by name
(`parts`): `rules.py` (its `@rule`s, listed among the others after the topic module its LISTED_AFTER
names), `report.py` (with a SECTION: a section of the report, templates `report.{md,html}.j2` beside
it) and `metrics.py` (METRICS: the figures `compare` and summary.json judge, `judge_metrics`). The rules
package, report.py, compare and stats name no instrument: they ask `parts("rules")`, `parts("report")`,
`judge_metrics()`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any

from netprof.profiler.model import metrics

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


def parts(part: str) -> list[ModuleType]:
    """Each registered instrument's module `part` ("rules", "report"), for those that have one, in NAMES
    order. By name, in this one place: the layers that use these parts import no instrument themselves."""
    found = []
    for name in NAMES:
        dotted = f"{__package__}.{name}.{part}"
        if importlib.util.find_spec(dotted) is not None:  # imports the instrument's package (no bcc), not the part
            found.append(importlib.import_module(dotted))
    return found


def judge_metrics() -> None:
    """Each registered instrument's judged figures (METRICS of its `metrics.py`: `netprof compare` and summary.json's
    per-cell aggregates judge them) into model/metrics.py's table (INSTRUMENT_METRICS), in NAMES order; compare
    and the report call it before they judge. Adding them again changes nothing."""
    for part in parts("metrics"):
        metrics.add_metrics(part.METRICS)


def folders() -> list[str]:
    """Where the instruments' folders are (netprof.probes' path): the report's templates search them."""
    return list(sys.modules[__package__].__path__)
