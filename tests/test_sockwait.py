"""The socket-wait probes (issue 22, probes side) on real backends under the one-shot loader.

Each case starts a backend pinned to CPU 0, targets it, runs `netprof-loader` one-shot on CPU 1
and reads the window from just after targeting to the loader's exit (connect phase and warm-up
included: every figure checked here is steady). The margins hold on a busy 2-core machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings

import psutil
import pytest

from helpers import require_tool, starvation_disturbed
from netprof.probes import SockWaitProbes, sockwait_delta
from netprof.probes.proc import proc_cpu_times
from netprof.probes.sockwait import NSLOTS, WaitDist, conn_rows, log2_quantile_us, slot_bounds, slot_of
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.model import stats as stats_mod
from netprof.profiler.run import meta

needs_bpf = pytest.mark.usefixtures("bpf")


@pytest.fixture(scope="module")
def sw():
    from helpers import require_bpf

    require_bpf()
    with SockWaitProbes() as probes:
        yield probes


def run_load(sw: SockWaitProbes, backend: str, connections: int, pipeline: int = 1, work: str = "none",
             duration: float = 2.0, framing: str = "message", skip: float = 0.0):
    """(loader stats, SockWaitDelta, backend pid) of one loader run against a fresh backend. The stats gain
    `backend_voluntary`: how many times the backend gave up its CPU inside the window (its loop found nothing
    ready and slept in epoll_wait, or it blocked), from /proc, the same window as the delta."""
    loader = require_tool("netprof-loader")
    with ProcessGroup() as group:
        be = group.spawn(f"backend-{backend}", [sys.executable, "-m", "netprof.backends", backend, "--host",
                                                "127.0.0.1", "--port", "0", "--msize", "64", "--framing", framing,
                                                "--work", work], cpus="0")
        _, pid, port = be.wait_line("ready", 30).split()[:3]
        sw.target(int(pid))
        proc = psutil.Process(int(pid))
        a, vol0 = sw.snapshot(), proc.num_ctx_switches().voluntary
        p = subprocess.Popen([loader, "--target", f"127.0.0.1:{port}", "-c", str(connections), "-d", str(duration),
                              "--warmup", "0.5", "--pipeline", str(pipeline), "--cpus", "1", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if skip:  # the window starts `skip` s into the load (the sockets were learned at connection setup)
            time.sleep(skip)
            a, vol0 = sw.snapshot(), proc.num_ctx_switches().voluntary
        waited, t0 = _run_delay_s(p.pid), time.monotonic()
        last = (waited, t0)
        while p.poll() is None:  # the loader's own wait for its CPU, read until it exits (its /proc goes with it)
            time.sleep(0.1)
            now = (_run_delay_s(p.pid), time.monotonic())
            last = now if now[0] >= last[0] else last  # a read as it exited finds nothing
        stdout, stderr = p.communicate(timeout=duration + 60)
        vol = proc.num_ctx_switches().voluntary - vol0
        out = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
        b = _quiet_snapshot(sw, int(pid))
    assert out.returncode == 0, out.stderr[-500:]
    stats = {**json.loads(out.stdout.strip().splitlines()[-1]), "backend_voluntary": vol,
             "loader_waited": round((last[0] - waited) / max(last[1] - t0, 1e-3), 3)}
    assert stats["connected"] == connections
    return stats, sockwait_delta(a, b), int(pid)


def _run_delay_s(pid: int) -> float:
    """The seconds a process's threads have spent runnable, waiting for a CPU (their schedstat, probes/proc.py)."""
    return proc_cpu_times(pid)["runq_s"]


def _monopolies_broke(t: dict) -> bool:
    """A try of the starvation load whose carriers waited a millisecond, with the window's reason for it
    (helpers.starvation_disturbed)."""
    return t["most_us"] >= 1000 and starvation_disturbed(t)


def _quiet_snapshot(sw: SockWaitProbes, pid: int):
    """A snapshot once the backend has read what the loader sent before it exited: the histograms are read
    before the sockets, so reads still under way put a few in one and not the other (3 of 24,386 in a fresh-clone
    run of 2026-11-29). Quiet: its CPU time unchanged over 50 ms, within 2 s. (Not by snapshots taken until two
    agree: each snapshot restarts the window's maximum.)"""
    proc = psutil.Process(pid)
    last, deadline = None, time.monotonic() + 2
    while time.monotonic() < deadline:
        t = sum(proc.cpu_times()[:2])
        if t == last:
            break
        last = t
        time.sleep(0.05)
    return sw.snapshot()


