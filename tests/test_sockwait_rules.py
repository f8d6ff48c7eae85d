"""The --sockwait figures off-line: the least/most-served wait split (stats), the three rules that read
them (anomalies) firing and staying silent on constructed rows, and the report section built from
them. No processes: tests/test_sockwait_run.py runs the real thing."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from test_anomalies import frame, ids, make_row

from netprof.probes.sockwait import report as sockwait_report
from netprof.profiler.analysis import rules as anomalies
from netprof.profiler.analysis.rules import detect
from netprof.profiler.model import metrics, stats

# A `sockwait` row group: short waits and handlers, connections served alike.
SW = {
    "attached": True, "wait_count": 30_000, "wait_p50_us": 20.0, "wait_p99_us": 80.0, "wait_max_us": 300.0,
    "wait_mean_us": 25.0, "handler_count": 30_000, "handler_p50_us": 8.0, "handler_p99_us": 30.0,
    "handler_mean_us": 9.0, "server_count": 30_000, "server_p50_us": 30.0, "server_mean_us": 36.0,
    "rtt_mean_us": 110.0, "exact": True, "conn_wait_least_us": 24.0, "conn_wait_most_us": 22.0,
    "conn_wait_ratio": 24 / 22,
}


def sw_row(backend: str = "selector", connections: int = 100, **over) -> dict:
    """make_row with a `sockwait` group: SW changed by the keywords named like its keys, make_row's
    fields by the others (mps, work, pipeline, ...)."""
    unknown = set(over) - SW.keys() - make_row().keys() - {"mps"}
    assert not unknown, f"neither a sockwait nor a row field: {unknown}"  # a typo must not pass silently
    group = {k: over.pop(k) for k in list(over) if k in SW}
    return make_row(backend, connections, sockwait={**SW, **group}, **over)


def test_conn_wait_split_ranks_by_service_and_takes_decile_medians():
    served = list(range(100))  # connection i read i bytes
    waits = [1e6 if i < 10 else 10.0 for i in range(100)]
    waits[95] = 5e5  # one favoured connection that once lost the loop: the median ignores it
    s = stats.conn_wait_split(served, waits)
    assert s["conn_wait_least_us"] == 1e6 and s["conn_wait_most_us"] == 10.0 and s["conn_wait_ratio"] == 1e5
    assert s["conn_bytes_least"] == 4.5 and s["conn_bytes_most"] == 94.5 and s["conn_most_n"] == 10


def test_conn_wait_split_takes_the_carriers_when_fewer_than_a_tenth_carried_the_load():
    """One monopolist of 100 connections (fresh-clone CI, asyncio_sock at 8 in flight): it read most of
    the bytes with 245 µs waits; nine others got a turn now and then and waited about a second between
    turns, the rest nothing. The tenth's median is a starved connection's second; the carrier's is the
    monopoly's."""
    served = [0.0] * 90 + [64.0 * i for i in range(1, 10)] + [64.0 * 100_000]
    waits = [3.0e6] * 90 + [1.0e6] * 9 + [245.0]
    s = stats.conn_wait_split(served, waits)
    assert s["conn_most_n"] == 1 and s["conn_wait_most_us"] == 245.0
    assert s["conn_wait_ratio"] == pytest.approx(3.0e6 / 245.0)
    # two carriers between them read half: both are the most-served group
    served[-2] = served[-1]
    waits[-2] = 255.0
    s = stats.conn_wait_split(served, waits)
    assert s["conn_most_n"] == 2 and s["conn_wait_most_us"] == 250.0
    # at 10 connections a decile is one connection; unmeasured (None/NaN) waits are left out
    s = stats.conn_wait_split([5, 1, 9, 3, 0], [10.0, None, 2.0, float("nan"), 400.0])
    assert s == {
        "conn_wait_least_us": 400.0,
        "conn_wait_most_us": 2.0,
        "conn_wait_ratio": 200.0,
        "conn_bytes_least": 0.0,
        "conn_bytes_most": 9.0,
        "conn_most_n": 1,
    }
    assert stats.conn_wait_split([1], [3.0]) == {}
    assert stats.conn_wait_split([1, 2], [3.0, 0.0])["conn_wait_ratio"] is None


def test_transit_is_round_trip_minus_server_time():
    df = stats.derive(frame(sw_row(rtt_mean_us=110.0, server_mean_us=36.0), make_row(round=2)))
    assert df[metrics.SOCKWAIT_TRANSIT].iloc[0] == pytest.approx(74.0)
    assert math.isnan(df[metrics.SOCKWAIT_TRANSIT].iloc[1])


def test_head_of_line_fires_for_a_single_loop_behind_slow_handlers_only():
    rows = [
        sw_row("selector", 10, mps=950.0, work="sleep:1000", wait_p50_us=9000.0, wait_p99_us=12000.0,
               wait_max_us=15000.0, wait_mean_us=9100.0, handler_p50_us=1050.0, handler_p99_us=1200.0,
               handler_mean_us=1060.0),
        sw_row("thread", 10, mps=9000.0, work="sleep:1000", wait_p50_us=20.0, wait_mean_us=30.0,
               handler_p50_us=1050.0, handler_mean_us=1060.0),
        # waits 16 handler times, but 44k msgs/s × 1.15 ms: 50 requests between their read and answer at
        # once — the loop's turn coming round (bench/reports/sockwait), not handlers blocking each other
        sw_row("uvloop_sock", 100, pipeline=8, mps=43_947.0, wait_p50_us=18_350.0, wait_mean_us=18_400.0,
               handler_p50_us=1170.0, handler_mean_us=1149.0),
    ]
    found = detect(frame(*rows))
    hol = ids(found, "head_of_line")
    assert [(a["backend"], a["connections"]) for a in hol] == [("selector", 10)]
    ev = hol[0]["evidence"]
    assert ev["requests in a handler at once (msgs/s × mean handler time)"] == pytest.approx(950 * 1060e-6, abs=0.01)
    assert ev["messages in flight"] == 10 and ev["median wait ÷ median handler"] == pytest.approx(8.6, abs=0.1)
    assert "sleep:1000" in hol[0]["explanation"] and "selector at 10 connections" in hol[0]["explanation"]
    assert not ids(found, "loop_busy_elsewhere") and not ids(found, "wait_starvation")


