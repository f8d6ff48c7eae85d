"""Every anomaly rule on constructed rows: it fires when it should and stays silent when it should not.
No processes: the rows have the shape the orchestrator writes (nested dicts, flattened by results)."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from netprof.profiler.analysis import rules as anomalies
from netprof.profiler.analysis.rules import Thresholds, detect
from netprof.profiler.model import results, schema

FAIR = {"min": 990, "p5": 995, "p50": 1000, "p95": 1005, "max": 1010, "jain": 0.999, "active_share": 0.95, "idle": 0}


def _merge(base: dict, over: dict) -> dict:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return base


def make_row(backend="selector", connections=100, pipeline=1, round=1, mps=50_000.0, **over) -> dict:
    """A healthy ping-pong row: fair, ordinary syscalls, balanced CPU, modest tail, idle loader."""
    duration = 2.0
    messages = int(mps * duration)
    row = {
        "backend": backend, "family": "selectors", "interpreter": "cpython-3.11.2", "connections": connections,
        "pipeline": pipeline, "round": round, "msize": 64, "work": "none", "think": "none", "pinned": True,
        "status": "ok", "error": None, "messages": messages, "duration_s": duration, "msgs_per_sec": mps,
        "connected": connections, "setup_s": 0.1,
        "lat_us": {"p50": 100.0, "p90": 150.0, "p95": 180.0, "p99": 300.0, "p999": 600.0, "max": 900.0, "mean": 110.0},
        "per_conn": dict(FAIR),
        "errors": {"connect": 0, "reset": 0, "timeout": 0, "mismatch": 0},
        "loader_cpu": {"user_s": 0.4, "sys_s": 0.6, "cpu_frac": 0.5},
        "probes": ["counting"],
        "cpu": {"user_s": 0.99, "sys_s": 0.81, "user_frac": 0.55, "busy_frac": 0.9},
        "faults": {"minor_per_msg": 0.001, "major": 0},
        "syscalls": {"sendto": messages, "recvfrom": messages, "epoll_wait": messages // 100},
        "syscalls_per_msg": {"sendto": 1.0, "recvfrom": 1.0, "epoll_wait": 0.01},
        "ctx_switches_per_msg": 0.01,
        "ctx": {"voluntary_per_msg": 0.01, "involuntary_per_msg": 0.001, "migrations_per_msg": 0.0},
    }
    return _merge(row, copy.deepcopy(over))


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame([results.flatten(r) for r in rows])


def healthy_run() -> list[dict]:
    """Two backends × three scales × three rounds, ±2% round to round: nothing to report."""
    rows = []
    for backend, base in (("selector", 60_000.0), ("uvloop", 45_000.0)):
        for c in (10, 100, 1000):
            for rnd, jitter in ((1, 0.98), (2, 1.0), (3, 1.02)):
                rows.append(make_row(backend, c, round=rnd, mps=base * jitter))
    return rows


def ids(found: list[dict], id: str | None = None) -> list[dict]:
    return [a for a in found if id is None or a["id"] == id]


# --- no false alarms ---------------------------------------------------------------------------

def test_healthy_run_fires_nothing():
    assert detect(frame(*healthy_run())) == []


def test_every_rule_is_registered_with_a_docstring():
    expected = {"starvation", "readiness_churn", "mmap_churn", "lock_contention", "cpu_split", "loader_bottleneck",
                "latency_tail", "throughput_collapse", "noisy", "failed_cells", "machine_busy", "ring_work",
                "accept_backlog", "short_probed_part"}
    assert expected <= set(anomalies.RULES)
    assert all(fn.__doc__ for fn in anomalies.RULES.values())


def test_anomaly_shape_is_the_contract():
    found = detect(frame(make_row(lat_us={"p999": 5000.0})))
    assert found
    for a in found:
        assert {"id", "backend", "connections", "severity", "title", "explanation", "evidence"} <= set(a)
        json.dumps(a)  # JSON-ready: no numpy scalars


# 1 starvation ------------------------------------------------------------------------------------

STARVED = {"min": 0, "p5": 0, "p50": 2, "p95": 30, "max": 9000, "jain": 0.04, "active_share": 0.03, "idle": 400}


def test_starvation_with_eager_read_and_pipeline_trigger():
    rows = [make_row("asyncio_sock", 1000, pipeline=1, syscalls_per_msg={"epoll_ctl": 2.0}),
            make_row("asyncio_sock", 1000, pipeline=4, per_conn=STARVED, syscalls_per_msg={"epoll_ctl": 0.04})]
    found = ids(detect(frame(*rows)), "starvation")
    assert len(found) == 1
    a = found[0]
    assert (a["backend"], a["connections"], a["pipeline"], a["severity"]) == ("asyncio_sock", 1000, 4, "critical")
    assert "sock_recv" in a["explanation"] and "without yielding" in a["explanation"]
    assert "already waiting" in a["explanation"] and "trigger" in a["explanation"]
    assert "Under strict ping-pong" in a["explanation"]
    assert a["evidence"]["Jain index (1 = fair)"] == 0.04
    assert a["evidence"]["connections serving 95% of messages"] == "30 of 1000"
    assert "selector_events.py" in a["evidence"]["source"]


def test_starvation_without_eager_read_gives_no_sock_recv_story():
    # epoll_ctl at what register-per-read implies: the reads did go through the loop
    row = make_row("weird", 1000, per_conn=STARVED, syscalls_per_msg={"epoll_ctl": 2.0})
    a = ids(detect(frame(row)), "starvation")[0]
    assert "sock_recv" not in a["explanation"]
    assert "epoll_ctl per message the register-per-read model implies" not in a["evidence"]


def test_no_sock_recv_story_for_batched_reads_or_a_thread_per_connection():
    """The eager-read story is asyncio's `sock_recv`, one read per message with no epoll_ctl. bench/reports/modern
    (2026-12-06) told it of two cells it did not fit: anyio on asyncio at 1000 connections, 8 in flight, whose
    transport read several messages at once (0.61 reads per message) and starved only the connections still in its
    listen queue; and socketserver, a thread per connection with no event loop, matched as a "sock" backend by name."""
    batched = [make_row("anyio_asyncio", 1000, pipeline=1, syscalls_per_msg={"epoll_ctl": 2.0}),
               make_row("anyio_asyncio", 1000, pipeline=8, per_conn=STARVED,
                        syscalls_per_msg={"epoll_ctl": 0.11, "recvfrom": 0.61})]
    threads = [make_row("socketserver", 1000, pipeline=p, per_conn=STARVED, syscalls_per_msg={"epoll_wait": 0.0})
               for p in (1, 8)]
    for rows in (batched, threads):
        for a in ids(detect(frame(*rows)), "starvation"):
            assert "sock_recv" not in a["explanation"] and "mechanism" not in a["evidence"], a["explanation"]
    # A raw-socket loop's name still brings the model when its own cells show none (a --cmd server, one cell).
    sock = make_row("my_sock", 1000, pipeline=8, per_conn=STARVED, syscalls_per_msg={"epoll_ctl": 0.01})
    assert "sock_recv" in ids(detect(frame(sock)), "starvation")[0]["explanation"]
    # Another loop's sock_recv that reads first (rloop's) is not called asyncio's; asyncio's own is.
    for family, whose in (("rloop", "its loop's `sock_recv`, as asyncio's, tries"),
                          ("asyncio", "asyncio's `sock_recv` tries")):
        ev = ids(detect(frame({**sock, "family": family})), "starvation")[0]["evidence"]
        assert whose in ev["mechanism"], ev["mechanism"]


def test_starvation_of_tornado_names_its_inline_read():
    """tornado at 100 connections, 8 in flight (bench/reports/modern, 2026-12-06): Jain 0.61 with 0.16 reads per
    message, counts like asyncio's fair streams. Its IOStream reads the socket inline when its buffer is empty
    (`_try_inline_read`): the mechanism is named from the source, with the line, for tornado alone."""
    row = make_row("tornado", 100, pipeline=8, per_conn=STARVED, syscalls_per_msg={"recvfrom": 0.15})
    row["family"] = "tornado"
    (a,) = ids(detect(frame(row)), "starvation")
    assert "first reads the socket inline (`_try_inline_read`" in a["explanation"], a["explanation"]
    assert a["evidence"]["source"].startswith("tornado/iostream.py:"), a["evidence"]["source"]
    assert "IOStream" in a["evidence"]["mechanism"]
    streams = {**row, "backend": "asyncio", "family": "asyncio"}
    assert "mechanism" not in ids(detect(frame(streams)), "starvation")[0]["evidence"]


def test_starvation_of_a_thread_per_connection_names_the_run_queue_and_the_gil():
    """A thread per connection at 1000 connections, 8 in flight, every connection accepted first (2026-12-06): ~820 of
    its 1001 threads waiting for the one CPU, 297 of them without a turn in the probed window. The run queue is named
    with its figures for any backend; the GIL for Python's threads only; nothing of it for a loop whose one thread
    had the CPU to itself, nor for a row written before `sched`."""
    sched = {"runq_mean": 818.1, "turn_us": 128.9, "wait_per_turn_us": 105_856.0, "threads": 1001, "turns_p5": 0.0,
             "turns_p50": 4.0, "turns_max": 22.0, "waiting_no_turn": 297}
    cpp = make_row("cpp_th", 1000, pipeline=8, per_conn=STARVED, sched=sched, family="cpp")
    (a,) = ids(detect(frame(cpp)), "starvation")
    assert "on average 818 of its 1001 threads were runnable and waiting for it" in a["explanation"], a["explanation"]
    assert "the kernel's scheduler chose which connections were served" in a["explanation"]
    assert "297 were still waiting for their first" in a["explanation"]
    assert "With a thread per connection" in a["explanation"] and "GIL" not in a["explanation"]
    assert a["evidence"]["mechanism"].startswith("cpp_th had more runnable threads than its CPU could run")
    assert a["evidence"]["threads runnable but waiting for a CPU, on average (/proc schedstat)"] == "818 of 1001"
    # Python's threads: the GIL where futex calls show its waits (socketserver, 8 in flight: 0.63-1.37 per message)
    py = {**cpp, "backend": "socketserver", "family": "threads", "syscalls_per_msg": {"futex": 0.9}}
    (a,) = ids(detect(frame(py)), "starvation")
    assert "GIL is a flag behind a condition variable, not a queue" in a["explanation"]
    assert "ceval_gil" in a["evidence"]["source"] and "A Python thread must also hold the GIL" in a["explanation"]
    assert "0.90 futex calls per message say its threads waited for it" in a["explanation"]
    # turns even (30 of 36 at p5), 317 waiting: the GIL chose, not the scheduler
    even = {"sched.turns_p5": 30.0, "sched.turns_p50": 36.0, "sched.turns_max": 60.0, "sched.waiting_no_turn": 0,
            "sched.runq_mean": 317.0}
    (a,) = ids(detect(pd.DataFrame([{**results.flatten(py), **even}])), "starvation")
    assert "had their turns on the CPU evenly (30 to 60), so what chose was the GIL" in a["explanation"]
    assert a["evidence"]["mechanism"].startswith("socketserver's threads took turns on the CPU evenly but waited")
    assert "the kernel's scheduler chose" not in a["explanation"], a["explanation"]
    # `thread` at ping-pong (2026-12-06: Jain 0.73, turns 34-59, 0.035 futex calls per message): neither is shown
    quiet_gil = {**py, "backend": "thread", "syscalls_per_msg": {"futex": 0.035}}
    (a,) = ids(detect(pd.DataFrame([{**results.flatten(quiet_gil), **even}])), "starvation")
    assert "GIL" not in a["explanation"] and "the kernel's scheduler chose" not in a["explanation"]
    assert ("evenly (30 to 60) and seldom waited on a lock (0.04 futex calls per message): what favoured some "
            "connections over the others is not in these counts") in a["explanation"], a["explanation"]
    assert "mechanism" not in a["evidence"]
    # With connections still queued the listen queue is named as the cause: the counts rule the others out, no more
    queued = {**results.flatten(quiet_gil), **even, "accept_queue_at_start": 853}
    (a,) = ids(detect(pd.DataFrame([queued])), "starvation")
    assert "seldom waited on a lock (0.04 futex calls per message): neither the scheduler nor a lock chose" in \
        a["explanation"] and "not in these counts" not in a["explanation"], a["explanation"]
    assert "853 of the loader's connections were still in its listen queue" in a["explanation"], a["explanation"]
    few = make_row("prethread", 1000, pipeline=8, per_conn=STARVED, family="threads",
                   sched={**sched, "threads": 3, "runq_mean": 2.0, "waiting_no_turn": 0})
    (a,) = ids(detect(frame(few)), "starvation")
    assert "on average 2 of its 3 threads" in a["explanation"]
    assert "With a thread per connection" not in a["explanation"]
    for quiet in (make_row("selector", 1000, pipeline=8, per_conn=STARVED, sched={**sched, "runq_mean": 0.01}),
                  make_row("cpp_th", 1000, pipeline=8, per_conn=STARVED),
                  make_row("cpp_th", 1000, pipeline=8, per_conn=STARVED, sched={**sched, "threads_exited": 600})):
        (a,) = ids(detect(frame(quiet)), "starvation")
        assert "wanted the CPU" not in a["explanation"], a["explanation"]


def test_starvation_uses_per_connection_counts():
    per_conn = pd.DataFrame({"backend": "b", "interpreter": "cpython-3.11.2", "connections": 100, "pipeline": 1,
                             "round": 1, "conn": range(100), "messages": [10_000] + [1] * 99})
    row = make_row("b", 100, per_conn={"jain": 0.01, "active_share": 0.01})
    a = ids(detect(frame(row), per_conn=per_conn), "starvation")[0]
    assert a["evidence"]["top 1% of connections got"] == "99% of messages"


def test_starvation_on_idle_connections_alone_is_a_warning():
    row = make_row("b", 1000, per_conn={"min": 0, "p5": 0, "idle": 224, "jain": 0.86, "active_share": 0.67})
    a = ids(detect(frame(row)), "starvation")
    assert a and a[0]["severity"] == "warning" and "224 of 1000 connections (22%)" in a[0]["explanation"]


def test_starvation_on_idle_connections_beside_an_even_rest_says_so():
    """uvicorn_httptools at 1000 connections (bench/reports/http, 2026-12-06): a fifth of the connections got nothing
    while the rest had 57-58 each. "The busiest exchanged 1× the median" explained nothing; the idle ones do."""
    per_conn = {"min": 0, "p5": 1, "p50": 57, "p95": 58, "max": 58, "idle": 201, "jain": 0.77, "active_share": 0.71}
    (a,) = ids(detect(frame(make_row("uvicorn_httptools", 1000, per_conn=per_conn))), "starvation")
    assert a["severity"] == "critical", a
    assert ("201 of 1000 connections (20%) exchanged no message at all in the measurement window while the median "
            "connection exchanged 57 (Jain 0.77") in a["explanation"], a["explanation"]
    assert "busiest" not in a["explanation"]
    # A lopsided top still reads as one: the busiest against the median.
    lopsided = {**per_conn, "max": 580}
    (a,) = ids(detect(frame(make_row("b", 1000, per_conn=lopsided))), "starvation")
    assert "its busiest connection exchanged 10× the messages of the median one (580 vs 57)" in a["explanation"]


def test_starvation_of_a_server_still_accepting_says_so():
    """uvicorn_httptools at 1000 connections (bench/reports/http, 2026-12-06): 31 accept4 and 31 epoll_pwait in the
    probed 0.6 s, a quarter of the connections idle: one accept per turn of the loop (libuv, since 2022), so the
    connections still in the listen queue went unanswered. A server that accepts per request says nothing of it."""
    per_conn = {"min": 0, "p5": 1, "p50": 57, "p95": 58, "max": 58, "idle": 252, "jain": 0.72, "active_share": 0.7}
    messages = 21_646
    row = make_row("uvicorn_httptools", 1000, per_conn=per_conn, probed={"duration_s": 0.6, "messages": messages},
                   syscalls_per_msg={"accept4": 31 / messages, "epoll_pwait": 31 / messages, "epoll_wait": 0.0})
    (a,) = ids(detect(frame(row)), "starvation")
    assert ("It was still accepting the loader's connections while it was measured: 31 accept4 calls in the probed "
            "part of 0.6 s") in a["explanation"], a["explanation"]
    assert ("one connection per turn of its event loop (1.00 accept4 per wait), as libuv (uvloop's loop) has done "
            "since its pull request 3696") in a["explanation"], a["explanation"]
    assert a["evidence"]["accept4 per event-loop wait"] == 1.0
    # trio (epoll_wait) and socketserver (poll) accept one per turn too, and are not libuv (bench/reports/modern)
    for wait in ("epoll_wait", "poll"):
        other = {**row, "syscalls_per_msg": {"accept4": 31 / messages, wait: 31 / messages, "epoll_wait": 0.0}
                 if wait == "poll" else {"accept4": 31 / messages, wait: 31 / messages}}
        text = ids(detect(frame(other)), "starvation")[0]["explanation"]
        assert "(1.00 accept4 per wait): under load" in text and "libuv" not in text, text
    assert ("At 52 accepts a second its 252 idle connections needed ~4.9 s more to get in: a warm-up that much "
            "longer (--warmup), or one that begins once every connection has been answered (--warmup-after served), "
            "measures it with every connection served.") in a["explanation"], a["explanation"]
    # gevent's batches of accepts in one loop turn: still accepting, but not one per turn.
    row["syscalls_per_msg"] = {**row["syscalls_per_msg"], "accept4": 100 / messages, "epoll_pwait": 1 / messages}
    (a,) = ids(detect(frame(row)), "starvation")
    assert "100 accept4 calls" in a["explanation"] and "per turn" not in a["explanation"]
    # A connection per request (gunicorn_sync): accepting is its design, not a queue.
    row["syscalls_per_msg"] = {**row["syscalls_per_msg"], "accept4": 1.0}
    (a,) = ids(detect(frame(row)), "starvation")
    assert "accept4" not in a["explanation"]
    # Under --rate with connections opened as needed, an accept in the window is a new connection's.
    row["syscalls_per_msg"] = {**row["syscalls_per_msg"], "accept4": 31 / messages}
    assert "accept4" in ids(detect(frame(row)), "starvation")[0]["explanation"]
    opened = {**row, "rate": 20_000.0, "open_loop": {"conns_opened": 40}}
    assert "accept4" not in ids(detect(frame(opened)), "starvation")[0]["explanation"]
    # The listen queue read when the window opened, when the row has it (rows of this version): said first.
    row["accept_queue_at_start"] = 240
    (a,) = ids(detect(frame(row)), "starvation")
    assert ("When the window opened, 240 of the loader's connections were still in its listen queue (the kernel's "
            "accept queue of its port, /proc/net/tcp)") in a["explanation"], a["explanation"]
    assert "31 accept4 calls" in a["explanation"] and "its 240 queued connections needed ~4.6 s" in a["explanation"]
    assert a["evidence"]["connections in its listen queue when the window opened"] == 240
    # No idle connection: nothing waited in the queue.
    calm = make_row("uvicorn_httptools", 1000, probed={"duration_s": 0.6, "messages": messages},
                    syscalls_per_msg={"accept4": 31 / messages}, per_conn={**per_conn, "idle": 0, "jain": 0.5})
    assert "accept4" not in ids(detect(frame(calm)), "starvation")[0]["explanation"]


def test_a_window_opened_with_connections_not_yet_accepted_is_said_when_none_starved():
    """The accept queue read when the window opened, of a cell whose connections were all served in the end: their
    first requests waited for the accept inside the window (accept_backlog). When some starved, starvation says it
    and accept_backlog does not repeat it; an empty queue (or a row without the field) says nothing."""
    messages = 21_646
    row = make_row("uvicorn_httptools", 1000, accept_queue_at_start=169,
                   probed={"duration_s": 0.6, "messages": messages},
                   syscalls_per_msg={"accept4": 23 / messages, "epoll_pwait": 23 / messages, "epoll_wait": 0.0})
    (a,) = ids(detect(frame(row)), "accept_backlog")
    assert a["severity"] == "warning" and a["title"].startswith("Connections not yet accepted when the window opened")
    assert a["explanation"].startswith("When the window opened, 169 of the loader's connections were still in its "
                                       "listen queue"), a["explanation"]
    assert "one connection per turn of its event loop" in a["explanation"] and "not the server's steady state" in \
        a["explanation"]
    assert ("or one that begins once every connection has been answered (--warmup-after served), measures it with "
            "every connection served") in a["explanation"], a["explanation"]
    # A cell whose loader waited for every connection's first answer and began without some (its connect timeout ran
    # out) says so, instead of advising what it did.
    waited = {**row, "warmup_after": "served", "served_first": {"served": 831, "unserved": 169, "s": 10.0}}
    text = ids(detect(frame(waited)), "accept_backlog")[0]["explanation"]
    assert ("(--warmup-after served), but began with 169 unanswered when its connect timeout ran out" in text
            and "or one that begins" not in text), text
    reopened = {**waited, "served_first": {"served": 1000, "unserved": 0, "s": 0.4}}
    text = ids(detect(frame(reopened)), "accept_backlog")[0]["explanation"]
    assert "(--warmup-after served) and had them all: these connections were opened since" in text, text
    assert not ids(detect(frame(row)), "starvation")
    few = {**row, "accept_queue_at_start": 3}
    assert ids(detect(frame(few)), "accept_backlog")[0]["severity"] == "info"
    starved = make_row("uvicorn_httptools", 1000, accept_queue_at_start=169, per_conn={**FAIR, "idle": 200})
    assert ids(detect(frame(starved)), "starvation") and not ids(detect(frame(starved)), "accept_backlog")
    for calm in ({**row, "accept_queue_at_start": 0}, make_row("uvicorn_httptools", 1000)):
        assert not ids(detect(frame(calm)), "accept_backlog")


def test_unanswered_of_a_cell_of_several_rounds_counts_whole_requests():
    """A merged cell's unanswered requests are a mean over its rounds: 533 requests, not 533.3, and it says so."""
    row = make_row("gevent", 100, per_conn=STARVED,
                   unanswered={"count": 533.3, "max_age_us": 2_500_000.0, "connections": 66.7})
    a = ids(detect(frame(row)), "starvation")[0]
    assert ("At the window's end 533 requests on 67 connections (the mean of its rounds) were still unanswered"
            in a["explanation"]), a["explanation"]
    assert a["evidence"]["still unanswered at the window's end"] == "533 on 67 connections, the oldest waiting 2.5 s"
    row["unanswered"] = {"count": 0.3, "max_age_us": 2_500_000.0, "connections": 0.3}
    assert "0.3 requests on 0.3 connections (the mean" in ids(detect(frame(row)), "starvation")[0]["explanation"]