def split(d) -> dict:
    """stats.conn_wait_split of a window as the cell rows compute it: per-connection own waits
    (conn_rows' wait_us, the p90 of its reads), and the same split of the per-connection median and
    mean waits."""
    rows = conn_rows(d)
    served = [r["bytes"] for r in rows]
    typ = stats_mod.conn_wait_split(served, [r["wait_us"] for r in rows])
    split_of = {k: stats_mod.conn_wait_split(served, [r[k] if r[k] is not None else r["unread_age_us"] for r in rows])
                for k in ("wait_mean_us", "wait_p50_us")}
    return {**typ, "mean_ratio": split_of["wait_mean_us"]["conn_wait_ratio"],
            "median_ratio": split_of["wait_p50_us"]["conn_wait_ratio"],
            "served_ratio": typ["conn_bytes_most"] / max(typ["conn_bytes_least"], 1)}  # never read: 0 bytes


def test_histogram_slots_round_trip():
    for v in [0, 1, 15, 16, 17, 31, 32, 1000, 1023, 1024, 123_456, 10**9, 2**35 - 1]:
        lo, hi = slot_bounds(slot_of(v))
        assert lo <= v < hi, v
        assert slot_of(v) == NSLOTS - 1 or (hi - lo) / max(lo, 1) <= 1 / 16 or lo < 16
    d = WaitDist.from_hist([0] * 100 + [10] + [0] * (NSLOTS - 101), 10 * slot_bounds(100)[0], None)
    assert d.count == 10 and not d.max_exact
    assert slot_bounds(100)[0] / 1e3 <= d.p50_us <= d.max_us == slot_bounds(100)[1] / 1e3


def test_log2_quantiles():
    assert log2_quantile_us([0] * 36, 0.5) is None
    # mid-bucket, geometrically
    assert log2_quantile_us([0] * 10 + [4] + [0] * 25, 0.5) == pytest.approx(2 ** 10.5 / 1e3)
    # 85 reads of ~50 µs (bucket 15: 32.8–65.5 µs) and 15 of ~1 s (bucket 29): the median is a 50 µs
    # read's bucket, the p90 a 1 s one's (a connection that got one long turn and waited for the others)
    counts = [0] * 36
    counts[15], counts[29] = 85, 15
    assert 32.768 <= log2_quantile_us(counts, 0.5) <= 65.536
    assert 2**29 / 1e3 <= log2_quantile_us(counts, 0.9) <= 2**30 / 1e3


