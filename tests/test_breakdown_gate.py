"""The breakdown and the socket-wait set count over the loader's window itself, however late netprof hears the
loader's marks.

The loader announces its window with `connected` (PROTOCOL.md, "Events"), before it opens; the socket-wait set's
gate (sockwait.bpf.c, window.lo/hi) then drops every read and answer outside it, and the breakdown's programs every
request whose answer reaches the loader outside it (breakdown.bpf.h, bd_in_window); the window's start is what was
read before it opened. Without that the counters' window is the span between netprof's
reads at the two marks: on a busy host the first read came 35 ms late in a 0.3-s window (the row's
`counted.start_heard_ms` has said how late since), and a mean over requests moved with what fell near an edge
(gunicorn_gevent's parts 0.94-1.44 of the loader's mean: bench/RESULTS.md, "The breakdown's window edges").

Here the first mark reaches netprof 150 ms late on purpose, in-process (a stall of the reading process does that):
the real loader, a real echo server (test_loader's), the real breakdown. The gated count is the loader's, to the
few requests in flight at an edge; the parts add up to the loader's mean round trip of the same window."""

from __future__ import annotations

import os
import sys
import time

import pytest
from test_breakdown_run import brief
from test_loader import start_echo

from netprof.probes.breakdown.breakdown import BreakdownProbes
from netprof.probes.breakdown.instrument import Breakdown
from netprof.profiler.run import cell
from netprof.profiler.run.loader_client import RunRequest

LATE_S = 0.15  # how late netprof hears measure_start


def _late_first_mark(marks: cell.Marks):
    def on_event(event: dict) -> None:
        if event.get("event") == "measure_start":
            time.sleep(LATE_S)
        marks(event)
    return on_event


@pytest.fixture(scope="module")
def probes(bpf):
    """One compiled set for the module (~2 s a compile here), re-targeted by each measurement as a run's cells do."""
    with BreakdownProbes(attached=False) as p:
        yield p


def _measure(group, loader, probes, *, warmup: float, same_clock: bool = True) -> tuple[dict, dict]:
    echo, port = start_echo(group)
    inst = Breakdown(probes)
    try:
        inst.target(echo.pid)
        inst.attach()
        marks = cell.Marks(echo.pid, (inst,), same_clock=same_clock)
        result = loader.run(RunRequest(target=f"127.0.0.1:{port}", connections=10, duration=0.6, warmup=warmup),
                            on_event=_late_first_mark(marks))
        marks.close()
        row = {"backend": "echo", "connections": 10, "pipeline": 1, "round": 1,
               "breakdown": {"attached": True}, "sockwait": {"attached": True}}
        cell.measure_row(row, result, marks, (inst,))
    finally:
        inst.detach()
    return row, result


def _brief(b: dict, row: dict) -> dict:
    return brief(b) | {"counted": row.get("counted")}  # and how late the marks were heard


def test_a_late_first_mark_counts_the_loaders_window_exactly(probes, group, loader):
    row, result = _measure(group, loader, probes, warmup=0.3)
    b = row["breakdown"]
    assert b["edges"] == "exact", _brief(b, row)
    assert row["counted"]["start_heard_ms"] >= 1e3 * LATE_S  # the stall happened, and the marks' span lost it
    # the loader's count of its window, not one carried over to the 0.45 s read; a request or two per connection
    # at each edge can fall either side (the kernel's time is the answer's arrival, the loader's its read)
    assert b["messages"] == result["messages"], _brief(b, row)
    assert b["requests"] == pytest.approx(result["messages"], abs=2 * 10 + sum(b["skipped"].values())), _brief(b, row)
    assert b["parts_mean_us"] == pytest.approx(b["rtt_mean_us"], rel=0.05), _brief(b, row)
    # the socket-wait set it extends, gated on the same bounds by each read's and answer's time at the server: its
    # answers are the loader's count to the requests in flight at an edge, over the loader's window's length
    s = row["sockwait"]
    assert s["edges"] == "exact" and s["messages"] == result["messages"], s
    assert s["handler_count"] == pytest.approx(result["messages"], abs=2 * 10), s
    # the bounds the loader announced, each rounded to the microsecond: their difference is 0.6 s within 1 µs (fresh212:
    # 0.599999, a float's width past abs=1e-6)
    assert s["window_s"] == pytest.approx(0.6, abs=1.5e-6) and s["max_exact"], s


def test_no_gate_without_time_to_set_it_or_on_another_clock(probes, group, loader):
    """No warm-up: the window opens as `connected` is sent, before netprof can set a gate, so the marks' reads are
    the edges (and the row says so); nor with a loader whose clock is not ours (another host)."""
    for warmup, same_clock in ((0.0, True), (0.3, False)):
        row, result = _measure(group, loader, probes, warmup=warmup, same_clock=same_clock)
        b = row["breakdown"]
        assert b["edges"] == "marks", (warmup, same_clock, _brief(b, row))
        # the figures are then over the span read, 150 ms short of the 0.6-s window: the loader's count carried
        # over to it at the window's mean rate, as before the gate (an estimate: 5% above the requests followed in
        # a run here whose rate rose after the connections came up)
        assert b["messages"] < 0.85 * result["messages"], (result["messages"], _brief(b, row))
        s = row["sockwait"]
        assert s["edges"] == "marks" and s["handler_count"] < 0.85 * result["messages"], (result["messages"], s)