def test_starvation_and_tail_cite_requests_left_unanswered():
    row = make_row("gevent", 100, per_conn=STARVED, lat_us={"p999": 5000.0},
                   unanswered={"count": 40, "max_age_us": 1_200_000.0, "connections": 38})
    for rule in ("starvation", "latency_tail"):
        a = ids(detect(frame(row)), rule)[0]
        assert a["evidence"]["still unanswered at the window's end"] == "40 on 38 connections, the oldest waiting 1.2 s"
        assert "40 requests on 38 connections were still unanswered" in a["explanation"]
    # None left (or a row of an older loader, without the group): nothing said.
    for over in ({"unanswered": {"count": 0, "max_age_us": 0.0, "connections": 0}}, {}):
        a = ids(detect(frame(make_row("gevent", 100, per_conn=STARVED, **over))), "starvation")[0]
        assert "still unanswered at the window's end" not in a["evidence"] and "unanswered" not in a["explanation"]


def test_starvation_silent_when_fair_or_too_few_connections():
    assert not ids(detect(frame(make_row(connections=1000))), "starvation")
    assert not ids(detect(frame(make_row(connections=2, per_conn=STARVED))), "starvation")


# 2 readiness_churn -------------------------------------------------------------------------------

def test_readiness_churn_fires_on_two_epoll_ctl_per_message():
    rows = [make_row("uvloop_sock", 100, mps=40_000.0, syscalls_per_msg={"epoll_ctl": 2.0}),
            make_row("selector", 100, mps=60_000.0)]
    found = ids(detect(frame(*rows)), "readiness_churn")
    assert [a["backend"] for a in found] == ["uvloop_sock"]
    assert "register" in found[0]["explanation"] and "selector" in found[0]["explanation"]
    assert found[0]["evidence"]["epoll_ctl per read"] == 2.0
    assert found[0]["evidence"]["epoll_ctl per message"] == 2.0