@needs_bpf
def test_starved_connections_are_the_ones_whose_data_waits(sw):
    """asyncio_sock, message framing, pipeline 8: a connection whose sock_recv finds data never
    yields, so others starve. Issue 22: the least-served 10% of connections wait ≥ 100× longer than
    the most-served (those that carried the load, a tenth at most) — per connection its own wait (the
    p90 of its reads' waits): a served connection's reads find data that arrived a few handler times
    ago (tens of µs, 8 in flight), a starved one's, at each turn it gets, data that waited for the loop
    (ms to s). Not the median: a starved connection that got one long turn in the window has mostly
    fast reads (CI once: median ratio ×1.09; here 2 windows of 14;
    probes/sockwait/sockwait.CONN_WAIT_QUANTILE). The mean per connection cannot show it: with 8 in
    flight a connection's mean wait is 8 over its rate (Little's law), so the ratio of means is the
    ratio of service — checked here too, against the kernel's own byte counts, and the service
    against the loader's. Pipeline 1 is the control: strict ping-pong, no starvation.
    The window starts 1 s into the load: in the connect phase the loop is still idle, and a connection
    read a few times then and starved since would count its fast early reads (CI once: ×11)."""
    # 20 µs of handler CPU per message keeps the backend the slower side, the condition of the effect: a
    # connection keeps the loop only while its queue never drains, and on this host the loader's CPU slows
    # in regimes of seconds (bench/host_regimes.py), which let the queues drain and the monopolies break
    # (fresh-clone CI, no work: least-served tenth read 2,241 messages, p90 ratio ×1.5).
    # The most-served are the connections that carried the load, a tenth at most (stats.conn_wait_split):
    # on a host where the loader is the slower side few monopolies hold at a time (one, in a fresh-clone
    # CI and here), and the top tenth would take in starved connections. A window in which even they
    # waited a millisecond saw the monopolies break, and it is measured again (3 tries at most) where the
    # window says why: the backend's loop slept (a voluntary switch: every queue had drained, so the loader,
    # not the loop, was the slower side for a while), the loader waited for its CPU (another process on it:
    # 22% of the window beside bench/bystander.py --duty 0.5, ×1.5-2.3 with the loop asleep at most once)
    # or the hypervisor stole more than a tenth of the host's CPU (helpers.starvation_disturbed). All were seen:
    # ×1.17 in each of three tries at a steal above 10% beside bench/bystander.py (2026-12-02), and ×14 with the
    # carriers at 13.7 ms at a steal of 8% (a pass-2 run the same day; the loop's switches were not yet
    # recorded). A loop that never slept keeps its queues full: there a ratio under ×100 fails at once (beside
    # the bystander and on a quiet hour the loop slept 0 times in 3 s, ×720-16,000).
    tries = []
    for _ in range(3):
        before = meta.host_load()
        stats, d, _ = run_load(sw, "asyncio_sock", 100, pipeline=8, work="spin:20", duration=3.0, skip=1.0)
        steal = meta.cell_load(before, meta.host_load()).get("steal_frac") or 0.0
        s = {**split(d), "messages": stats["messages"]}
        tries.append({"ratio": s["conn_wait_ratio"], "most_us": s["conn_wait_most_us"], "steal": steal,
                      "loop_slept": stats["backend_voluntary"], "loader_waited": stats["loader_waited"]})
        # carriers that waited a millisecond: measured again, with a reason or not (fresh-clone runs of
        # 2026-12-06: ×11.9 with the carriers at 19.5 ms, the loop never asleep and nothing stolen); the last try
        # is judged as before, ×100 unless every try was disturbed for a reason the window gives
        if tries[-1]["most_us"] < 1000:
            break
    print(tries)  # each try's figures (shown with a failure)
    assert d.exact, d.overflow
    assert 10 <= d.sockets <= 100  # the starved may not be read at all (they are in per_conn: unread)
    assert d.unmeasured == {"unknown": 0, "unmatched": 0}  # learned at connection setup
    assert len(d.per_conn) == 100
    if all(_monopolies_broke(t) for t in tries):
        # every try disturbed: the least-served still waited longer than the most-served
        warnings.warn(f"the carriers took turns in every try (the loop slept or the host stole): {tries}",
                      stacklevel=1)
        assert s["conn_wait_ratio"] > 1, tries
    else:
        assert s["conn_wait_ratio"] >= 100, (s, tries)
        assert s["conn_wait_most_us"] < 1000 < s["conn_wait_least_us"], (s, tries)
    # Little's law: the ratio of mean waits is the ratio of service — while the least-served read enough
    # for the window's edges not to matter (10 rounds of their 8 in flight). Starved harder, their mean
    # wait is capped by the window while their service is not (CI once: one message read, ×16,078 served,
    # ×7,457 in mean wait, ×61,981 in median wait).
    if s["conn_bytes_least"] >= 64 * 8 * 10:
        assert 0.7 <= s["mean_ratio"] / s["served_ratio"] <= 1.4, s
    else:
        assert s["mean_ratio"] <= 1.4 * s["served_ratio"], s
    # the kernel's count is the loader's: the messages the server read from 1 s in to the end are at
    # most those the loader's window (0.5 s in, 3 s long) got answered, plus what was in flight, and at
    # least most of them (decile medians do not compare: which connections are favoured rotates)
    read = sum(c.bytes for c in d.per_conn) / 64
    assert 0.5 * stats["messages"] <= read <= stats["messages"] + 100 * 8, (read, stats["messages"])

    # The control's window starts 1 s in, as the starvation's does: in the connect phase the connections
    # connected first are served while the rest connect, and on a slow hour that alone set them apart (CI,
    # window from targeting: served ×1.68, 346 against 580 messages each, 2026-12-02; ×1.00-1.01 from 1 s in,
    # eight windows quiet and beside the bystander).
    _, d1, _ = run_load(sw, "asyncio_sock", 100, pipeline=1, duration=1.5, skip=1.0)
    s1 = split(d1)
    # ×1–2, far from starvation's ×100+: ranked by service, the least-served tenth of a fair loop are the
    # connections that happened to wait longest, so the ratio sits at or above 1 (fresh-clone CI: ×2.03). Served
    # within ×2, where starvation serves ×100 apart: a fair loop reads every ready connection once per turn, and a
    # request that lands just after the loop's poll waits one turn more, so a connection falls at most every
    # other turn behind (×1.12 once in the eight windows above).
    assert 0.5 <= s1["conn_wait_ratio"] <= 5 and 0.8 <= s1["served_ratio"] <= 2, s1


