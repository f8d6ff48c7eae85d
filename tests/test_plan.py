"""The plan's cells: which combinations of the run dimensions a RunConfig yields (pure logic: no
process is started, the real registry is used)."""

from __future__ import annotations

import pytest

from netprof.profiler.core.errors import InputError
from netprof.profiler.run.plan import RunConfig, parse_pin, validate


def _cells(**kw) -> list:
    return list(validate(RunConfig(**kw)).cells())


def test_pin_both_doubles_every_cell_and_labels_the_unpinned_one():
    cells = _cells(backends=["thread"], connections=[10, 100], rounds=1, pin_both=True)
    assert sorted((c.connections, c.pinned) for c in cells) == [(10, False), (10, True), (100, False), (100, True)]
    unpinned = next(c for c in cells if not c.pinned)
    assert "not pinned" in unpinned.label() and "not pinned" not in next(c for c in cells if c.pinned).label()


@pytest.mark.parametrize(("mode", "no_pin", "want"), [("yes", False, (True, False)), ("no", False, (False, False)),
                                                      ("both", False, (True, True)), ("yes", True, (False, False))])
def test_parse_pin(mode, no_pin, want):
    assert parse_pin(mode, no_pin) == want


@pytest.mark.parametrize(("mode", "no_pin"), [("sometimes", False), ("both", True), ("no", True)])
def test_parse_pin_refuses(mode, no_pin):
    with pytest.raises(InputError):
        parse_pin(mode, no_pin)


def test_http_backends_frame_their_own_way_once_per_scale():
    """--framing does not apply to a server with its own HTTP parser: one cell per scale and
    interpreter, framing "own", and the backend is not given --framing."""
    from netprof.profiler.run.cell import backend_argv

    cfg = validate(RunConfig(backends=["http_asyncio"], connections=[10], rounds=2))
    cells = list(cfg.cells())
    assert [(c.framing, c.round) for c in cells] == [("own", 1), ("own", 2)]
    assert "--framing" not in backend_argv("python3", "http_asyncio", cfg, cells[0].framing)
    echo = validate(RunConfig(backends=["selector"], connections=[10], rounds=1, framings=["message", "stream"]))
    assert sorted(c.framing for c in echo.cells()) == ["message", "stream"]


@pytest.mark.parametrize("spec", ["uniform:5-1", "fixed:70000000", "poisson:1e3", "uniform:1-"])
def test_think_the_loader_would_refuse_is_refused_before_anything_starts(spec):
    """The loader (think.hpp) refuses MIN > MAX and pauses over a minute: netprof says so first (exit 2),
    instead of starting a run whose loader then fails."""
    with pytest.raises(InputError, match="--think"):
        validate(RunConfig(backends=["selector"], think=spec))


@pytest.mark.parametrize("spec", ["none", "fixed:50", "uniform:1-5", "uniform:5-5", "poisson:12.5"])
def test_think_the_loader_takes_passes(spec):
    validate(RunConfig(backends=["selector"], think=spec))


def test_the_plan_line_counts_the_sampling_rounds():
    """What a run says before its first cell: its throughput cells and the sampling rounds after them (--stacks and
    --flamegraph each run one per combination); `netprof flamegraph` runs those only (it said "0 cells ≈ 0 s")."""
    from netprof.profiler.run.runner import plan_line

    flame = validate(RunConfig(backends=["selector"], connections=[10], rounds=1, duration=2, warmup=1,
                               probes=False, flamegraph=True, evidence_only=True))
    assert plan_line(flame) == "1 sampling round × (1 s warm-up + 2 s) ≈ 4 s"
    both = validate(RunConfig(backends=["selector", "uvloop_sock"], connections=[10, 100], rounds=3, duration=2,
                              warmup=1, stacks=True, flamegraph=True))
    assert plan_line(both) == "12 cells and 8 sampling rounds × (1 s warm-up + 2 s) ≈ 80 s"
    assert plan_line(validate(RunConfig(backends=["selector"], connections=[10], rounds=2, duration=0.3,
                                        warmup=0.1))) == "2 cells × (0.1 s warm-up + 0.3 s) ≈ 3 s"