def test_readiness_churn_of_a_server_that_pauses_reading_per_pipelined_request():
    """uvicorn_h11 at ×8 (bench/reports/http, 2026-12-06): 1.75 epoll_ctl per request and 0.125 reads, one read per 8
    pipelined requests. Per read that is 14 epoll_ctl, and the sock_recv story does not fit: uvicorn pauses reading
    while it answers a request and resumes after (its flow control), an epoll_ctl each way."""
    per = {"epoll_ctl": 1.75, "recvfrom": 0.125, "sendto": 2.0, "mmap": 0.125}
    rows = [make_row("uvicorn_h11", 100, pipeline=8, mps=8_300.0, family="uvicorn", protocol="http",
                     syscalls_per_msg=per),
            make_row("http_asyncio", 100, pipeline=8, mps=228_256.0, protocol="http")]
    (a,) = ids(detect(frame(*rows)), "readiness_churn")
    text = a["explanation"]
    assert ("calls epoll_ctl 1.8 times per request, 44% of all its syscalls, though it reads only 0.12 times per "
            "request, several pipelined requests a read") in text, text
    assert "around each request, not each read" in text and "pause_reading()" in text and "per read)" not in text
    assert "uvicorn does this for every pipelined request" in text and "sock_recv" not in text
    assert "protocols/http/h11_impl.py" in a["evidence"]["source"] and "pause_reading" in a["evidence"]["source"]
    assert "Here http_asyncio makes 0.00 epoll_ctl per request at 228k req/s." in text, text
    assert a["evidence"]["http_asyncio (fastest backend here without the churn)"].startswith("228,256 req/s")


