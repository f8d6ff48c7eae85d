"""`netprof ab A B [C…]`: did my change make it faster? Paired cells on warm servers, to a stated precision.

Each variant's server starts once and stays warm (`--fresh`: restarted for every pair); one loader plays
the load against each in turn, in pairs whose order alternates (A B, B A, …: ABBA blocks), each cell a
real `cell.run_cell` with the run's instruments; a speed canary on the backend's CPU times the host
through every cell. After each pair the ratio's interval is re-estimated (`paired`), and the run stops
when it is within ±`--precision` or at `--max-time`. The answer is `compare`'s document (base = variant
A, one comparison per other variant, one cell), so its pages, why-sentence and --fail-if apply as they
are, plus an "ab" object saying how it was measured (docs/ab.md).

This module sits above the report layer: it drives cells (the run layer) and hands what they measured to
`compare` and `compare_report`. The statistics are `paired`'s, pure and below the run layer.

The package, by job: plan.py (what a run is, checked before anything starts), records.py (the canary, the
recording loader, each cell's record and the pairs), session.py (the run), document.py (the answer). This
module is its public surface: what `netprof ab`, the tests and bench/ use. plan.py's names are imported at once
(light: the CLI refuses a bad ab in ~0.3 s); the rest, which loads pandas and the run layer, on first use.
"""

from typing import TYPE_CHECKING, Any

from netprof.profiler.ab.plan import (
    AB_JSON,
    BLOCK_S,
    LETTERS,
    METHODS,
    METRICS,
    PRIME,
    TURNS_PARQUET,
    WINDOW_S,
    AbPlan,
    Variant,
    _labels,
    _per_variant_env,
    _per_variant_pythons,
    choose_method,
    default_window,
    missing_capability,
    parse_precision,
    plan,
)
from netprof.profiler.core import lazy

if TYPE_CHECKING:
    from netprof.profiler.ab.document import _round_ratios, _verdict, report, summary_lines
    from netprof.profiler.ab.session import AbOutcome, execute
    from netprof.profiler.run.canary import Canary, RecordingLoader

_LAZY = {"_round_ratios": (".document", "_round_ratios"), "_verdict": (".document", "_verdict"),
         "report": (".document", "report"), "summary_lines": (".document", "summary_lines"),
         "AbOutcome": (".session", "AbOutcome"), "execute": (".session", "execute"),
         "Canary": ("netprof.profiler.run.canary", "Canary"),
         "RecordingLoader": ("netprof.profiler.run.canary", "RecordingLoader")}

__all__ = ["AB_JSON", "BLOCK_S", "LETTERS", "METHODS", "METRICS", "PRIME", "TURNS_PARQUET", "WINDOW_S", "AbOutcome",
           "AbPlan", "Canary", "RecordingLoader", "Variant", "_labels", "_per_variant_env", "_per_variant_pythons",
           "_round_ratios", "_verdict", "choose_method", "default_window", "execute", "missing_capability",
           "parse_precision", "plan", "report", "summary_lines"]


def __getattr__(name: str) -> Any:
    return lazy.attr(__name__, _LAZY, name)