@needs_bpf
def test_head_of_line_blocking_behind_slow_handlers_and_server_time_fits_in_the_round_trip(sw):
    """selector with a 1 ms sleep per message at 10 connections: each message waits behind the other
    nine handlers (median wait ≥ 5 ms) while its own handler takes ≈ 1 ms. And wait + handler of a request
    (server time: its first byte's arrival → its answer) is part of the loader's round trip: the medians
    compare within 10%, and the means too (one load for both: each costs the suite seconds)."""
    stats, d, _ = run_load(sw, "selector", 10, work="sleep:1000", duration=1.0)
    assert d.wait.count > 500 and d.handler.count > 500
    assert d.wait.p50_us >= 5000, d.wait
    assert 800 <= d.handler.p50_us <= 3000, d.handler
    assert all(c.wait_mean_us >= 4000 for c in d.per_conn), [c.wait_mean_us for c in d.per_conn]
    assert all(c.wait_p50_us >= 4000 for c in d.per_conn), [c.wait_p50_us for c in d.per_conn]
    rtt = stats["latency_us"]
    assert d.server.count > 500
    assert d.server.p50_us <= rtt["p50"] * 1.1, (d.server, rtt)
    assert d.server.mean_us <= rtt["mean"] * 1.1, (d.server, rtt)
    # and it is most of it here (transit on loopback is tens of µs against ~10 ms)
    assert d.server.p50_us >= rtt["p50"] * 0.7, (d.server, rtt)
    assert d.wait.mean_us + d.handler.mean_us <= rtt["mean"] * 1.1


@needs_bpf
def test_thread_per_connection_does_not_queue(sw):
    """thread backend, same work: every connection has its own thread, so nothing waits in the queue."""
    stats, d, _ = run_load(sw, "thread", 10, work="sleep:1000", duration=1.0)
    assert d.wait.count > 500
    assert d.wait.p50_us < 1000, d.wait
    assert 800 <= d.handler.p50_us <= 3000, d.handler


@needs_bpf
def test_target_clears_the_previous_cell(sw):
    """Re-targeting forgets every socket and figure: the next window holds only the new backend's."""
    _, d1, pid1 = run_load(sw, "selector", 20, duration=0.5)
    assert d1.sockets == 20 and {c.tgid for c in d1.per_conn} == {pid1}
    assert d1.wait.count > 0
    sw.target(os.getpid())  # nothing of the previous target survives a target()
    s = sw.snapshot()
    assert s.present == 0 and not s.socks and not any(map(any, s.hist)) and not any(s.counters.values())
    _, d2, pid2 = run_load(sw, "asyncio_sock", 7, duration=0.5)
    assert pid2 != pid1
    assert d2.sockets == 7 and len(d2.per_conn) == 7, d2.per_conn
    assert {c.tgid for c in d2.per_conn} == {pid2}
    assert d2.overflow == {"evicted": 0, "fifo_merged": 0, "insert_failed": 0}
    assert d2.wait.count == sum(c.waits for c in d2.per_conn)
    assert d2.handler.count == sum(c.answers for c in d2.per_conn)


_GATED_ECHO = (  # one connection; b"s" is answered after 30 ms, anything else at once
    "import socket, sys, time\n"
    "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
    "print(l.getsockname()[1], flush=True)\n"
    "c, _ = l.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
    "while (d := c.recv(1)):\n"
    "    if d == b's': time.sleep(0.03)\n"
    "    c.send(d)\n")


_LATE_READER = (  # two connections: the first echoes; b"g" on it makes the server read the second (then echo "g")
    "import socket, sys\n"
    "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(2)\n"
    "print(l.getsockname()[1], flush=True)\n"
    "a, _ = l.accept(); b, _ = l.accept()\n"
    "while (d := a.recv(1)):\n"
    "    if d == b'g': b.send(b.recv(64))\n"
    "    a.send(d)\n")