def test_readiness_churn_of_twisted_is_its_writes():
    """Twisted at ping-pong (bench/reports/modern, 2026-12-06): 2 epoll_ctl, 1 recvfrom and 1 sendto per message. Its
    registrations are around writes (`write` → `startWriting`, `doWrite` → `stopWriting`), not the `sock_recv` model."""
    row = make_row("twisted", 100, syscalls_per_msg={"epoll_ctl": 2.0})
    row["family"] = "twisted"
    (a,) = ids(detect(frame(row)), "readiness_churn")
    assert "its writes wait for the socket to be writable" in a["explanation"] and "sock_recv" not in a["explanation"]
    assert a["evidence"]["source"].startswith("twisted/internet/abstract.py:"), a["evidence"]["source"]


def test_readiness_churn_silent_below_threshold_and_without_probes():
    assert not ids(detect(frame(make_row(syscalls_per_msg={"epoll_ctl": 0.5}))), "readiness_churn")
    row = make_row()
    del row["syscalls_per_msg"], row["syscalls"]
    assert not ids(detect(frame(row)), "readiness_churn")


# ring_work (io_uring operations beside the syscalls) ---------------------------------------------

def test_ring_work_names_the_operations_handed_to_io_uring():
    """uvloop_sock as measured (issue 50): 6 epoll_ctl syscalls and 0.9 through the ring per message."""
    per = {"epoll_ctl": 6.0, "ioctl": 1.0, "sendto": 1.0, "recvfrom": 1.0}
    rows = [make_row("uvloop_sock", 100, syscalls_per_msg=per, ring_per_msg={"epoll_ctl": 0.9},
                     ring_cpu_us_per_msg=0.0),
            make_row("selector", 100, ring_per_msg={}, ring_cpu_us_per_msg=0.0)]
    found = ids(detect(frame(*rows)), "ring_work")
    assert [a["backend"] for a in found] == ["uvloop_sock"]
    text = found[0]["explanation"]
    assert "hands 0.90 of its 6.9 epoll_ctl operations per message to io_uring" in text, text
    assert "libuv queues its epoll interest changes for the ring" in text and "restart of reading" not in text, text
    assert "--io-uring on,off" in text and "9% fewer" in text, text
    assert found[0]["evidence"]["kernel operations per message"] == 9.91
    assert found[0]["evidence"]["ring operations per message"] == "epoll_ctl 0.9", found[0]["evidence"]
    rows[0]["ring_per_msg"] = {"epoll_ctl": 0.9, "recv": 0.5, "send": 0.25}
    (a,) = ids(detect(frame(rows[0])), "ring_work")
    assert "Its other ring operations per message: recv 0.5, send 0.25." in a["explanation"], a["explanation"]


