"""The breakdown's two sides agree (issue 35): the parts, details and skip reasons that
probes/breakdown/breakdown.bpf.h indexes by #define and breakdown.py names, and the arithmetic that
turns the kernel's histograms into a row (means, p99s, the composition of the slowest 1%). No BPF:
the snapshots here are made by hand, as the kernel would fill them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from netprof.probes.breakdown import DETAIL, PARTS, SKIPPED, BreakdownSnapshot, breakdown_delta
from netprof.probes.sockwait import NSLOTS, slot_of

HEADER = Path(__file__).resolve().parents[1] / "probes" / "breakdown" / "breakdown.bpf.h"


def _defines(prefix: str) -> dict[str, int]:
    text = HEADER.read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(rf"^#define {prefix}(\w+) (\d+)", text, re.M)}


def test_names_follow_the_kernel_side_order():
    p = _defines("P_")
    assert len(PARTS) == int(re.search(r"^#define NPART (\d+)", HEADER.read_text(), re.M).group(1))
    assert [p[k] for k in ("QUEUE_WAIT", "LOOP_WAIT", "RUNQUEUE", "ON_CPU", "OFF_FUTEX", "OFF_SLEEP", "OFF_IO",
                           "OFF_OTHER", "SEND", "TRANSIT", "LOADER_WAIT")] == list(range(len(PARTS)))
    assert PARTS[p["LOOP_WAIT"]] == "loop_wait" and PARTS[p["OFF_FUTEX"]] == "off_cpu_futex"
    assert PARTS[p["LOADER_WAIT"]] == "loader_wait" and PARTS[p["TRANSIT"]] == "transit"
    d = _defines("D_")
    names = ("ON_CPU_USER", "ON_CPU_SYS", "TRANSIT_IN", "TRANSIT_OUT", "SEND_CPU", "OFF_GIL", "OFF_TIMER")
    assert [DETAIL[d[k]] for k in names] == list(DETAIL)
    assert int(re.search(r"^#define NDETAIL (\d+)", HEADER.read_text(), re.M).group(1)) == len(DETAIL)
    k = _defines("K_")
    assert [SKIPPED[k[x]] for x in ("BUSY", "NO_READER", "OTHER_THREAD", "NO_SEND_EDGE", "CLOCK")] == list(SKIPPED)
    assert int(re.search(r"^#define NSKIP (\d+)", HEADER.read_text(), re.M).group(1)) == len(SKIPPED)


def _empty() -> BreakdownSnapshot:
    n = len(PARTS)
    return BreakdownSnapshot(hist=[[0] * NSLOTS for _ in range(n)], sum_ns=[0] * n, count=[0] * n,
                             detail_ns=[0] * len(DETAIL), tail_n=[0] * NSLOTS,
                             tail_ns=[[0] * NSLOTS for _ in range(n)], skipped=dict.fromkeys(SKIPPED, 0), requests=0)


def _add(s: BreakdownSnapshot, parts: dict[str, int], loader_wait: int = 0) -> None:
    """One request as bd_commit records it (every part but loader_wait, which the loader's read records)."""
    total = 0
    for k, name in enumerate(PARTS[:-1]):
        v = parts.get(name, 0)
        s.hist[k][slot_of(v)] += 1
        s.sum_ns[k] += v
        s.count[k] += 1
        total += v
    s.tail_n[slot_of(total)] += 1
    for k, name in enumerate(PARTS[:-1]):
        s.tail_ns[k][slot_of(total)] += parts.get(name, 0)
    s.requests += 1
    if loader_wait:
        k = PARTS.index("loader_wait")
        s.hist[k][slot_of(loader_wait)] += 1
        s.sum_ns[k] += loader_wait
        s.count[k] += 1


def test_means_p99_and_the_slowest_percent_composition():
    a, b = _empty(), _empty()
    _add(a, {"queue_wait": 5_000_000})  # before the window: not counted
    _add(b, {"queue_wait": 5_000_000})
    for _ in range(990):  # fast requests: on CPU 20 µs, transit 10 µs
        _add(b, {"on_cpu": 20_000, "transit": 10_000}, loader_wait=5_000)
    for _ in range(10):  # the slowest 1%: 2 ms waiting for the loop
        _add(b, {"on_cpu": 20_000, "transit": 10_000, "loop_wait": 2_000_000}, loader_wait=5_000)
    b.skipped["busy"] = 7
    d = breakdown_delta(a, b)
    assert d.requests == 1000 and d.skipped["busy"] == 7
    assert d.mean_us["on_cpu"] == pytest.approx(20.0)
    assert d.mean_us["loop_wait"] == pytest.approx(20.0)  # 10 × 2000 µs over 1000
    assert d.mean_us["loader_wait"] == pytest.approx(5.0)
    assert d.mean_us["queue_wait"] == pytest.approx(0.0)
    assert d.p99_us["on_cpu"] == pytest.approx(20.0, rel=0.04)
    # the tail is the ten slow ones, and loop_wait is what made them slow
    assert d.tail_requests == 10
    assert d.tail_us["loop_wait"] == pytest.approx(2000.0)
    assert d.tail_us["on_cpu"] == pytest.approx(20.0)
    assert d.total_p99_us == pytest.approx(2030.0, rel=0.04)
    assert d.total_mean_us == pytest.approx(20 + 20 + 10 + 5.0)


def test_the_rows_dicts_of_parts_survive_results_parquet(tmp_path):
    """`breakdown.mean_us` is a dict of parts in the row and `breakdown.mean_us.loop_wait` a column; read back,
    it is the dict again, while other groups' dotted keys stay keys (open_loop's `behind_late_us.p99`)."""
    import pandas as pd

    from netprof.profiler.model import results

    row = {"backend": "selector", "breakdown": {"attached": True, "requests": 10,
                                                "mean_us": {"loop_wait": 5.0, "on_cpu": 2.5},
                                                "skipped": {"busy": 1, "clock": 0}},
           "open_loop": {"behind_late_us.p99": 7.0}}
    flat = results.flatten(row)
    assert flat["breakdown.mean_us.loop_wait"] == 5.0 and flat["open_loop.behind_late_us.p99"] == 7.0
    store = results.ResultsStore(tmp_path)
    store.add(row)
    back = results.unflatten(pd.read_parquet(tmp_path / results.RESULTS_PARQUET).iloc[0].to_dict())
    assert back["breakdown"]["mean_us"] == {"loop_wait": 5.0, "on_cpu": 2.5}
    assert back["breakdown"]["skipped"] == {"busy": 1, "clock": 0}
    assert back["open_loop"]["behind_late_us.p99"] == 7.0


def test_remote_work_is_refused_where_no_helper_starts():
    """`--work remote:US` needs the helper `netprof run` starts beside its cells: `ab` and `knee` (warm servers
    of their own) and the C++ backends (no Python handler) refuse it in one line, exit 2, before any process."""
    from helpers import netprof_cli

    for args in (("ab", "selector", "selector", "--work", "remote:500"),
                 ("knee", "selector", "--slo", "p99<5ms", "--work", "remote:500"),
                 ("run", "cpp_epoll", "--work", "remote:500")):
        res = netprof_cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "--work remote:US" in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)