_BLOCKED_READER = (  # reads a byte at a time from the descriptor it is given: blocked in read() between them
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "while os.read(fd, 1): pass\n")


def _until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def test_a_descriptor_wait_counts_by_its_part_inside_the_window(probes, group):
    """The descriptor waits behind `io_wait` are gated too, by their part inside the window (breakdown.bpf.h,
    bd_gated_span): a process blocked in read() from before the window opens until inside it, and again from then
    until after it closes, waited the whole window there, and no more."""
    r, w = os.pipe()
    try:
        reader = group.spawn("blocked-reader", [sys.executable, "-c", _BLOCKED_READER, str(r)], pass_fds=(r,))
        reader.wait_line("ready", 30)
        os.close(r)
        probes.target(reader.pid)
        probes.attach()
        os.write(w, b"x")  # it reads and blocks again, now seen entering read()
        time.sleep(0.05)
        t0 = time.monotonic()
        assert probes.gate(t0 + 0.2, t0 + 0.5)
        _until(t0 + 0.35)
        os.write(w, b"x")  # woken inside the window: 0.15 s of that wait in it
        _until(t0 + 0.7)
        os.write(w, b"x")  # woken after it: 0.15 s of this one in it
        time.sleep(0.05)
        last = probes.snapshot(describe=False).breakdown
    finally:
        os.close(w)
        probes.detach()
    base = last.gate_base
    assert base is not None
    waits = {k: v - base.io_wait.get(k, 0) for k, v in last.io_wait.items() if k[0] == reader.pid and k[1] == 0}
    assert len(waits) == 1 and list(waits.values())[0] == pytest.approx(0.3e9, abs=5e6), (waits, base.io_wait)


_TWO_READERS = (  # the main thread reads fd1 a byte at a time; its byte b"n" starts a thread reading fd2 likewise
    "import os, sys, threading\n"
    "fd1, fd2 = int(sys.argv[1]), int(sys.argv[2])\n"
    "def drain(fd):\n"
    "    while os.read(fd, 1): pass\n"
    "print('ready', flush=True)\n"
    "while (b := os.read(fd1, 1)):\n"
    "    if b == b'n': threading.Thread(target=drain, args=(fd2,), daemon=True).start()\n")


def test_inside_the_window_only_descriptors_not_named_since_the_gate_are_read(probes, group, monkeypatch):
    """netprof's /proc reads at the window's first mark are CPU the server shares: the descriptors waited on before
    the window are named as the gate is set, and inside it only one first waited on since is read; after the window
    every one is read again. Real processes, pipes and probes; `describe` is watched (not replaced) to see which
    descriptors it was asked to name."""
    from netprof.probes.breakdown import iowait

    asked: list[set] = []
    real = iowait.describe

    def watched(waits):
        asked.append({(k[0], k[2]) for k in waits})
        return real(waits)

    monkeypatch.setattr(iowait, "describe", watched)
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        reader = group.spawn("two-readers", [sys.executable, "-c", _TWO_READERS, str(r1), str(r2)],
                             pass_fds=(r1, r2))
        reader.wait_line("ready", 30)
        probes.target(reader.pid)
        probes.attach()
        for _ in range(2):  # seen entering read() after the first, woken from it by the second: fd1 is a key
            os.write(w1, b"x")
            time.sleep(0.05)
        t0 = time.monotonic()
        assert probes.gate(t0 + 0.2, t0 + 0.8)
        at_gate = asked[-1]
        _until(t0 + 0.3)
        os.write(w1, b"n")  # inside the window: a thread starts reading fd2 ...
        time.sleep(0.05)
        os.write(w2, b"x")  # ... and is woken once, so fd2 is a key too
        time.sleep(0.05)
        asked.clear()
        first = probes.snapshot().breakdown  # as at the window's first mark
        inside = list(asked)
        _until(t0 + 0.85)
        asked.clear()
        last = probes.snapshot().breakdown
        after = list(asked)
    finally:
        for fd in (r1, r2, w1, w2):
            os.close(fd)
        probes.detach()
    one, two = (reader.pid, r1), (reader.pid, r2)
    assert one in at_gate and two not in at_gate, at_gate
    assert inside == [{two}], inside  # fd1 was named at the gate, not read again
    assert first.fd_names[one].what.startswith("pipe:[") and first.fd_names[two].what.startswith("pipe:["), \
        first.fd_names
    assert after and {one, two} <= after[0], after  # after the window: all of them again
    assert set(last.fd_names) >= {one, two}