def test_ring_work_of_reading_paused_per_pipelined_request():
    """uvicorn_httptools at ×8 (bench/reports/http, 2026-12-06): 2.02 ring epoll_ctl per request beside 3 syscalls:
    uvicorn's pause and resume of reading around each pipelined request, both through libuv's ring."""
    row = make_row("uvicorn_httptools", 1000, pipeline=8, family="uvicorn", protocol="http",
                   syscalls_per_msg={"write": 2.0, "read": 0.99, "recvfrom": 0.0, "sendto": 0.0},
                   ring_per_msg={"epoll_ctl": 2.02}, ring_cpu_us_per_msg=0.0)
    (a,) = ids(detect(frame(row)), "ring_work")
    assert ("2.02 per request with 8 in flight (0.99 reads) is a stop and a restart of reading around each pipelined "
            "request") in a["explanation"], a["explanation"]
    row["pipeline"] = 1
    (a,) = ids(detect(frame(row)), "ring_work")
    assert "restart of reading" not in a["explanation"]


def test_ring_work_silent_below_its_share_and_without_probes():
    small = make_row(syscalls_per_msg={"sendto": 1.0, "recvfrom": 1.0}, ring_per_msg={"epoll_ctl": 0.05})
    assert not ids(detect(frame(small)), "ring_work")
    row = make_row(ring_per_msg={"recv": 1.0, "send": 1.0})
    del row["syscalls_per_msg"], row["syscalls"]
    assert not ids(detect(frame(row)), "ring_work")


# 3 mmap_churn ------------------------------------------------------------------------------------

def test_mmap_churn_explains_the_big_receive_buffer_and_quotes_stacks(tmp_path):
    row = make_row("asyncio", 100, syscalls_per_msg={"mmap": 1.0, "munmap": 1.0, "mremap": 1.0})
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / f"{schema.cell_slug(row)}.json").write_text(json.dumps(
        {"mmap": [{"count": 9000, "frames": ["mmap64 (libc.so.6)", "sysmalloc (libc.so.6)",
                                             "_PyBytes_FromSize (python3.11)", "sock_recv_impl (_socket)"]}]}))
    a = ids(detect(frame(row), out_dir=tmp_path), "mmap_churn")[0]
    assert a["severity"] == "warning"
    assert "max_size" in a["explanation"] and "mremap" in a["explanation"]
    assert a["evidence"]["stacks"][0]["syscall"] == "mmap"
    assert "max_size" in a["evidence"]["source"]
    assert "sock_recv_impl" in a["explanation"]


def test_mmap_churn_silent_on_rare_mappings():
    assert not ids(detect(frame(make_row(syscalls_per_msg={"mmap": 0.1, "munmap": 0.1}))), "mmap_churn")


# 4 lock_contention -------------------------------------------------------------------------------

def test_lock_contention_compares_pinned_and_unpinned():
    rows = [make_row("thread", 100, mps=20_000.0, pinned=False, syscalls_per_msg={"futex": 15.0},
                     ctx={"involuntary_per_msg": 2.0, "migrations_per_msg": 0.3}),
            make_row("thread", 100, mps=90_000.0, pinned=True, syscalls_per_msg={"futex": 0.01})]
    found = ids(detect(frame(*rows)), "lock_contention")
    assert len(found) == 1
    a = found[0]
    assert a["severity"] == "critical" and a["evidence"]["pinned"] is False
    assert "90,000 msgs/s" in a["evidence"]["same cell pinned"]
    assert "GIL" in a["explanation"]


def test_lock_contention_on_involuntary_switches_alone():
    a = ids(detect(frame(make_row(ctx={"involuntary_per_msg": 1.0}))), "lock_contention")
    assert a and a[0]["severity"] == "warning"


def test_lock_contention_silent_when_calm():
    assert not ids(detect(frame(make_row(syscalls_per_msg={"futex": 0.2}))), "lock_contention")


# 5 cpu_split -------------------------------------------------------------------------------------