def test_io_waits_are_named_by_syscall_and_descriptor_leaving_out_clients_and_readiness_waits():
    """iowait.name_waits over two readings of bd_iowait: the server's waits on its accepted connections
    (a thread per connection reading the next request) and readiness waits (an event loop between turns)
    are not a handler's; the rest is grouped by syscall and what the descriptor is, across threads."""
    from netprof.probes.base import syscall_number
    from netprof.probes.breakdown import iowait

    recv, epoll = syscall_number("recvfrom"), syscall_number("epoll_wait")
    helper, client = iowait.FdName("TCP to 127.0.0.1:41000", client=False), iowait.FdName("TCP to x", client=True)
    names = {(7, 10): helper, (7, 11): helper, (7, 12): client, (7, 13): iowait.FdName("/db.sqlite", False)}
    first = {(7, recv, 10): 1_000_000}
    last = {(7, recv, 10): 5_000_000, (7, recv, 11): 4_000_000,  # 8 ms on the helper, from two threads
            (7, recv, 12): 90_000_000,                           # a client's next request: left out
            (7, epoll, 3): 50_000_000,                           # the loop's turn: left out
            (7, syscall_number("read"), 13): 2_000_000}          # 2 ms on a file
    got = iowait.name_waits(first, last, names)
    assert [(w.syscall, w.what, w.descriptors) for w in got] == [
        ("recvfrom", "TCP to 127.0.0.1:41000", 2), ("read", "/db.sqlite", 1)]
    assert got[0].share == pytest.approx(0.8) and got[0].ms == pytest.approx(8.0)
    assert got[0].text() == "recvfrom on 2 descriptors, TCP to 127.0.0.1:41000"
    assert iowait.name_waits(last, last, names) == []  # nothing new between two equal readings


