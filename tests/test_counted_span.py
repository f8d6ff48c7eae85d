"""The messages the probes' counters are divided by (stats.counted_span, cell.instrument_rows): the loader's
count of its counted window carried over to the span the counters were really read over. The counters are read
when netprof hears each of the loader's marks, a few ms late, and on a host that stalls one read (a steal burst)
over 100 ms late at one edge only: divided by the loader's own count, asyncio_sock's recvfrom came out 0.42 per
message in a 0.21-s sub-window of a fresh-clone run beside bench/bystander.py, where it makes one per message.

No process here: the snapshots' times are set by hand, and the instrument is a stand-in that keeps what it was
given (the arithmetic is the subject; tests/test_phases.py checks the same on a real run's counters)."""

from __future__ import annotations

import os

import pytest

from netprof.profiler.model import stats
from netprof.profiler.run import cell


def test_a_late_first_read_counts_only_the_messages_of_the_span_read():
    # a 0.3-s sub-window of 3,000 messages, its first mark heard 120 ms late, its last 5 ms late
    got = stats.counted_span(3000, (10.0, 10.3), (10.12, 10.305), load_runs_on=True)
    assert got["messages"] == 1850 and got["loader_messages"] == 3000
    assert got["span_s"] == pytest.approx(0.185)
    assert got["start_heard_ms"] == pytest.approx(120) and got["stop_heard_ms"] == pytest.approx(5)


def test_past_the_whole_windows_end_the_loader_sent_nothing():
    # the whole window (probe share 1): the loader stops at t_stop, so a late last read adds no messages
    got = stats.counted_span(3000, (10.0, 10.3), (10.003, 10.4), load_runs_on=False)
    assert got["messages"] == 2970 and got["span_s"] == pytest.approx(0.297)
    # read on time at both edges: the loader's count as it is
    assert stats.counted_span(3000, (10.0, 10.3), (10.0, 10.3), load_runs_on=True)["messages"] == 3000


def test_without_the_windows_bounds_on_this_clock_the_loaders_count_stands():
    assert stats.counted_span(3000, None, (5.0, 5.3), load_runs_on=True) == {
        "loader_messages": 3000, "messages": 3000, "span_s": None, "start_heard_ms": None, "stop_heard_ms": None}
    # a read span that ends before it starts (never on one clock) is no span either
    assert stats.counted_span(3000, (10.0, 10.3), (10.5, 10.4), load_runs_on=False)["messages"] == 3000


class _Keeps:
    """A stand-in instrument: keeps the Counted it is given and makes no row of its own."""

    name, conn_file = "keeps", None

    def __init__(self) -> None:
        self.counted = None

    def row(self, row, a, b, counted):
        self.counted = counted
        return None


def _rows(loader_host: str, clock: dict | None = None) -> tuple[dict, object]:
    inst = _Keeps()
    marks = cell.Marks(os.getpid(), (), window=(1.0, 0.3))
    proc = {"user_s": 0.0, "sys_s": 0.0}
    marks.snaps = {"probe_start": cell.Snap(proc, 10.12, {"keeps": 0}),
                   "probe_stop": cell.Snap(proc, 10.305, {"keeps": 1})}
    result = {"probe_share": 0.3, "phases": {"probed": {"messages": 3000, "duration_s": 0.3,
                                                          "t_start": 10.0, "t_stop": 10.3}}}
    result.update(clock or {})
    row = {"loader_host": loader_host}
    cell.instrument_rows(row, result, marks, (inst,))  # type: ignore[arg-type]
    return row, inst.counted


def test_every_instrument_divides_by_the_span_read_and_the_row_says_so():
    row, counted = _rows("")
    assert counted.messages == 1850 and row["counted"]["loader_messages"] == 3000
    assert row["counted"]["start_heard_ms"] == pytest.approx(120)
    # a loader on another host: its times are ours through the clock offset measured over ssh; within 1% of the
    # window (the offset's error, and the skew of several loaders' windows) they are carried over as on this host
    row, counted = _rows("lab2", {"clock_error_s": 0.0004})
    assert counted.messages == 1850 and row["counted"]["start_heard_ms"] == pytest.approx(120)
    row, counted = _rows("lab2,lab3", {"loaders": {"clock_error_s": 0.0004, "window_skew_s": 0.0025}})
    assert counted.messages == 1850
    # beyond it (4 ms of a 0.3-s window), or with no measure of the offset, nothing is carried over
    for clock in ({"clock_error_s": 0.004}, {"loaders": {"clock_error_s": 0.002, "window_skew_s": 0.002}}, None):
        row, counted = _rows("lab2", clock)
        assert counted.messages == 3000 and row["counted"]["span_s"] is None, clock


class _Logs:
    """A stand-in instrument that logs its reads into a shared list."""

    conn_file, attached = None, True

    def __init__(self, name: str, sub_window: bool, log: list) -> None:
        self.name, self.sub_window, self.log = name, sub_window, log

    def totals(self):
        self.log.append(f"{self.name}.totals")
        return f"{self.name}-totals"

    def snapshot(self, totals=None):
        self.log.append(f"{self.name}.snapshot({totals})")


def test_a_counted_mark_reads_the_figures_over_requests_first(monkeypatch):
    """The breakdown's and the socket waits' means cannot be carried over a late edge as counts are: their totals
    are read before the counting set, /proc and their own sockets' walk (gunicorn_gevent's parts were 1.08-1.7×
    the loader's mean when read after /proc, 3-10 ms after each mark, and within 0.4% since: the docstring of
    Instrument.totals; tests/test_breakdown_run.py has the real run). Stand-ins here: the order is the subject."""
    log: list[str] = []
    monkeypatch.setattr(cell, "proc_cpu_times", lambda pid: log.append("proc") or {})
    counting, breakdown = _Logs("counting", True, log), _Logs("breakdown", False, log)
    marks = cell.Marks(os.getpid(), (counting, breakdown))  # type: ignore[arg-type]
    for kind in ("measure_start", "measure_stop"):
        log.clear()
        marks({"event": kind})
        assert log == ["breakdown.totals", "counting.snapshot(None)", "proc", "breakdown.snapshot(breakdown-totals)"]
        snap = marks.snaps[kind]
        assert snap.t_then is not None and snap.t_then <= snap.t  # the others' span starts at their totals' read
    log.clear()
    marks({"event": "connected"})  # not a counted mark: nothing read
    assert log == []