@pytest.mark.parametrize("user_frac, title", [(0.9, "User-dominated"), (0.2, "Kernel-dominated")])
def test_cpu_split_is_informational(user_frac, title):
    rows = [make_row("b", c, cpu={"user_frac": user_frac}) for c in (10, 100)]
    found = ids(detect(frame(*rows)), "cpu_split")
    assert len(found) == 1 and found[0]["severity"] == "info"
    assert found[0]["title"].startswith(title) and found[0]["connections"] is None
    assert found[0]["evidence"]["connection counts"] == "10, 100"


def test_kernel_dominated_cpu_names_the_work_handed_to_io_uring():
    """uvloop hands epoll_ctl to io_uring: the card's cost is its syscalls and its ring operations, both in evidence."""
    plain = ids(detect(frame(make_row("b", cpu={"user_frac": 0.2}))), "cpu_split")[0]
    assert "io_uring" not in plain["explanation"] and not any("io_uring" in k for k in plain["evidence"])
    ringed = make_row("b", cpu={"user_frac": 0.2}) | {"ring_per_msg": {"epoll_ctl": 1.0}}
    (a,) = ids(detect(frame(ringed)), "cpu_split")
    assert "how many syscalls and io_uring operations it makes" in a["explanation"], a["explanation"]
    assert [v for k, v in a["evidence"].items() if k.startswith("io_uring operations per message")] == [1.0]


def test_cpu_split_silent_when_balanced_or_unknown():
    assert not ids(detect(frame(make_row(cpu={"user_frac": 0.55}))), "cpu_split")
    row = make_row()
    del row["cpu"]
    assert not ids(detect(frame(row)), "cpu_split")


# 6 loader_bottleneck -----------------------------------------------------------------------------

def test_loader_bottleneck_critical_when_backend_waits():
    a = ids(detect(frame(make_row(loader_cpu={"cpu_frac": 0.97}, cpu={"busy_frac": 0.5}))), "loader_bottleneck")
    assert a and a[0]["severity"] == "critical" and "lower bound" in a[0]["explanation"]


def test_loader_bottleneck_warning_when_both_busy_and_silent_with_headroom():
    a = ids(detect(frame(make_row(loader_cpu={"cpu_frac": 0.95}, cpu={"busy_frac": 0.97}))), "loader_bottleneck")
    assert a and a[0]["severity"] == "warning"
    assert not ids(detect(frame(make_row(loader_cpu={"cpu_frac": 0.6}))), "loader_bottleneck")


@pytest.mark.parametrize("client, named", [("libzmq", True), ("native", False), (None, True)])
def test_loader_bottleneck_on_a_zeromq_server_under_libzmq_names_the_native_client(client, named):
    """libzmq's I/O thread shares the loader's CPU with its own (a row before zmq_client was recorded: libzmq)."""
    row = make_row("zmq_raw", loader_cpu={"cpu_frac": 0.98}, cpu={"busy_frac": 0.8}, family="zeromq", reads="frames")
    if client:
        row["zmq_client"] = client
    (a,) = ids(detect(frame(row)), "loader_bottleneck")
    assert ("--zmq-client native" in a["explanation"]) is named, a["explanation"]


# 7 latency_tail ----------------------------------------------------------------------------------

def test_latency_tail_fires_on_p999_far_above_p50():
    a = ids(detect(frame(make_row(lat_us={"p50": 100.0, "p999": 5000.0}))), "latency_tail")
    assert a and a[0]["evidence"]["p999 / p50"] == 50.0
    # nothing else explains it and the tail is as long as this kind of host stops a busy CPU: the host's pauses named
    assert "what the host's own pauses of a busy CPU can hold this long" in a[0]["explanation"], a[0]["explanation"]
    assert a[0]["evidence"]["reference host: a busy CPU's pauses of 1 ms or more per second, the longest (ms)"] == \
        "0.5-1.8, 3.4-13.5"
    (a,) = ids(detect(frame(make_row(lat_us={"p50": 100.0, "p999": 40_000.0}))), "latency_tail")  # longer than any
    assert "host's own pauses" not in a["explanation"] and "suspect pauses (GC" in a["explanation"]


def test_latency_tail_names_starvation_as_cause():
    a = ids(detect(frame(make_row(lat_us={"p999": 5000.0}, per_conn=STARVED))), "latency_tail")[0]
    assert "starved" in a["explanation"] and a["severity"] == "warning"


def test_latency_tail_names_threads_queued_for_the_cpu():
    """A thread per connection on one core (socketserver at 100 connections, 2026-12-06: 94 of its 102 threads
    waiting for the CPU on average, 792 µs for each turn, against a 727-µs median request): a request whose thread
    waits in that queue waits with it. Not for a loop alone on its core, nor where a turn's wait is short against the
    median request, nor from figures a window's end cut short."""
    sched = {"runq_mean": 94.3, "wait_per_turn_us": 792.0, "turn_us": 8.2, "threads": 102, "threads_exited": 0}
    lat = {"p50": 727.0, "p99": 3285.0, "p999": 20_000.0}
    (a,) = ids(detect(frame(make_row("socketserver", 100, lat_us=lat, sched=sched))), "latency_tail")
    assert ("its threads queued for the CPU: on average 94 of its 102 were runnable and waiting, 792 µs for each "
            "turn on it") in a["explanation"], a["explanation"]
    for other in ({**sched, "runq_mean": 0.02}, {**sched, "wait_per_turn_us": 48.0}, {**sched, "threads_exited": 40}):
        (a,) = ids(detect(frame(make_row("socketserver", 100, lat_us=lat, sched=other))), "latency_tail")
        assert "queued for the CPU" not in a["explanation"], (other, a["explanation"])


def test_latency_tail_of_a_loop_that_serves_in_runs_says_so():
    """asyncio_sock at 100 connections, 8 in flight (bench/reports/pipeline, 2026-12-06): fair over the window (Jain
    0.92) with p50 42 µs and p999 115 ms. Its reads took the eager path: a connection's run of waiting messages is
    served before the next connection's, and each waits out the others' runs; 7 messages ahead on its own connection
    would be 0.3 ms, not 115."""
    lat = {"p50": 42.0, "p90": 6663.0, "p95": 20000.0, "p99": 78731.0, "p999": 115081.0, "max": 128552.0,
           "mean": 4000.0}
    rows = [make_row("asyncio_sock", 100, pipeline=1, syscalls_per_msg={"epoll_ctl": 2.0, "recvfrom": 2.0}),
            make_row("asyncio_sock", 100, pipeline=8, lat_us=lat, per_conn={**FAIR, "jain": 0.92},
                     syscalls_per_msg={"epoll_ctl": 0.025, "recvfrom": 1.01})]
    (a,) = [x for x in ids(detect(frame(*rows)), "latency_tail") if x["pipeline"] == 8]
    assert ("Likely cause here: the loop serves one connection's waiting messages in a run before it turns to "
            "another (its reads took the eager path, 1.01 reads and 0.025 epoll_ctl per message") in a["explanation"]
    assert "over the window the runs rotated (Jain 0.92)" in a["explanation"], a["explanation"]
    assert "queue behind others in flight" not in a["explanation"]
    # A transport that reads several messages at once is not served in runs that way: the plain pipelining cause.
    batched = [rows[0], {**rows[1], "syscalls_per_msg": {"epoll_ctl": 0.025, "recvfrom": 0.13}}]
    (b,) = [x for x in ids(detect(frame(*batched)), "latency_tail") if x["pipeline"] == 8]
    assert "in a run" not in b["explanation"] and "queue behind others in flight" in b["explanation"]


