"""What `netprof compare` is given, checked before anything heavy loads: BASE and at least one NEW, each a path
that exists, and --fail-if's rules. Light (no pandas): a refused compare leaves in ~0.25 s; compare.compare checks
its input here too, and compare.load_run says why a path is not a run with `not_a_run`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from netprof.profiler.analysis import fail_if
from netprof.profiler.core.errors import InputError


def not_a_run(path: str, why: str) -> InputError:
    return InputError(f"{path}: {why}; give a results directory written by `netprof run --out DIR` "
                      "(or its summary.json)")


def check(paths: Sequence[str | Path], rules: str = "") -> list[fail_if.Check]:
    """--fail-if's checks, once the paths are two or more and each exists; InputError naming the fix otherwise."""
    checks = fail_if.parse_fail_if(rules)
    if len(paths) < 2:
        raise InputError("netprof compare needs BASE and at least one NEW: netprof compare runs/A runs/B")
    for p in paths:
        if not Path(p).exists():
            raise not_a_run(str(p), "no such file or directory")
    return checks