def test_a_socket_is_named_by_its_peer_and_accepted_connections_are_clients():
    """iowait.describe on this test's own process: a listener, a connection it accepted (a client) and one it
    made (named by where it goes)."""
    import os
    import socket

    from netprof.probes.breakdown import iowait

    with socket.create_server(("127.0.0.1", 0)) as ls, socket.create_connection(ls.getsockname()) as out:
        acc, _ = ls.accept()
        with acc:
            pid, port = os.getpid(), ls.getsockname()[1]
            names = iowait.describe({(pid, 0, acc.fileno()): 1, (pid, 0, out.fileno()): 1})
            assert names[(pid, acc.fileno())].client
            assert names[(pid, out.fileno())] == iowait.FdName(f"TCP to 127.0.0.1:{port}", client=False)


def test_tail_cause_names_the_descriptor_and_where_the_wait_was_made(tmp_path):
    """tail_cause on a cell whose slowest requests waited on another service: it quotes io_wait, and with a
    --stacks file the top two stacks of that syscall that carry Python frames (a bare libc wrapper, such as a
    futex wake, says nothing of where, and is left out)."""
    import json

    import pandas as pd

    from netprof.profiler.analysis.rules import detect  # registers every rule (kit.rule_registry alone has none)
    from netprof.profiler.model import results, schema

    tail = {p: 0.0 for p in PARTS[:-1]} | {"off_cpu_io": 900.0, "on_cpu": 50.0, "transit": 50.0}
    row = {"backend": "thread", "family": "threads", "interpreter": "", "connections": 10, "pipeline": 1,
           "round": 1, "msize": 64, "work": "remote:500", "think": "none", "pinned": True, "status": "ok",
           "error": None, "messages": 1000, "duration_s": 1.0, "msgs_per_sec": 1000.0, "connected": 10,
           "breakdown": {"attached": True, "requests": 1000, "tail_us": tail, "mean_us": tail, "total_p99_us": 1000.0,
                         "io_wait": "recvfrom on 10 descriptors, TCP to 127.0.0.1:41000", "io_wait_share": 0.98,
                         "rtt_mean_us": 1000.0, "parts_mean_us": 1000.0}}
    df = pd.DataFrame([results.flatten(row)])
    stacks = {"recvfrom": [{"count": 900, "frames": ["__recv [libc.so.6]"], "python": [], "native": ["__recv"]},
                           {"count": 800, "frames": ["work (app/db.py:12)", "handle (app/server.py:40)", "__recv"],
                            "python": ["work (app/db.py:12)", "handle (app/server.py:40)"], "native": ["__recv"]},
                           {"count": 30, "frames": ["work (app/db.py:12)", "handle (app/server.py:40)", "recv2"],
                            "python": ["work (app/db.py:12)", "handle (app/server.py:40)"], "native": ["recv2"]},
                           {"count": 20, "frames": ["read (app/server.py:30)", "__recv"],
                            "python": ["read (app/server.py:30)"], "native": ["__recv"]}]}
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / f"{schema.cell_slug(df.iloc[0])}.json").write_text(json.dumps(stacks))
    (a,) = [a for a in detect(df, out_dir=tmp_path) if a["id"] == "tail_cause"]
    assert a["title"].startswith("The tail is off_cpu_io (90% of the slowest 1%)"), a["title"]
    text = a["explanation"]
    assert "mostly recvfrom on 10 descriptors, TCP to 127.0.0.1:41000 (98%)" in text, text
    # one place in the code, whatever its native leaf: merged (800 + 30), then the next place
    assert ("(--stacks, recvfrom): work (app/db.py:12) ← handle (app/server.py:40) (830 calls); "
            "read (app/server.py:30) (20 calls).") in text, text
    assert "__recv [libc.so.6]" not in text and len(a["evidence"]["stacks"]) == 3
    (a,) = [a for a in detect(df) if a["id"] == "tail_cause"]  # no --stacks: no stacks quoted
    assert "--stacks" not in a["explanation"] and "stacks" not in a["evidence"]
    assert a["evidence"]["loader's mean round trip vs parts' sum (µs)"] == "1,000 vs 1,000", a["evidence"]
    # netprof watch's row: no loader, the round trip is the server time
    (a,) = [a for a in detect(df.assign(arrivals=schema.WATCHED, latency="server")) if a["id"] == "tail_cause"]
    assert a["evidence"]["server time, mean vs parts' sum (µs)"] == "1,000 vs 1,000", a["evidence"]
    assert "readiness waits" not in a["explanation"]  # a blocking recvfrom: no timer