def test_latency_tail_names_connections_still_in_the_listen_queue():
    """rloop_sock at 1000 connections (bench/reports/modern, 2026-12-06): fair enough (Jain 0.88), 284 connections
    still queued when the window opened, p999 682 ms against a p50 of 8.7 ms: their first requests waited for the
    accept."""
    row = make_row("rloop_sock", 1000, lat_us={"p50": 8700.0, "p999": 682_000.0}, accept_queue_at_start=284)
    (a,) = ids(detect(frame(row)), "latency_tail")
    assert ("Likely cause here: 284 connections were still in the server's listen queue when the window opened: "
            "their first messages waited for the accept") in a["explanation"], a["explanation"]


def test_latency_tail_at_a_set_rate_names_the_requests_that_waited_in_the_loader():
    """A knee's rate near the ceiling: 14% of the requests waited in the loader for a free connection, which
    counts in the latency from the intended send: that is the tail, not "nothing else in this cell"."""
    row = make_row(lat_us={"p50": 121.0, "p999": 14_300.0}, rate=36_531, open_loop={"waited_share": 0.142})
    (a,) = ids(detect(frame(row)), "latency_tail")
    assert ("Likely cause here: 14% of the messages waited in the loader for a free connection, the answers coming "
            "slower than the requests came due") in a["explanation"], a["explanation"]
    assert "Nothing else in this cell" not in a["explanation"] and a["severity"] == "warning"
    quiet = make_row(lat_us={"p50": 121.0, "p999": 14_300.0}, rate=36_531, open_loop={"waited_share": 0.002})
    (a,) = ids(detect(frame(quiet)), "latency_tail")
    assert "waited in the loader" not in a["explanation"]


def test_latency_tail_silent_and_threshold_is_tunable():
    row = make_row(lat_us={"p50": 100.0, "p999": 1000.0})
    assert not ids(detect(frame(row)), "latency_tail")
    assert ids(detect(frame(row), thresholds=Thresholds(tail_ratio=5)), "latency_tail")


# 8 throughput_collapse ---------------------------------------------------------------------------

def test_throughput_collapse_says_what_grew():
    rows = [make_row("uvloop", 10, mps=100_000.0, cpu={"user_s": 1.0, "sys_s": 0.6}),
            make_row("uvloop", 1000, mps=100_000.0),
            make_row("uvloop", 10000, mps=30_000.0, cpu={"user_s": 1.0, "sys_s": 1.5},
                     syscalls_per_msg={"epoll_wait": 0.9})]
    a = ids(detect(frame(*rows)), "throughput_collapse")
    assert len(a) == 1 and a[0]["connections"] == 10000
    assert "−70%" in a[0]["title"]
    assert "kernel" in a[0]["explanation"] and "epoll_wait" in a[0]["explanation"]


def test_throughput_collapse_places_no_growth_where_the_cpu_per_message_fell():
    rows = [make_row("b", 10, mps=100_000.0, cpu={"user_s": 1.0, "sys_s": 0.6}),
            make_row("b", 10000, mps=30_000.0, cpu={"user_s": 0.2, "sys_s": 0.1})]
    (a,) = ids(detect(frame(*rows)), "throughput_collapse")
    assert "not more CPU per message" in a["explanation"] and "growth" not in a["explanation"], a["explanation"]


def test_throughput_collapse_silent_on_mild_decline_or_growth():
    rows = [make_row("b", 10, mps=100_000.0), make_row("b", 1000, mps=70_000.0), make_row("b", 5000, mps=120_000.0)]
    assert not ids(detect(frame(*rows)), "throughput_collapse")


# 9 noisy -----------------------------------------------------------------------------------------

def test_noisy_fires_on_disagreeing_rounds():
    rows = [make_row(round=i, mps=m) for i, m in enumerate((50_000.0, 75_000.0, 35_000.0), 1)]
    a = ids(detect(frame(*rows)), "noisy")
    assert a and a[0]["severity"] == "warning" and "50000, 75000, 35000" in a[0]["evidence"]["msgs/s per round"]


def test_noisy_silent_on_agreeing_rounds_or_single_round():
    rows = [make_row(round=i, mps=m) for i, m in enumerate((50_000.0, 51_000.0, 49_000.0), 1)]
    assert not ids(detect(frame(*rows)), "noisy")
    assert not ids(detect(frame(make_row())), "noisy")


# 10 failed_cells ---------------------------------------------------------------------------------

@pytest.mark.parametrize("error, cause", [
    ("EMFILE: accept: Too many open files", "fd limit"),
    ("backend exited with code -9: ", "killed"),
    ("backend exited with code -11: ", "crash"),
    ("backend exited with code 1: Traceback ...", "exit"),
    ("stalled: no message for 5 s", "stall"),
    ("only 900 of 1000 connections could be opened (ECONNREFUSED)", "connection setup"),
])
def test_failed_cells_names_the_cause(error, cause):
    rows = [make_row("thread", 20000, status="failed", error=error, messages=0, msgs_per_sec=0.0),
            make_row("selector", 100)]
    a = ids(detect(frame(*rows)), "failed_cells")
    assert len(a) == 1 and a[0]["severity"] == "critical"
    assert a[0]["evidence"]["cause"] == cause and a[0]["connections"] == 20000
    assert a[0]["evidence"]["failed rounds"] == "1 of 1"


def test_failed_cells_when_nothing_succeeded_and_silent_when_all_ok():
    row = make_row(status="failed", error="stalled: x", messages=0, msgs_per_sec=0.0)
    assert ids(detect(frame(row)), "failed_cells")
    assert not ids(detect(frame(make_row())), "failed_cells")


# ordering ----------------------------------------------------------------------------------------

