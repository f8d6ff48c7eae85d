"""`netprof run --breakdown` end to end (issue 35): real backends, the real loader, the breakdown's probes.

The figures are checked against what the workload fixes and against independent truth:
- `--work sleep:1000` is a 1 ms blocking handler. Ten connections on one loop queue behind nine of them;
  with a thread each, they do not.
- The loader's own mean round trip over the same window must equal the sum of the parts' means: each part
  is measured, none is a remainder.
- /proc's CPU per message bounds the serving thread's CPU that requests claim.
"""

from __future__ import annotations

import json
import re

import psutil
import pytest

from helpers import remeasured, require_bpf, run_netprof, run_steal, stretch
from netprof.probes.breakdown import PARTS
from netprof.profiler.model import schema


def breakdown_run(tmp_path, *args: str, name: str = "run", report: bool = False) -> tuple[dict[str, dict], object]:
    require_bpf()
    out = tmp_path / name
    # the parts over the whole 0.6-s window (--probe-share 1; these tests judge parts, not throughput): over the
    # default 0.18-s probed sub-window, the thread server's parts came to 0.94 of the loader's round trip on a
    # busy host (the loader's and the probes' windows start at marks netprof hears late)
    res = run_netprof("run", *args, "-d", "0.6", "-r", "1", "--warmup", "0.3", "--probe-share", "1", "--breakdown",
                      "--wait", "--json", *(() if report else ("--no-report",)), "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {r["backend"]: r for r in json.loads(res.stdout)["runs"]}
    for r in rows.values():
        assert r["status"] == "ok", r
        assert r["probes"] == ["counting", "breakdown"], r["probes"]
        assert r["breakdown"]["attached"] is True and r["sockwait"]["attached"] is True
        assert set(r["breakdown"]["mean_us"]) == set(PARTS)
    return rows, out


def brief(b: dict) -> dict:
    """What a failed check on a breakdown group says first (remeasured keeps 600 characters of each try's):
    the counts, the window's edges, the skips, the sums."""
    return {k: b.get(k) for k in ("edges", "requests", "messages", "skipped", "transit_in_unseen", "parts_mean_us",
                                  "rtt_mean_us", "mean_us")}


def followed(r: dict) -> None:
    """Nearly every request of the window was followed: 80% of the loader's count. The window is the loader's
    own (`edges` exact: the kernel counts over the bounds the loader announced, however late netprof hears its
    marks; docs/breakdown.md, "The window it counts over"); what it leaves out are the skips, by reason. (A CI run
    of 2026-12-05, before the gate, followed 702 of the 880 the loader counted over a 0.596-s span read: the edges
    alone do not explain it, and its log cut the skips off; the counts and skips now come first.)"""
    b = r["breakdown"]
    assert b["edges"] == "exact", brief(b)
    assert b["requests"] >= 0.8 * b["messages"], (brief(b), r.get("counted"))
    # and every request of the window is followed or skipped for a reason, none lost without one: the two sum to
    # the loader's count but for the requests in flight at the edges (the kernel's time is the answer's arrival, the
    # loader's its read; 83 of 37,587 at 100 connections, cpp_epoll, 2026-12-05; 0-7 elsewhere). One request in
    # flight per connection, as in every run here: a skip counts an arrival, and pipelined requests share them
    in_flight = r["connections"] * (r.get("pipeline") or 1)
    accounted = b["requests"] + sum(b["skipped"].values())
    assert abs(accounted - b["messages"]) <= 2 * in_flight + 0.002 * b["messages"], brief(b)


def adds_up(b: dict, within: float = 0.05) -> None:
    """The parts' means against the loader's own mean round trip of the same window."""
    assert b["parts_mean_us"] == pytest.approx(b["rtt_mean_us"], rel=within), brief(b)
    assert b["unattributed_us"] == pytest.approx(b["rtt_mean_us"] - b["parts_mean_us"])


def test_a_blocking_handler_on_one_loop_is_queue_wait_and_with_threads_it_is_not(tmp_path):
    remeasured(lambda i: breakdown_run(tmp_path, "selector", "thread", "-c", "10", "--work", "sleep:1000",
                                       name=f"run{i}", report=True), _blocking_handler)


def _blocking_handler(rows: dict, out) -> None:
    for r in rows.values():
        followed(r)
    sel, thr = rows["selector"]["breakdown"], rows["thread"]["breakdown"]
    # the upper bounds below are the host's wake-ups and waits: longer on a run the hypervisor stole from (helpers.
    # stretch: a fresh-clone run of 2026-12-02 at 31-42% steal slept 1,647-1,785 µs a request in three tries)
    late = stretch(run_steal(out))
    for b in (sel, thr):
        adds_up(b)
        # the request's own handler: its 1 ms sleep, off CPU, after its read (900 µs: a physical floor)
        assert 900 <= b["mean_us"]["off_cpu_sleep"] <= 1500 * late, (b, late)
        assert b["mean_us"]["loop_wait"] < 50, b
        assert b["mean_us"]["off_cpu_futex"] < 100, b
    # one loop: each request waits unread while the loop sleeps in the nine handlers before it
    assert sel["mean_us"]["queue_wait"] >= 5000, sel
    assert thr["mean_us"]["queue_wait"] < 500 * late, (thr, late)
    # the slowest 1% are slow for the same reason on the loop
    assert sel["tail_us"]["queue_wait"] > 0.5 * sel["total_p99_us"], sel
    # transit is measured both ways, in µs on loopback
    for b in (sel, thr):
        assert 0 < b["detail_us"]["transit_in"] < 200 * late and 0 < b["detail_us"]["transit_out"] < 200 * late, b
    # the per-connection socket-wait rows are there as --sockwait writes them
    assert (out / "sockwait_conn.parquet").is_file()
    # the report names the tail's cause: the loop's queue on selector, the handler's own sleep with threads
    found = {a["backend"]: a for a in json.loads((out / "summary.json").read_text())["anomalies"]
             if a["id"] == "tail_cause"}
    sel_a = found["selector"]
    assert sel_a["title"].startswith("The tail is queue_wait") and sel_a["severity"] == "warning", sel_a
    # with threads the slowest 1% are the handler's own sleep and, as ten threads wake on one CPU, the wait for
    # it: either may lead (runqueue led with 55-56% in some runs here); the sleep is always a large share of it
    tail = sum(v for v in thr["tail_us"].values() if v)
    assert thr["tail_us"]["off_cpu_sleep"] + thr["tail_us"]["runqueue"] > 0.8 * tail, thr
    # each of the slowest requests slept its own 1 ms (a physical floor; how much runqueue comes on top is the
    # host's: 3 ms of a 4-ms tail with a neighbour busy on both CPUs)
    assert thr["tail_us"]["off_cpu_sleep"] >= 900, thr
    if "thread" in found:  # named when one part holds at least half of the tail
        assert found["thread"]["title"].startswith(("The tail is off_cpu_sleep", "The tail is runqueue")), found
    assert "Request breakdown" in (out / "report.md").read_text() and (out / "plots" / "breakdown.png").is_file()


def test_the_gil_is_a_futex_wait_unpinned_and_a_run_queue_pinned(tmp_path):
    """Twenty threads spinning 50 µs each in Python: unpinned, a request waits for the GIL (a futex inside the
    interpreter's _PyRuntime); pinned to one CPU, the threads queue for the CPU instead. The report says both."""
    require_bpf()

    # The whole 1-s window probed (--probe-share 1), as the other breakdown runs here: the parts are judged
    # against the loader's mean of the same window, and the default 0.3-s middle (1,360 requests) let its edges
    # cut this load's millisecond stalls apart from the loader's (parts 1.13 of the round trip in each of three
    # tries at 35-43% steal, fresh-clone CI 2026-12-02).
    def measure(i: int) -> tuple[list, object]:
        out = tmp_path / f"gil{i}"
        res = run_netprof("run", "thread", "--pin", "both", "--work", "spin:50", "-c", "20", "-d", "1", "-r", "1",
                          "--warmup", "0.3", "--probe-share", "1", "--breakdown", "--no-report", "--wait", "--json",
                          "--out", str(out), timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(res.stdout)["runs"], out

    remeasured(measure, _gil)


def _gil(runs: list, out) -> None:
    for r in runs:
        followed(r)
    rows = {bool(r["pinned"]): r["breakdown"] for r in runs}
    unpinned, pinned = rows[False], rows[True]
    for b in (unpinned, pinned):
        adds_up(b)
    assert unpinned["mean_us"]["off_cpu_futex"] > 0.3 * unpinned["parts_mean_us"], unpinned
    assert unpinned["detail_us"]["off_cpu_gil"] >= 0.9 * unpinned["mean_us"]["off_cpu_futex"], unpinned
    assert pinned["mean_us"]["runqueue"] > 5 * pinned["mean_us"]["off_cpu_futex"], pinned
    found = [a for a in json.loads((out / "summary.json").read_text())["anomalies"] if a["id"] == "tail_cause"]
    gil = [a for a in found if "the GIL" in a["title"]]
    assert gil and "pinned run of the same server shows it as runqueue" in gil[0]["explanation"], found


def test_a_handler_waiting_on_another_service_is_off_cpu_io(tmp_path):
    """`--work remote:500`: each handler makes a blocking call to netprof's helper, which answers after
    500 µs (on the loader's CPU, as another host would): off_cpu_io, not the handler's CPU. The helper is gone
    after the run."""
    remeasured(lambda i: breakdown_run(tmp_path, "thread", "selector", "-c", "10", "--work", "remote:500",
                                       "--stacks", name=f"run{i}"), _remote_call)
    helper = "netprof.profiler.core.remote_work"
    assert not [p for p in psutil.process_iter(["cmdline"]) if helper in (p.info["cmdline"] or [])]


def _remote_call(rows: dict, out) -> None:
    for name, r in rows.items():
        followed(r)
        b = r["breakdown"]
        adds_up(b)
        # 500 µs asked: at least that (a physical floor). The ceiling is this host's speed (the helper's own
        # wake-up on a busy CPU adds to it: 817 µs on a slow, busy hour), so it comes from the same run: a
        # handler's call occupies its serving thread, which turns one request per cycle, so the loader's rate
        # bounds it — one loop serves the ten connections one call at a time (cycle = 1/rate), ten threads
        # serve one connection each (cycle = 10/rate, the loader's turn-around included)
        cycle_us = (10 if name == "thread" else 1) * 1e6 / r["msgs_per_sec"]
        assert 480 <= b["mean_us"]["off_cpu_io"] <= cycle_us, (name, b["mean_us"], cycle_us)
        if name == "selector":  # the loop does little else than wait for the helper
            assert b["mean_us"]["off_cpu_io"] >= 0.7 * cycle_us, (name, b["mean_us"], cycle_us)
        assert b["mean_us"]["on_cpu"] < 100, (name, b["mean_us"])
        # the wait is named: the handler's recv on its connection to the helper (one per serving thread)
        assert re.fullmatch(rf"recvfrom on (one descriptor|{'10' if name == 'thread' else 'x'} descriptors), "
                            r"TCP to 127(\.\d+){3}:\d+", b["io_wait"] or ""), (name, b["io_wait"])
        assert b["io_wait_share"] > 0.9, (name, b["io_wait_share"])
        # two paths to the same time: the threads' waits on that descriptor per message, the requests' off_cpu_io,
        # both over the loader's window (the waits by their part inside it: 0.1-0.2% apart here, 2026-12-05; 15% was
        # the margin while the waits were over the span read)
        assert b["edges"] == "exact", b
        assert b["io_wait_ms"] * 1e3 / b["messages"] == pytest.approx(b["mean_us"]["off_cpu_io"], rel=0.05), b
        # a blocking call's wait: no readiness wait that ended on its timeout (the next test's timers)
        assert b["detail_us"]["off_cpu_timer"] < 0.05 * b["mean_us"]["off_cpu_io"], (name, b["detail_us"])
    assert rows["thread"]["breakdown"]["mean_us"]["queue_wait"] < 100
    assert rows["selector"]["breakdown"]["mean_us"]["queue_wait"] > 4000  # nine others' calls on one loop
    # --stacks beside --breakdown walks the waits' syscalls too, in an evidence round whose handlers reach the
    # same helper: both servers' recvfrom stacks include the remote call's, with Python frames (the thread
    # server's threads start when the loader connects: the stack set learns them at the window's start)
    for name in ("selector", "thread"):
        (doc,) = [json.loads(f.read_text()) for f in (out / "stacks").glob(f"{name}-*.json")]
        assert any("_remote_call" in " ".join(st["python"]) for st in doc.get("recvfrom", [])), (name, doc)


# One server of each kind the registry has (issue 49: the sweep over all 40 built-in backends is
# bench/breakdown_registry.py, with its committed results; every backend's answers are still checked by
# tests/test_backends.py): two event loops (the acceptance's asyncio_sock and uvloop_sock), one thread per
# connection, one pre-fork, one C++ loop, one reader handing requests to other threads, one ZeroMQ ROUTER, two
# HTTP servers (one of them gunicorn's gevent workers, whose slowest requests waited unread).
REPRESENTATIVES = ("asyncio_sock", "uvloop_sock", "thread", "prefork", "cpp_epoll", "select_prethread", "zmq_raw",
                   "uvicorn_httptools", "gunicorn_gevent")
# Measured in 1-s windows (a run per protocol of their own) rather than 0.3 s. gunicorn_gevent serves its connections
# unevenly (Jain 0.65-0.9 on the first host; 0.08-0.42 on the host of 2026-12-05, where half the connections got no
# answer in the window), so a few requests that waited most of the window make its means, and the loader and the
# kernel count them at their own window edges: its starved requests are answered in a burst 2-3 ms after each of
# netprof's marks (its reads, ms of CPU on two cores, idle the busy connections), and with the parts read after /proc
# (3-10 ms after the mark, fitted on a tcpdump of the run) they were 1.08-1.7× the loader's mean on that host; read
# first (Instrument.totals), within 3% in four of four (and 0.4% with load past the edges; bench/breakdown_edges.py).
# socketserver and thread (a Python thread per connection) accept their last connections 0.3-0.8 s late in about half
# the runs (the accept thread starved of the GIL by the busy handlers): the first requests on those wait where no
# probe sees them (connections are learnt at accept), so in 0.3 s the loader's mean is 1-29% above the parts and
# Little's law was once 5% (CI) and once 14% off (thread, 1 of 5 local runs); in 1-s runs Little's law was within 0.9%
# in 8 of 8 (the loader's mean 4-6% above). gunicorn_gevent's counted window is a 1-s sub-window of a 2-s run, the
# load running on past both its edges: in the whole window probed (the others' runs), the loader's stop at its end is
# when the starved requests are served, and the probes' last read, ~1 ms after it, took in enough of them to put the
# parts 16% over the loader's mean once in eight runs here (within 1.1% in eight of eight with a sub-window).
# (duration, --probe-share) of the runs of their own:
OWN_RUN = {"gunicorn_gevent": ("2", "0.5"), "thread": ("1", "1")}
REGISTRY_RUN = ("0.3", "1")  # the others'


def _registry_run(tmp_path, backends: list[str], name: str, duration: str = "0.3",
                  *more: str, share: str = "1") -> tuple[dict[str, dict], object]:
    require_bpf()
    out = tmp_path / name
    res = run_netprof("run", *backends, "-c", "100", "-d", duration, "-r", "1", "--warmup", "0.2", "--probe-share",
                      share, "--breakdown", "--no-report", "--wait", "--json", "--out", str(out), *more, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {r["backend"]: r for r in json.loads(res.stdout)["runs"]}
    # each cell's share of the host's CPU time the hypervisor stole (meta.json's host_per_cell, /proc/stat)
    host = {e["cell"]: e for e in json.loads((out / "meta.json").read_text())["host_per_cell"]}
    for r in rows.values():
        r["steal_frac"] = host[schema.cell_slug(r)].get("steal_frac") or 0.0
    return rows, out


# An asyncio echo server (the user's own, --cmd) whose handler awaits a 500-µs timer before each answer: its loop
# sleeps in epoll_wait until the timer fires, no descriptor ready.
TIMER_SERVER = """
import asyncio, sys
async def serve(reader, writer):
    try:
        while True:
            data = await reader.readexactly(64)
            await asyncio.sleep(0.0005)
            writer.write(data)
    except asyncio.IncompleteReadError:
        writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
asyncio.run(main())
"""


def test_a_handler_awaiting_a_timer_is_off_cpu_io_until_a_timer(tmp_path):
    """One connection to an asyncio server whose handler awaits asyncio.sleep(0.0005): the request's time after its
    read is the loop asleep in epoll_wait, off_cpu_io, and nearly all of it in waits that ended on their timeout
    (detail_us.off_cpu_timer: the loop woke for a timer, not a descriptor; tail_cause then names the timers, tests/
    test_breakdown_parts.py). Against the blocking call of the test above (no timer)."""
    import sys

    script = tmp_path / "timer_server.py"
    script.write_text(TIMER_SERVER)
    rows, _ = breakdown_run(tmp_path, "--cmd", f"{sys.executable} {script} {{port}}", "-c", "1")
    (r,) = rows.values()
    followed(r)
    b = r["breakdown"]
    adds_up(b)
    # 500 µs asked: at least that, and the timer's share of it nearly all (the loop's few turns between are on CPU)
    assert b["mean_us"]["off_cpu_io"] >= 480, b["mean_us"]
    assert b["detail_us"]["off_cpu_timer"] >= 0.9 * b["mean_us"]["off_cpu_io"], (b["detail_us"], b["mean_us"])


def test_parts_add_up_on_a_server_of_every_kind(tmp_path):
    """A server of each kind at 100 connections: the sum of the parts' means within 5% of the loader's mean
    round trip, or of Little's law (100 requests in flight ÷ the loader's msgs/s). Each truth fails on its
    own in some runs here: Little's law while connections are still being set up (fork: fewer than 100 in
    flight), the loader's mean in one run in three with a thread per connection (13–15% above Little's law,
    while the parts matched it within 2–5%). A wrong breakdown matches neither. Requests handed from a reading
    thread to another that answers (select_prethread) are followed across the two. On the two event loops of
    the acceptance, asyncio_sock and uvloop_sock, "handler" is mostly loop_wait, and the CPU requests claim
    matches /proc's."""
    from netprof.backends import registry

    names = [n for n in REPRESENTATIVES if registry.uninstalled_requirement(registry.get(n)) is None]
    assert names == list(REPRESENTATIVES), "every representative is installed by the project's own setup"
    groups: dict[tuple[str, str, str], list[str]] = {}  # a run per protocol (echo, HTTP) and window
    for n in names:
        groups.setdefault((registry.get(n).protocol, *OWN_RUN.get(n, REGISTRY_RUN)), []).append(n)
    # the HTTP servers in one run (one run's start-up, ~3 s, instead of two): the window of the one that needs
    # it (gunicorn_gevent) serves the other as well
    http = [(k, v) for k, v in groups.items() if k[0] == "http"]
    if len(http) > 1:
        window = max((k[1:] for k, _ in http), key=lambda w: float(w[0]))
        for k, _ in http:
            del groups[k]
        groups[("http", *window)] = [b for _, v in http for b in v]
    rows: dict[str, dict] = {}
    outs: dict[str, object] = {}
    for (proto, duration, share), backends in groups.items():
        # the ZeroMQ backend (in the echo run) through the loader's own ZMTP client: under libzmq (the default)
        # the round trip also holds the loader's queue between libzmq's I/O thread and its own, which is no part
        # of the server's time (the loader_queue finding names it)
        zmq = any(registry.get(b).transport == "zmq" for b in backends)
        more = ("--zmq-client", "native") if zmq else ()
        made, out = _registry_run(tmp_path, backends, f"{proto}-{duration}", duration, *more, share=share)
        rows.update(made)
        outs.update(dict.fromkeys(made, out))
    assert set(rows) == set(names)

    def misses(r: dict) -> tuple | None:
        """The parts against both truths, or None when either holds within 5%."""
        assert r["status"] == "ok", (r["backend"], r.get("error"))
        b = r["breakdown"]
        followed(r)
        assert r["zmq_client"] == "native" or r["reads"] != "frames", r
        little = 100 / ((r.get("probed") or {}).get("msgs_per_sec") or r["msgs_per_sec"]) * 1e6  # the counted window's
        ratios = (b["parts_mean_us"] / b["rtt_mean_us"], b["parts_mean_us"] / little)
        # 5%, or that times helpers.stretch on a cell the hypervisor stole from: the probes' window is two counter
        # reads at the loader's marks, each late by as long as netprof's vCPU waits (uvloop_sock 1.07-1.09 of both
        # truths in two tries of a fresh-clone run of 2026-12-02 during 25-47% steal stretches)
        if min(abs(x - 1) for x in ratios) <= 0.05 * stretch(r["steal_frac"]):
            return None
        return (*(round(x, 3) for x in ratios), round(b["parts_mean_us"]), round(b["rtt_mean_us"]),
                f"jain {r.get('per_conn', {}).get('jain', float('nan')):.2f}", f"steal {r['steal_frac']:.0%}")

    # One re-measure, alone and in a 2-s run, of a server that misses: both truths are window means, and a
    # server that serves its connections unevenly puts its slowest requests at the window's edges, which the
    # loader and the probes (whose window is two counter reads, up to 35 ms late on a busy host) cut apart.
    # Measured: gunicorn_gevent in CI (2026-11-28, 1-s window) 1.169 of the loader's mean and 1.054 of Little's
    # law, after six of six within 1.5% here. A wrong breakdown misses in both tries; every try is in the message.
    tries: dict[str, list] = {}
    for name, r in rows.items():
        miss = misses(r)
        if miss is None:
            continue
        tries[name] = [miss]
        zmq = ("--zmq-client", "native") if registry.get(name).transport == "zmq" else ()
        share = OWN_RUN.get(name, REGISTRY_RUN)[1]
        made, outs[name] = _registry_run(tmp_path, [name], f"again-{name}", "2", *zmq, share=share)
        rows[name] = again = made[name]
        tries[name].append(misses(again))
    bad = {name: t for name, t in tries.items() if t[-1] is not None}
    assert not bad, bad
    # select_prethread reads in one thread and answers from another (its connection's sender): each request is
    # followed on the reader's clocks up to the read and on the sender's after it, none left as other_thread
    handed = rows["select_prethread"]["breakdown"]
    assert handed["skipped"]["other_thread"] <= 0.01 * handed["messages"], handed["skipped"]
    # on an event loop, what --sockwait calls "handler" (read → answer) is mostly other requests' turns; the
    # CPU requests claim (on_cpu and the answer's send syscall, whose CPU is in the send and transit parts'
    # time) against /proc's CPU per message over the same window: the loop's own work between requests
    # (epoll_wait, its bookkeeping) is claimed by the next request's read
    # gunicorn_gevent serves its connections unevenly: its slowest requests waited unread
    tail = rows["gunicorn_gevent"]["breakdown"]["tail_us"]
    assert max(tail, key=lambda p: tail[p] or 0) == "queue_wait", tail
    loops = ("asyncio_sock", "uvloop_sock")  # measured again together, where measured again
    remeasured(lambda i: ({n: rows[n] for n in loops}, max((outs[n] for n in loops), key=run_steal)) if i == 0
               else _registry_run(tmp_path, list(loops), f"loops-{i}"), _loop_cpu)


def _loop_cpu(rows: dict, out) -> None:
    for name in ("asyncio_sock", "uvloop_sock"):
        b, handler = rows[name]["breakdown"], rows[name]["sockwait"]["handler_mean_us"]
        # other requests' turns, or the loop itself preempted (runqueue: 566 µs of a 1,093-µs handler with a
        # neighbour busy on the backend's CPU)
        assert b["mean_us"]["loop_wait"] + b["mean_us"]["runqueue"] >= 0.8 * handler, (name, b["mean_us"], handler)
        assert b["mean_us"]["on_cpu"] < 0.1 * handler, (name, b["mean_us"], handler)
        # within 15%, and above it by what the hypervisor stole while the backend ran (the probes' wall clock keeps
        # it, this kernel's PARAVIRT_TIME_ACCOUNTING leaves it out of /proc's): its CPU's share is at most twice
        # the host's (2 CPUs). uvloop_sock read 24.3 µs against /proc's 20.7 beside bench/bystander.py on an hour
        # whose hypervisor stole ~10% of the CPUs (fresh-clone run, 2026-12-01).
        # (at most 0.9 of it: a 37-41% steal hour put the probes' CPU at 2.3-3.5× /proc's in three tries)
        steal = min(2 * rows[name]["steal_frac"], 0.9)
        assert 0.85 * b["proc_cpu_us"] <= b["cpu_us"] <= 1.15 * b["proc_cpu_us"] / (1 - steal), (name, b, steal)