def test_wait_starvation_fires_when_waits_sit_on_few_connections():
    starved = sw_row("asyncio_sock", 100, pipeline=8, wait_p50_us=5.0, wait_p99_us=400_000.0, wait_max_us=2e6,
                     conn_wait_least_us=6e5, conn_wait_most_us=40.0, conn_wait_ratio=15_000.0)
    even = sw_row("uvloop_sock", 100, pipeline=8, conn_wait_ratio=3.0)
    found = detect(frame(starved, even))
    ws = ids(found, "wait_starvation")
    assert [(a["backend"], a["pipeline"]) for a in ws] == [("asyncio_sock", 8)]
    assert ws[0]["severity"] == "critical" and ws[0]["evidence"]["ratio"] == 15_000
    assert "600.0 ms" in ws[0]["explanation"]
    # just under the threshold: silent
    assert not ids(detect(frame(sw_row(conn_wait_ratio=99.0))), "wait_starvation")


def test_loop_busy_elsewhere_says_whether_the_round_explains_the_wait():
    # 1000 connections at 50k msgs/s: 20 µs of server time each, one round of the others ≈ 20 ms
    rr = sw_row("selector", 1000, wait_p50_us=19_000.0, wait_mean_us=20_000.0, handler_p50_us=6.0)
    stall = sw_row("uvloop", 1000, wait_p50_us=60_000.0, wait_mean_us=90_000.0, handler_p50_us=6.0)
    slow = sw_row("gevent", 1000, wait_p50_us=60_000.0, wait_mean_us=90_000.0, handler_p50_us=900.0)
    found = {a["backend"]: a for a in ids(detect(frame(rr, stall, slow)), "loop_busy_elsewhere")}
    assert set(found) == {"selector", "uvloop"}  # gevent's handlers are long: head-of-line instead
    assert found["selector"]["severity"] == "info" and found["uvloop"]["severity"] == "warning"
    assert found["selector"]["evidence"]["one round of the other messages (µs)"] == pytest.approx(19_980, abs=1)
    assert found["uvloop"]["evidence"]["mean wait ÷ one round"] == pytest.approx(4.5, abs=0.1)


def test_rules_are_registered_with_thresholds():
    assert {"wait_starvation", "head_of_line", "loop_busy_elsewhere"} <= set(anomalies.RULES)
    t = anomalies.Thresholds()
    assert t.wait_starvation_ratio == 100 and t.hol_wait_handler_ratio > 1


def test_report_section_only_with_sockwait_rows(tmp_path):
    plain = frame(make_row())
    assert sockwait_report.section(tmp_path, plain, stats.aggregate(plain), None, {}) is None
    df = frame(sw_row("selector", 10, mps=950.0, wait_mean_us=9100.0, handler_mean_us=1060.0,
                      server_mean_us=10_300.0, rtt_mean_us=10_500.0))
    keys = {
        "backend": "selector",
        "interpreter": "cpython-3.11.2",
        "connections": 10,
        "pipeline": 1,
        "pinned": True,
        "round": 1,
    }
    conns = pd.DataFrame(
        [
            {
                **keys,
                "conn": i,
                "dport": 40000 + i,
                "reads": 100 - i,
                "bytes": 6400 - 64 * i,
                "waits": 100 - i,
                "wait_mean_us": 9000.0 + i if i < 9 else None,
                "answers": 100 - i,
                "handler_mean_us": 1000.0,
                "unread_age_us": None if i < 9 else 5e5,
                "wait_us": 9000.0 + i if i < 9 else 5e5,
            }
            for i in range(10)
        ]
    )
    ctx = sockwait_report.section(
        tmp_path,
        df,
        stats.aggregate(df),
        conns,
        {"sockwait_cost_per_message": {"bare_ns": 9000.0, "added_watched_ns": 1200.0, "added_bystander_ns": 150.0}},
    )
    assert ctx is not None
    assert (
        ctx["cost"].startswith("Socket-wait probes attached for the whole cell; their cost is included in the headline")
        and "+1,200 ns" in ctx["cost"]
    )
    assert [p.name for p in ctx["plots"]] == ["sockwait_round_trip", "sockwait_connections"]
    assert all((tmp_path / p.path).stat().st_size > 1000 for p in ctx["plots"])
    (row,) = ctx["table"]["rows"]
    assert row[1] == "20 µs" and row[4] == "8.0 µs"  # wait p50, handler p50 of SW
    assert row[7] == "200 µs"  # transit = 10,500 − 10,300
    parts = sockwait_report.parts(stats.aggregate(df).iloc[0])
    assert parts == {"socket queue wait": 9100.0, "handler": 1060.0, "other server time": 140.0, "transit": 200.0}