def test_tail_cause_names_the_loops_timers_when_its_readiness_waits_timed_out():
    """tail_cause on a cell whose off_cpu_io was mostly readiness waits that ended on their timeout
    (detail_us.off_cpu_timer: an awaited asyncio.sleep, tests/test_breakdown_run.py measures one): the loop's
    timers, not "the service it waits on" (there is none)."""
    import pandas as pd

    from netprof.profiler.analysis.rules import detect
    from netprof.profiler.model import results

    tail = {p: 0.0 for p in PARTS[:-1]} | {"off_cpu_io": 900.0, "on_cpu": 50.0, "transit": 50.0}
    row = {"backend": "own", "family": "asyncio", "interpreter": "", "connections": 1, "pipeline": 1, "round": 1,
           "msize": 64, "work": "none", "think": "none", "pinned": True, "status": "ok", "error": None,
           "messages": 1000, "duration_s": 1.0, "msgs_per_sec": 1000.0, "connected": 1,
           "breakdown": {"attached": True, "requests": 1000, "tail_us": tail, "mean_us": tail, "total_p99_us": 1000.0,
                         "detail_us": {"off_cpu_timer": 855.0}, "rtt_mean_us": 1000.0, "parts_mean_us": 1000.0}}
    (a,) = [a for a in detect(pd.DataFrame([results.flatten(row)])) if a["id"] == "tail_cause"]
    assert a["title"].startswith("The tail is off_cpu_io, the loop's timers (90% of the slowest 1%)"), a["title"]
    text = a["explanation"]
    assert "the event loop slept until a timer" in text and "95% was in readiness waits that ended on their " \
        "timeout" in text, text
    assert text.endswith("Look at the timers the handler awaits (an asyncio.sleep, a call_later, a timeout)."), text
    assert a["evidence"]["mean request: off_cpu_io until a timer (µs)"] == 855.0, a["evidence"]
    # the breakdown's table says it too, beside the part; under a tenth of off_cpu_io it says nothing
    from netprof.probes.breakdown import report

    frame = pd.DataFrame([results.flatten(row)])
    (cells,) = [r[5] for r in report.table(frame)["rows"]]
    assert cells.startswith("off_cpu_io 900 µs (90%, 95% of it until a timer), "), cells
    row["breakdown"]["detail_us"]["off_cpu_timer"] = 89.0
    (cells,) = [r[5] for r in report.table(pd.DataFrame([results.flatten(row)]))["rows"]]
    assert cells.startswith("off_cpu_io 900 µs (90%), "), cells


def test_the_reports_method_says_which_window_the_kernel_counted_over():
    """breakdown.edges (exact: the loader's window, gated in the kernel; marks: the span between netprof's reads)
    in the report's method, naming the cells counted the old way; silent on rows from before the gate."""
    import pandas as pd

    from netprof.probes.breakdown import report
    from netprof.profiler.model import results, stats

    def row(backend: str, rnd: int, edges: str | None) -> dict:
        b = {"attached": True, "requests": 1000, "mean_us": {"on_cpu": 50.0}, "rtt_mean_us": 50.0,
             "parts_mean_us": 50.0, **({"edges": edges} if edges else {})}
        return results.flatten({"backend": backend, "connections": 10, "pipeline": 1, "round": rnd, "status": "ok",
                                "msgs_per_sec": 1000.0, "breakdown": b})

    def method(*rows: dict) -> str:
        return report.edges_text(stats.aggregate(pd.DataFrame(list(rows))))

    assert "the loader's own" in method(row("selector", 1, "exact"), row("selector", 2, "exact"))
    text = method(row("selector", 1, "exact"), row("thread", 1, "marks"), row("thread", 2, "marks"))
    assert text.startswith(" In thread") and "selector" not in text, text
    assert method(row("selector", 1, None)) == ""