def test_most_severe_first():
    rows = [make_row("a", 100, cpu={"user_frac": 0.9}),                                  # info
            make_row("b", 100, lat_us={"p999": 5000.0}, per_conn=STARVED),              # critical + warning
            make_row("c", 100, status="failed", error="EMFILE", msgs_per_sec=0.0)]      # critical
    sev = [a["severity"] for a in detect(frame(*rows))]
    assert sev == sorted(sev, key=anomalies.SEVERITIES.index) and sev[0] == "critical" and sev[-1] == "info"


def test_behaviour_rules_give_one_card_per_backend():
    rows = [make_row("uvloop_sock", c, syscalls_per_msg={"epoll_ctl": 2.0}) for c in (10, 100, 1000)]
    a = ids(detect(frame(*rows)), "readiness_churn")
    assert len(a) == 1 and a[0]["connections"] == 1000
    assert a[0]["evidence"]["also at (connections ×in flight, rate)"] == "10, 100"


def test_one_card_per_backend_names_the_other_cells_rates():
    """Open-loop cells at one connection count differ by their rate: the card lists the rates (not "10, 10"), with
    the connections too where those differ, and a closed-loop cell among them as such; summary.json's anomaly
    carries its cell's rate."""
    churn = {"syscalls_per_msg": {"epoll_ctl": 2.0}}
    rows = [make_row("uvloop_sock", 100, rate=r, **churn) for r in (20_000, 30_000)]
    rows += [make_row("uvloop_sock", 10, rate=30_000, **churn), make_row("uvloop_sock", 100, **churn),
             make_row("uvloop_sock", 10, **churn)]
    (a,) = ids(detect(frame(*rows)), "readiness_churn")
    assert a["connections"] == 100 and a["rate"] == 30_000, a  # the largest scale, then the highest rate
    labels = "10 closed loop, 10, closed loop, 20,000/s"  # "10": the same rate as the card's
    assert a["evidence"]["also at (connections ×in flight, rate)"] == labels
    assert a["title"].endswith(f"(also at {labels})"), a["title"]
    # A knee's dozen rates: the card is the highest rate's; the title names six others, the evidence all of them.
    rows = [make_row("uvloop_sock", 10, rate=1000 * (i + 1), **churn) for i in range(10)]
    (a,) = ids(detect(frame(*rows)), "readiness_churn")
    assert a["rate"] == 10_000, a
    assert a["title"].endswith("(also at 1,000/s, 2,000/s, 3,000/s, 4,000/s, 5,000/s, 6,000/s and 3 more)"), a["title"]
    assert a["evidence"]["also at (connections ×in flight, rate)"].endswith("8,000/s, 9,000/s"), a["evidence"]


# connection errors (issue 16, item 9) --------------------------------------------------------------

def test_connection_errors_fire_with_the_numbers():
    rows = [make_row(round=1, errors={"reset": 3}), make_row(round=2), make_row(round=3, errors={"timeout": 1})]
    (a,) = ids(detect(frame(*rows)), "connection_errors")
    assert a["severity"] == "critical" and a["connections"] == 100  # round 1 lost 3% of its connections
    ev = a["evidence"]
    assert ev["per round (reset / timeout / connect)"] == "round 1: 3 / 0 / 0; round 2: 0 / 0 / 0; round 3: 0 / 1 / 0"
    assert ev["worst round lost"] == "3 of 100 connections (3.0%)"
    assert ev["rounds that lost connections"] == "2 of 3"
    assert ev["reset per round (mean): connections reset or closed by the backend"] == 1.0
    assert "1.0 reset or closed by the backend" in a["explanation"] and "3 of 100" in a["explanation"]


def test_connection_errors_warning_below_one_percent_and_tunable():
    rows = [make_row(connections=1000, errors={"reset": 5})]
    (a,) = ids(detect(frame(*rows)), "connection_errors")
    assert a["severity"] == "warning" and a["evidence"]["worst round lost"] == "5 of 1000 connections (0.5%)"
    assert not ids(detect(frame(*rows), thresholds=Thresholds(connection_errors_min=10)), "connection_errors")


def test_connection_errors_silent_on_a_clean_row():
    assert not ids(detect(frame(make_row(), make_row(round=2))), "connection_errors")
    assert not ids(detect(frame(make_row(errors={"mismatch": 0}))), "connection_errors")
    # a failed round's errors belong to its FF card, not to this rule
    rows = [make_row(), make_row(round=2, status="failed", error="only 90 of 100 connections could be opened",
                                 errors={"timeout": 10})]
    assert not ids(detect(frame(*rows)), "connection_errors")


def test_probe_spill_names_the_rounds_whose_probes_left_their_guard():
    clean = {"probed": {"guard_s": 0.1, "late_ms": 0.0, "spill_ms": 0.0, "attach_lead_ms": 2.0}}
    rows = [make_row(round=1, **clean), make_row(round=2, probed={**clean["probed"], "late_ms": 420.0}),
            make_row(round=3, **clean)]
    found = [a for a in detect(frame(*rows)) if a["id"] == "probe_spill"]
    assert len(found) == 1 and found[0]["evidence"]["rounds affected"] == "2"
    assert "attached up to 420 ms late" in found[0]["explanation"] and "its 2 other rounds" in found[0]["explanation"]
    assert not [a for a in detect(frame(make_row(**clean))) if a["id"] == "probe_spill"]


def test_a_probed_part_shorter_than_a_round_of_the_connections_is_said():
    """uvicorn_h11 at 1000 connections, 8 in flight (bench/reports/http, 2026-12-06): 8,000 requests in flight at
    ~8.5k/s, each connection read once a round of 0.94 s, the probed part 0.6 s: its reads per request were 0.13 in
    one run and 0.0095 (or none) in another's rounds. Said when the round is longer than the probed part; not for a
    cell whose round fits, nor under --rate (no fixed round), nor without probes."""
    row = make_row("uvicorn_h11", 1000, pipeline=8, mps=8_500.0, probed={"duration_s": 0.6, "messages": 5_100})
    (a,) = ids(detect(frame(row)), "short_probed_part")
    assert a["severity"] == "info" and a["title"].startswith("Probed part shorter than a round"), a
    assert ("took 941 ms to answer each of its 8,000 messages in flight once (at 8.5k msgs/s), longer than the "
            "probed part of its window (600 ms)") in a["explanation"], a["explanation"]
    assert a["evidence"]["one round of them, s"] == 0.94
    fits = make_row("http_asyncio", 1000, pipeline=8, mps=187_000.0, probed={"duration_s": 0.6, "messages": 1})
    assert not ids(detect(frame(fits)), "short_probed_part")
    assert not ids(detect(frame({**row, "rate": 5_000.0})), "short_probed_part")
    unprobed = make_row("uvicorn_h11", 1000, pipeline=8, mps=8_500.0)
    assert not ids(detect(frame(unprobed)), "short_probed_part")