def test_a_connection_starved_through_the_window_and_served_after_it_keeps_its_unread_age(sw):
    """A connection whose data arrived inside the gated window and was first read after its end (as the loader's
    stop frees a starving loop, before netprof's last read) is in per_conn at the age that data had at the window's
    end (sockwait.bpf.c's unread_at_hi). It dropped out of the table before (CI of 2026-12-06: 95 of 100 in the
    starvation run); read again after the window's end, its FIFO had moved on."""
    with ProcessGroup() as group:
        srv = group.spawn("late-reader", [sys.executable, "-c", _LATE_READER], cpus="0")
        port = int(srv.wait_line("", 30))
        sw.target(srv.pid)
        a = socket.create_connection(("127.0.0.1", port))
        b = socket.create_connection(("127.0.0.1", port))
        b_port = b.getsockname()[1]  # the server's peer port of b (per_conn's dport)
        with a, b:
            a.sendall(b"x")
            assert a.recv(1) == b"x"  # both accepted
            t0 = time.monotonic()
            assert sw.gate(t0 + 0.2, t0 + 0.5)
            time.sleep(max(0.0, t0 + 0.25 - time.monotonic()))
            sent = time.monotonic()
            b.sendall(b"y" * 64)  # inside the window; unread until after it
            a.sendall(b"x")
            assert a.recv(1) == b"x"  # a is served inside the window
            time.sleep(max(0.0, t0 + 0.55 - time.monotonic()))
            a.sendall(b"g")  # after the window: the server reads b, then answers on both
            assert b.recv(64) == b"y" * 64 and a.recv(1) == b"g"
            last = sw.snapshot()
        assert sent < t0 + 0.45, "the late connection's data was sent too close to the window's end to tell"
        d = sockwait_delta(last.gate.base, last)
        late = [c for c in d.per_conn if c.dport == b_port]
        assert len(late) == 1 and late[0].reads == 0, d.per_conn
        assert late[0].unread_age_us == pytest.approx((t0 + 0.5 - sent) * 1e6, abs=20_000), late[0]


def test_a_gate_counts_only_its_window(sw):
    """SockWaitProbes.gate: given [lo, hi) before it opens, the programs count only the reads and answers inside it
    (whenever the figures are read after), the figures read at the gate are its start, and its maxima are its own:
    30-ms answers before the gate is set, between then and lo, and after hi are in none of them."""
    with ProcessGroup() as group:
        srv = group.spawn("gated-echo", [sys.executable, "-c", _GATED_ECHO], cpus="0")
        port = int(srv.wait_line("", 30))
        sw.target(srv.pid)
        cli = socket.create_connection(("127.0.0.1", port))
        cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def echo(n: int, slow: bool = False) -> None:
            for m in [b"x"] * n + [b"s"] * slow:
                cli.sendall(m)
                assert cli.recv(1) == m

        with cli:
            first = sw.snapshot()
            echo(10, slow=True)  # before the gate: in its base
            t0 = time.monotonic()
            assert sw.gate(t0 + 0.3, t0 + 0.6)
            echo(10, slow=True)  # after the gate is set, before its window opens: dropped
            time.sleep(max(0.0, t0 + 0.35 - time.monotonic()))
            echo(40)
            inside = time.monotonic() - t0
            time.sleep(max(0.0, t0 + 0.65 - time.monotonic()))
            echo(10, slow=True)  # after the window: dropped
            last = sw.snapshot()
        assert inside < 0.58, f"the window's 40 echoes ended {inside:.3f} s after the gate: too late to tell"
        assert last.gate is not None and last.gate.base.seq > first.seq
        d = sockwait_delta(last.gate.base, last)
        assert d.handler.count == d.wait.count == 40, d
        assert sum(c.answers for c in d.per_conn) == sum(c.reads for c in d.per_conn) == 40, d.per_conn
        assert d.window_s == pytest.approx(0.3) and d.handler.max_exact, d
        assert d.handler.max_us < 20_000, d.handler  # none of the 30-ms answers
        # ungated reading of the same snapshots: everything since `first`, the two earlier slow answers too
        whole = sockwait_delta(first, last)
        assert whole.handler.count == 11 + 40 and whole.handler.max_us >= 30_000 * 0.9, whole.handler
    sw.target(0)  # no gate after a re-target
    assert sw.snapshot().gate is None