def test_the_gil_range_is_the_interpreters_own_runtime_and_read_once_per_file(monkeypatch):
    """`_PyRuntime` as the dynamic linker placed it in this very process (ctypes asks it), found from the
    mapped file and its load bias; a second lookup of the same file reuses the symbol (a run's cells start the
    same interpreter each time, ~0.1 s of ELF parsing each)."""
    import ctypes

    from netprof.probes.breakdown import gil

    if os.geteuid() != 0:
        pytest.skip("/proc/PID/map_files needs root (netprof runs as root)")
    want = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, gil.SYMBOL))
    gil._symbols.clear()
    lo, hi = gil.runtime_range(os.getpid()) or (0, 0)
    assert lo == want and hi - lo > 1000, (hex(lo), hex(want), hi - lo)
    parsed = dict(gil._symbols)
    assert len(parsed) >= 1
    reads: list[object] = []
    monkeypatch.setattr(gil, "_read_symbol", lambda f: reads.append(f))
    assert gil.runtime_range(os.getpid()) == (lo, hi) and reads == []


@pytest.mark.parametrize("client, parts, fires", [("libzmq", 700.0, True), ("libzmq", 970.0, False),
                                                  ("native", 700.0, False), (None, 700.0, True)])
def test_loader_queue_names_libzmqs_own_queue_and_the_option_that_removes_it(client, parts, fires):
    """A ZeroMQ cell whose parts fall short of the loader's round trip by more than 5% under libzmq (rows written
    before zmq_client was recorded: libzmq too) is the loader's own queue; under native, or within 5%, nothing."""
    import pandas as pd

    from netprof.profiler.analysis.rules import detect  # registers every rule (kit.rule_registry alone has none)
    from netprof.profiler.model import results

    mean = {p: 0.0 for p in PARTS} | {"queue_wait": parts - 100.0, "transit": 60.0, "loader_wait": 40.0}
    row = {"backend": "zmq_raw", "family": "zeromq", "reads": "frames", "interpreter": "", "connections": 100,
           "pipeline": 1, "round": 1, "msize": 64, "work": "none", "think": "none", "pinned": True, "status": "ok",
           "error": None, "messages": 100000, "duration_s": 1.0, "msgs_per_sec": 100000.0, "connected": 100,
           "breakdown": {"attached": True, "requests": 99000, "mean_us": mean, "tail_us": mean,
                         "rtt_mean_us": 1000.0, "parts_mean_us": parts}}
    if client:
        row["zmq_client"] = client
    found = [a for a in detect(pd.DataFrame([results.flatten(row)])) if a["id"] == "loader_queue"]
    assert bool(found) == fires, found
    if fires:
        (a,) = found
        assert a["title"].startswith("30% of the round trip is the loader's libzmq queue"), a["title"]
        assert "--zmq-client native" in a["explanation"] and a["evidence"]["not in any part (µs)"] == 300


def test_the_probe_sentence_names_the_breakdown_when_it_carried_the_socket_wait_set():
    """A --breakdown run's rows have both groups attached: the headline's probe sentence names the breakdown, whose
    programs cost more than the socket-wait set's alone (bench/RESULTS.md, "Probe overhead: per socket message")."""
    import pandas as pd

    from netprof.probes.sockwait import report

    both = pd.DataFrame([{"sockwait.attached": True, "breakdown.attached": True}])
    assert report.probe_note(both).startswith(" The breakdown's probes (--breakdown: the socket-wait set with ")
    alone = pd.DataFrame([{"sockwait.attached": True}])
    assert report.probe_note(alone).startswith(" The socket-wait probes (--sockwait) were attached for the whole")
    assert report.probe_note(pd.DataFrame([{"lat_us": 1.0}])) == ""
