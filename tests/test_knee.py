"""`netprof knee`: the objective's parser, the pass/fail judgement of a cell and the bisection on made-up
servers (no process), then one real search on a server of known capacity."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from helpers import STEAL_REMEASURE, netprof_cli, run_netprof, run_steal, wait_no_children
from netprof.profiler import knee, knee_plan
from netprof.profiler.core import units
from netprof.profiler.core.errors import InputError
from netprof.profiler.kit.rule_registry import Thresholds
from netprof.profiler.model import knee_doc, stats
from netprof.profiler.report import tables
from netprof.profiler.run.plan import RunConfig, validate


@pytest.mark.parametrize("text, stat, us", [("p99<5ms", "p99", 5000), ("P50 < 200us", "p50", 200),
                                             ("p999<1.5s", "p999", 1.5e6), ("p90<250µs", "p90", 250)])
def test_slo_parses(text, stat, us):
    slo = knee_plan.parse_slo(text)
    assert (slo.stat, slo.limit_us) == (stat, us)
    assert knee_plan.parse_slo(slo.text()) == slo  # the text it is shown as reads back the same


@pytest.mark.parametrize("text", ["p99", "p98<5ms", "p99<5", "p99>5ms", "p99<0ms", "p99<5 min"])
def test_bad_slo_is_one_clear_error(text):
    with pytest.raises(InputError, match="--slo"):
        knee_plan.parse_slo(text)


def _row(rate: float, achieved: float, p99: float, behind: float = 0.0) -> dict:
    return {"status": "ok", "msgs_per_sec": achieved, "lat_us": {"p99": p99}, "lat_sent_us": {"p99": p99 / 2},
            "open_loop": {"achieved_share": achieved / rate, "behind_share": behind, "waited_share": behind}}


def test_a_cell_passes_only_within_the_limit_and_keeping_up():
    slo, t = knee_plan.parse_slo("p99<5ms"), Thresholds()
    assert knee.judge(_row(1000, 1000, 4000), 1000, slo, t).met
    over = knee.judge(_row(1000, 1000, 6000), 1000, slo, t)
    assert not over.met and over.why == "p99 6 ms over the 5 ms limit", over.why
    near = knee.judge(_row(1000, 1000, 4_990), 1000, slo, t)  # within 1% of the limit: to the µs, not "5 ms"
    assert near.met and near.why == "p99 4,990 µs within the 5 ms limit", near.why
    behind = knee.judge(_row(1000, 900, 100), 1000, slo, t)  # fast answers, but only 90% of the rate
    assert not behind.met and "overloaded: achieved 90%" in behind.why
    # requests that waited for their connection carry that wait in their latency: the objective judges them
    waited = knee.judge(_row(1000, 1000, 100, behind=0.05), 1000, slo, t)
    assert waited.met and "(5.0% waited for a connection)" in waited.why
    below_cap = _row(1000, 1000, 100)  # below the cap they wait for a slot or a new connection: waits all the same
    below_cap["open_loop"] = stats.open_loop({"intended": 1000, "sent": 990, "behind": 0, "waited_connect": 10,
                                              "waited_slot": 30}, 1000, 1000)
    # 10 + 30 sent after waiting, and the 10 still waiting when the window closed (behind_share 1%)
    assert below_cap["open_loop"]["behind_share"] == 0.01
    assert "(5.0% waited for a connection)" in knee.judge(below_cap, 1000, slo, t).why
    waited_long = knee.judge(_row(1000, 1000, 7_000, behind=0.05), 1000, slo, t)
    assert not waited_long.met and "over the 5 ms limit" in waited_long.why
    failed = knee.judge({"status": "failed", "error": "stalled"}, 1000, slo, t)
    assert not failed.met and "stalled" in failed.why


def _fake_server(knee_at: float):
    """A server whose p99 is 1 ms below `knee_at` requests/s and 50 ms above; the rates it was asked."""
    asked = []

    def measure(rate: float) -> knee.Probe:
        asked.append(rate)
        return knee.judge(_row(rate, rate, 1000 if rate <= knee_at else 50_000), rate, knee_plan.parse_slo("p99<5ms"),
                          Thresholds())

    return measure, asked


@pytest.mark.parametrize("true_knee", [37, 700, 6400, 9990])
def test_bisection_finds_the_knee_to_a_64th_of_the_ceiling_in_6_probes(true_knee):
    """6 halvings, then a second look at the lowest rate that failed (none failed below 9,990: no second look)."""
    measure, asked = _fake_server(true_knee)
    probes, lo, hi = knee.search(measure, 10_000, 6)
    looked_again = true_knee < 9_844
    assert len(probes) == len(asked) == 6 + looked_again
    assert lo <= true_knee < hi and hi - lo <= 10_000 / 64 + 1
    assert all(p.met == (p.rate <= true_knee) for p in probes)
    assert [p.recheck for p in probes] == [False] * 6 + [True] * looked_again
    if looked_again:
        assert probes[-1].rate == hi and probes[-1].record(knee_plan.parse_slo("p99<5ms"))["recheck"] is True


def test_a_rate_failed_on_a_bad_moment_is_looked_at_again_and_the_search_goes_on_above_it():
    """The server serves 6,400/s, but the first probe of 5,000/s lands in a slow moment and fails (every try of
    it, as a bad few seconds of this host do): the bisection alone would end below 5,000/s. Its second look
    passes, and the search goes on between 5,000/s and the ceiling to the same 1/64 resolution."""
    measure, asked = _fake_server(6400)
    bad = {5000}

    def unlucky(rate: float) -> knee.Probe:
        if rate in bad:
            bad.discard(rate)
            asked.append(rate)
            return knee.judge(_row(rate, rate, 50_000), rate, knee_plan.parse_slo("p99<5ms"), Thresholds())
        return measure(rate)

    probes, lo, hi = knee.search(unlucky, 10_000, 6)
    assert asked[0] == 5000 and not probes[0].met
    second = [p for p in probes if p.recheck]
    # the lowest rate that failed above it (a real failure) gets its second look too, and fails it: the search
    # ends on a rate that failed twice
    assert [(p.rate, p.met) for p in second] == [(5000, True), (hi, False)] and hi > 6400, second
    assert lo <= 6400 < hi and hi - lo <= 10_000 / 64 + 1
    assert all(p.met == (p.rate <= 6400) for p in probes[1:])


def test_a_slow_minute_that_fails_several_rates_is_looked_through():
    """The shape of 2026-12-01's pair 3 (bench/RESULTS.md): the first probe passes, then a slow minute fails the
    next three (whatever the server serves: 7,000/s here). The first second look passes the lowest of them; the
    search goes on above it and stops under the next rate the slow minute failed: before, the knee was taken
    there. Now that rate gets its own second look, passes, and the search reaches the server's knee, where the
    last look fails."""
    measure, asked = _fake_server(7000)
    n = 0

    def slow_minute(rate: float) -> knee.Probe:
        nonlocal n
        n += 1
        if 2 <= n <= 4:
            asked.append(rate)
            return knee.judge(_row(rate, rate, 45_000), rate, knee_plan.parse_slo("p99<5ms"), Thresholds())
        return measure(rate)

    probes, lo, hi = knee.search(slow_minute, 10_000, 6)
    assert [p.met for p in probes[:4]] == [True, False, False, False], [(p.rate, p.met) for p in probes]
    second = [(p.rate, p.met) for p in probes if p.recheck]
    assert [m for _, m in second] == [True, True, False] and second[-1][0] == hi, second
    assert lo <= 7000 < hi and hi - lo <= 10_000 / 64 + 1, (lo, hi, [p.rate for p in probes])


def test_second_looks_are_bounded():
    """A host on which every rate fails its first look and passes its second (a slow moment before each) cannot
    keep the search going: at most knee.LOOKS second looks, and the knee is the highest rate that passed."""
    seen: set[float] = set()

    def first_fails(rate: float) -> knee.Probe:
        p99 = 1000 if rate in seen else 50_000
        seen.add(rate)
        return knee.judge(_row(rate, rate, p99), rate, knee_plan.parse_slo("p99<5ms"), Thresholds())

    probes, lo, hi = knee.search(first_fails, 10_000, 6)
    assert sum(p.recheck for p in probes) == knee.LOOKS
    assert all(p.met for p in probes if p.recheck) and lo == max(p.rate for p in probes if p.met)


def test_a_ceiling_measured_in_a_slow_minute_is_measured_again_when_every_rate_up_to_it_passed():
    """2026-12-02's shape (bench/RESULTS.md): the closed-loop cells ran in a slow minute and measured 3,000/s of a
    server that serves 7,000/s; every rate up to 3,000/s passed. The ceiling is measured again, once, and the
    search goes on above the old one, to the server's knee; where a rate failed below the ceiling (a knee under
    it), the ceiling is not measured again."""
    measure, asked = _fake_server(7000)
    agains = []

    def again() -> float:
        agains.append(10_000.0)
        return 10_000.0

    probes, lo, hi = knee.search(measure, 3_000, 6, again=again)
    assert agains == [10_000.0], agains
    assert lo <= 7000 < hi and hi - lo <= 10_000 / 64 + 1, (lo, hi, [p.rate for p in probes])
    assert max(p.rate for p in probes if p.met) == lo and all(p.met == (p.rate <= 7000) for p in probes)
    # measured again no higher (within the search's resolution): the search ends at the ceiling, as before
    probes, lo, hi = knee.search(measure, 3_000, 6, again=lambda: 3_020.0)
    assert hi == 3_000 and lo > 3_000 - 3_000 / 64 - 1, (lo, hi)
    # a knee below the ceiling: no second measure
    probes, lo, hi = knee.search(_fake_server(2000)[0], 3_000, 6, again=lambda: pytest.fail("measured again"))
    assert lo <= 2000 < hi


def test_a_rate_fails_only_when_every_try_fails_and_the_ceiling_is_the_best_cell():
    """A slow moment of the host fails one cell: the next try at the same rate passes. A rate the server cannot
    serve fails all its tries, and costs no more than that."""
    slo, t = knee_plan.parse_slo("p99<5ms"), Thresholds()
    p99s = iter([9_000, 7_000, 3_000])  # two cells in a slow regime, then the usual one
    got = knee.tried(lambda: knee.judge(_row(1000, 1000, next(p99s)), 1000, slo, t), 3)
    assert got.met and got.tries == 3 and got.latency_us == 3_000 and got.record(slo)["tries"] == 3
    # every try with its own verdict (issue 51: a rate's merged row may show a mean over the objective)
    tries = got.record(slo)["attempts"]
    assert [(a["p99_us"], a["met"]) for a in tries] == [(9_000, False), (7_000, False), (3_000, True)]
    header, rows = tables.knee_tries_table({"slo": {"stat": "p99", "text": "p99<5ms"}, "probes": [got.record(slo)]})
    assert header[1] == "try" and [r[1] for r in rows] == ["1 of 3", "2 of 3", "3 of 3"]
    assert rows[0][-1].startswith("fail: p99 9 ms over the 5 ms limit"), rows
    assert rows[2][-1].startswith("pass: p99 3 ms within the 5 ms limit"), rows
    assert rows[2][-1].endswith("(decided the rate)") and "decided" not in rows[0][-1]
    # a rate that failed and was looked at again (search's second look, `recheck`): the second look decided it
    failed = knee.tried(lambda: knee.judge(_row(1000, 800, 9_000), 1000, slo, t), 1)
    again = dataclasses.replace(got, recheck=True)
    _, rows = tables.knee_tries_table({"slo": {"stat": "p99"}, "probes": [failed.record(slo), again.record(slo)]})
    assert [r[1] for r in rows] == ["1 of 1", "1 of 3, a second look", "2 of 3, a second look", "3 of 3, a second look"]
    assert rows[0][-1].endswith("(the rate looked at again below)") and rows[3][-1].endswith("(decided the rate)")
    calls = []
    never = knee.tried(lambda: calls.append(1) or knee.judge(_row(1000, 800, 9_000), 1000, slo, t), 3)
    assert not never.met and never.tries == 3 and len(calls) == 3
    first = knee.tried(lambda: knee.judge(_row(1000, 1000, 1_000), 1000, slo, t), 3)
    assert first.met and first.tries == 1
    rows = [_row(1, 900, 5_000), _row(1, 1_100, 6_000), {"status": "failed", "msgs_per_sec": 5_000}]
    ceiling = knee.best_ceiling(rows, slo)
    assert (ceiling.achieved, ceiling.latency_us, ceiling.tries) == (1_100, 6_000, 3)
    assert knee.best_ceiling([{"status": "failed", "error": "stalled"}], slo).achieved is None


def _host_cells(slo, field: str, p99_host):
    """knee.tried's `measure`: cells of 1,000/s served at each (p99, the host's figure) in turn, the figure in the
    Probe's `field` (steal or slowed)."""
    it = iter(p99_host)

    def measure() -> knee.Probe:
        p99, host = next(it)
        return dataclasses.replace(knee.judge(_row(1000, 1000, p99), 1000, slo, Thresholds()), **{field: host})
    return measure


def test_a_failed_try_the_hypervisor_stole_from_is_not_one_of_the_tries():
    """A cell during which the hypervisor took more than knee.STOLEN of the host's CPU (meta.json's steal) fails
    a rate for the host, not the server: another is measured in its place, knee.STOLEN_EXTRA more at most; a
    stolen try that passes decides the rate as any other; each try's steal is in knee.json and the report."""
    slo = knee_plan.parse_slo("p99<5ms")

    def cells(*p99_steal):
        return _host_cells(slo, "steal", p99_steal)

    # two stolen failures, then the ordinary hour: three fails that count would have failed the rate at the third
    got = knee.tried(cells((9_000, 0.3), (9_000, 0.2), (9_000, 0.0), (3_000, 0.0)), 3)
    assert got.met and got.tries == 4, got
    tries = got.record(slo)["attempts"]
    assert [a["steal"] for a in tries] == [0.3, 0.2, 0.0, 0.0]
    header, rows = tables.knee_tries_table({"slo": {"stat": "p99", "text": "p99<5ms"}, "probes": [got.record(slo)]})
    assert header[5] == "stolen" and [r[5] for r in rows] == ["30%", "20%", "0%", "0%"], rows
    # failures that count: three, whatever steal the passing cells had
    assert not knee.tried(cells((9_000, 0.0), (9_000, 0.05), (9_000, 0.1)), 3).met
    # a host that steals throughout: the rate fails after tries + STOLEN_EXTRA cells, no more, and its limit is
    # the host's (every try stolen): it says nothing of the server
    stolen = knee.tried(cells(*[(9_000, 0.4)] * 5 + [(9_000, 0.25)] + [(9_000, 0.4)] * 4), 3)
    assert not stolen.met and stolen.tries == 3 + knee.STOLEN_EXTRA and stolen.limited_by == "host", stolen
    assert "the host ran out: the hypervisor took 25%-40% of its CPU in each of the 6 tries" in stolen.why
    # one failure that counts among them: the server's
    assert knee.tried(cells(*[(9_000, 0.4)] * 5 + [(9_000, 0.0)] * 5), 3).limited_by == "server"


def test_a_failed_try_the_host_slowed_is_not_one_of_the_tries():
    """A cell in which the speed canary on the backend's CPU ran its slowest 0.3 s knee.SLOWED slower than usual
    was failed by the host's speed regime: another is measured in its place, within the same knee.STOLEN_EXTRA. A
    rate the host slowed in every try fails as the server's (the regimes are this host's weather), saying so."""
    slo = knee_plan.parse_slo("p99<5ms")

    def cells(*p99_slowed):
        return _host_cells(slo, "slowed", p99_slowed)

    got = knee.tried(cells((9_000, 1.6), (9_000, 1.45), (9_000, 1.0), (3_000, 1.7)), 3)
    assert got.met and got.tries == 4 and [a["slowed"] for a in got.record(slo)["attempts"]] == [1.6, 1.45, 1.0, 1.7]
    assert "1.60x slower than usual for 0.3 s" in got.attempts[0].host_note() and not got.host_note()
    header, rows = tables.knee_tries_table({"slo": {"stat": "p99", "text": "p99<5ms"}, "probes": [got.record(slo)]})
    assert header[6] == "host CPU slowed" and [r[6] for r in rows] == ["1.60×", "1.45×", "1.00×", "1.70×"], rows
    # below SLOWED, or no canary figure, a failure counts
    assert not knee.tried(cells((9_000, 1.2), (9_000, None), (9_000, 1.34)), 3).met
    every = knee.tried(cells(*[(9_000, 1.5)] * 5 + [(9_000, 1.6)] + [(9_000, 1.5)] * 4), 3)
    assert not every.met and every.tries == 3 + knee.STOLEN_EXTRA and every.limited_by == "server", every
    assert "the host slowed or stole from each of the 6 tries (the backend's CPU up to 1.60x slower" in every.why


def test_a_rate_the_host_failed_ends_the_search_and_the_verdict_says_the_host():
    """A rate that failed only in tries the hypervisor stole from ends the search as a loader that ran out does:
    a lower rate would be judged on the host too (2026-12-02: a knee run stolen from in every cell bisected down
    to 576/s and ended with no knee, the loader's lateness blamed). knee.json and the line say the host."""
    slo, t = knee_plan.parse_slo("p99<5ms"), Thresholds()
    stolen_hour = iter([0.0] * 2 + [0.4] * 100)  # two quiet cells, then the hypervisor takes 40% of the host

    def probe(rate: float) -> knee.Probe:
        def cell() -> knee.Probe:  # a server good to 8,000/s; on the stolen hour every cell fails
            steal = next(stolen_hour)
            p99 = 1000 if rate <= 8000 and not steal else 50_000
            return dataclasses.replace(knee.judge(_row(rate, rate, p99), rate, slo, t), steal=steal)
        return knee.tried(cell, 2)

    probes, lo, hi = knee.search(probe, 10_000, 6)
    assert [p.limited_by for p in probes] == ["none", "none", "host"], probes
    assert (lo, hi) == (7_500, probes[-1].rate) and probes[-1].tries == 2 + knee.STOLEN_EXTRA
    plan = knee_plan.KneePlan(validate(RunConfig(backends=["selector"], connections=[10])), "selector", slo)
    doc = knee.document(plan, knee.best_ceiling([_row(1, 10_000, 4000)], slo), probes, (lo, hi), 1.0,
                        knee.KneeOutcome(Path(".")))
    assert doc["knee"] is None and doc["stop"] == "host" and doc["host_ran_out"]["rate"] == hi
    assert doc["loader_ran_out"] is None
    line = knee_doc.summary_line(doc)
    assert "not found: the host, not the server, ran out at 8,750/s" in line and "up to 7,500/s" in line, line
    assert "steal" in line, line


def test_a_knee_below_every_probe_says_so():
    measure, _ = _fake_server(0)
    probes, lo, hi = knee.search(measure, 10_000, 6)
    assert lo == 0 and hi == pytest.approx(10_000 / 64, abs=1) and not any(p.met for p in probes)
    doc = {"server": "x", "connections": 10, "slo": {"text": "p99<5ms"}, "ceiling": {"msgs_per_sec": 10_000},
           "bounds": [lo, hi], "knee": None}
    assert "below 156/s, the lowest rate probed" in knee_doc.summary_line(doc)
    # The open-loop cells opened connections as requests needed them: the line says how many were open at most.
    assert knee_doc.summary_line(doc | {"conns_max": 37}).startswith("knee of x at c=10 (up to 37 open) for p99<5ms")
    assert "open)" not in knee_doc.summary_line(doc | {"conns_max": 10})


def test_a_probe_the_loader_limited_never_decides_the_knee():
    """Issue 51: each probe says what set its limit (`limited_by`): the server, or the loader (its CPUs busy, its
    sends late, every connection it may open busy); a failing probe the loader limited ends the search, and
    the knee is not found for the server (knee.json and the summary say the loader ran out, and why)."""
    slo, t = knee_plan.parse_slo("p99<5ms"), Thresholds()
    assert knee.judge(_row(1000, 1000, 4000), 1000, slo, t).limited_by == "none"
    assert knee.judge(_row(1000, 1000, 9000), 1000, slo, t).limited_by == "server"
    busy = _row(1000, 1000, 9000) | {"loader_cpu": {"cpu_frac": 0.97}}
    p = knee.judge(busy, 1000, slo, t)
    assert p.limited_by == "loader" and not p.met and "the loader ran out: its CPUs were 97% busy" in p.why
    assert knee.judge(_row(1000, 1000, 4000) | {"loader_cpu": {"cpu_frac": 0.97}}, 1000, slo, t).met  # met is met
    capped = _row(1000, 1000, 9000, behind=0.2)  # _row: p99 from the send 4.5 ms, within the 5 ms
    capped["open_loop"] |= {"max_connections": 100, "conns_max": 100}
    assert "all 100 connections it may open were busy" in knee.judge(capped, 1000, slo, t).why
    # a server that fell behind, or answered slowly once sent, fills every connection the loader may open: its
    # own limit, not the loader's (uvicorn_httptools at 22.8k/s: 1,000 connections busy, p99 102 ms)
    behind_server = _row(1000, 800, 9000, behind=0.2)
    behind_server["open_loop"] |= {"max_connections": 100, "conns_max": 100}
    assert knee.judge(behind_server, 1000, slo, t).limited_by == "server"
    slow_server = _row(1000, 1000, 100_000, behind=0.5)
    slow_server["open_loop"] |= {"max_connections": 100, "conns_max": 100}
    assert knee.judge(slow_server, 1000, slo, t).limited_by == "server"
    late = _row(1000, 1000, 9000)
    late["open_loop"] |= {"loader_late": 50, "sent": 1000}
    assert "sent 5.0% of the requests late" in knee.judge(late, 1000, slo, t).why
    late["lat_sent_us"]["p99"] = 8000  # the server was slow too: its limit
    assert knee.judge(late, 1000, slo, t).limited_by == "server"

    def measure(rate: float) -> knee.Probe:  # a server good to 8,000/s behind a loader that runs out at 6,000/s
        row = _row(rate, rate, 1000 if rate <= 8000 else 50_000)
        if rate > 6000:
            row["loader_cpu"] = {"cpu_frac": 0.99}
            row["lat_us"]["p99"] = 50_000
        return knee.judge(row, rate, slo, t)

    probes, lo, hi = knee.search(measure, 10_000, 6)
    assert probes[-1].limited_by == "loader" and not any(p.limited_by == "loader" for p in probes[:-1])
    assert lo <= 6000 < hi == probes[-1].rate
    plan = knee_plan.KneePlan(validate(RunConfig(backends=["selector"], connections=[10])), "selector", slo)
    doc = knee.document(plan, knee.best_ceiling([_row(1, 10_000, 4000)], slo), probes, (lo, hi), 1.0,
                        knee.KneeOutcome(Path(".")))
    assert doc["knee"] is None and doc["stop"] == "loader" and doc["loader_ran_out"]["rate"] == hi
    assert doc["probes"][-1]["limited_by"] == "loader"
    line = knee_doc.summary_line(doc)
    assert "not found: the loader, not the server, ran out at" in line and "up to 5,000/s" in line, line


def test_knee_json_has_the_connection_cap_and_the_most_connections_open():
    """Each probe records the most connections its cell had open (the loader's open_loop.conns_max); knee.json the
    cap (--max-connections, default 1,000) and the most over the probes."""
    slo, t = knee_plan.parse_slo("p99<5ms"), Thresholds()
    probes = []
    for rate, most in ((500, 10), (1000, 37)):
        row = _row(rate, rate, 1000)
        row["open_loop"]["conns_max"] = most
        probes.append(knee.judge(row, rate, slo, t))
    assert [p.record(slo)["conns_max"] for p in probes] == [10, 37]
    plan = knee_plan.KneePlan(validate(RunConfig(backends=["selector"], connections=[10])), "selector", slo)
    ceiling = knee.best_ceiling([_row(1, 2000, 4000)], slo)
    doc = knee.document(plan, ceiling, probes, (1000, 2000), 1.0, knee.KneeOutcome(Path(".")))
    assert doc["max_connections"] == 1000 and doc["conns_max"] == 37
    plan.cfg.max_connections = 20
    assert knee.document(plan, ceiling, probes, (1000, 2000), 1.0, knee.KneeOutcome(Path(".")))["max_connections"] == 20
    plan.cfg.max_connections = 5
    with pytest.raises(InputError, match="--max-connections 5 is below -c 10"):
        knee_plan.check(plan)


@pytest.mark.parametrize("args, says", [
    (["selector"], "Missing option '--slo'"),
    (["selector", "--slo", "fast"], "--slo 'fast'"),
    (["--slo", "p99<5ms"], "give one SERVER"),
    (["selector", "--slo", "p99<5ms", "--steps", "40"], "--steps 40"),
    (["selector", "--slo", "p99<5ms", "--tries", "0"], "--tries 0"),
    (["selector", "--slo", "p99<5ms", "--arrivals", "bursty"], "--arrivals 'bursty'"),
    (["zmq_raw", "--slo", "p99<5ms"], "ZeroMQ backends (zmq_raw) under --zmq-client libzmq"),
    (["selector", "--slo", "p99<5ms", "--max-connections", "4"], "--max-connections 4 is below -c 10"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    res = netprof_cli("knee", *args)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_knee_of_a_server_of_known_capacity(tmp_path):
    """selector with 1 ms of blocking sleep per message serves at most 1,000 msgs/s, whatever the load: its
    knee for p99 < 20 ms lies below that and above half of it (at 50% load the queue is short)."""
    out = tmp_path / "knee"
    res = run_netprof("knee", "selector", "--work", "sleep:1000", "-c", "10", "--slo", "p99<20ms", "--steps", "4",
                      "--tries", "2", "--window", "1", "--warmup", "0.3", "--no-probes", "--wait", "--json",
                      "--out", str(out), timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["schema"] == knee.SCHEMA and doc["stop"] in ("steps", "host"), doc
    probes = doc["probes"]
    # A stretch of the hypervisor taking more than knee.STOLEN of the host in every try of a rate ends the search
    # on the host's verdict (knee.tried; fresh-clone run of 2026-12-02: 682/s failed in five tries at 14-23% steal,
    # achieved 0.94-1.03 at p99 28-88 ms, after 585/s had passed at 17%): no knee is claimed, and what it did
    # measure (the ceiling, the rates that passed, the report) is checked below all the same.
    host = doc["stop"] == "host"
    if host:
        stopped = probes[-1]
        assert stopped["limited_by"] == "host" and stopped["tries"] == 2 + knee.STOLEN_EXTRA, stopped
        assert all(not a["met"] and a["steal"] > knee.STOLEN for a in stopped["attempts"]), stopped
        assert doc["knee"] is None and doc["host_ran_out"]["rate"] == stopped["rate"] == doc["bounds"][1], doc
        assert doc["loader_ran_out"] is None and all(p["limited_by"] != "host" for p in probes[:-1]), probes
    # the bisection's 4 steps, then, where a rate failed, a second look at the lowest that did (knee.search; where
    # it passes the bisection goes on above it, and the lowest rate that failed then gets its own second look).
    # Where all 4 passed and the ceiling's second measure came out higher (remeasured), the bisection went on
    # between the highest passing rate and the new ceiling, to the same resolution (CI on 2026-12-02: 398/s
    # first, 832/s last, above a first ceiling of ~796/s, no second look).
    rechecks = [i for i, p in enumerate(probes) if p["recheck"]]
    first = rechecks[0] if rechecks else len(probes)
    measures = doc["ceiling"]["measures"]
    raised = len(measures) == 2 and measures[1] > measures[0] and all(p["met"] for p in probes[:4])
    resolution = measures[0] / 2 ** 4
    more = math.ceil(math.log2(max((measures[1] - probes[3]["rate"]) / resolution, 1))) if raised else 0
    assert first == 4 or (raised and 4 < first <= 4 + more) or (host and first == len(probes) < 4), (probes, measures)
    assert len(rechecks) <= knee.LOOKS, probes
    assert all(probes[i]["met"] for i in rechecks[:-1]), probes  # a look that failed ended the search
    # at most 1,000/s (1 ms asleep per message, a physical ceiling); how far below it is the host's wake-up after
    # each sleep (815/s with a neighbour busy 25% of the time on both CPUs, 2026-11-28), hence the wide floor.
    # Where the hypervisor stole more than a tenth of the host during the run, the loop's wake-ups lose that
    # share too: the floor is taken down by it (689/s in a fresh-clone run on an hour of 18-34% steal,
    # 2026-12-02). The knee is judged against the ceiling the run measured, below.
    ceiling = doc["ceiling"]["msgs_per_sec"]
    steal = run_steal(out)
    floor = 700 * (1 - steal) if steal > STEAL_REMEASURE else 700
    # measured again (2 more cells) only where every rate up to it passed (knee.search)
    remeasured = doc["ceiling"]["remeasured"]
    assert floor <= ceiling <= 1010 and doc["ceiling"]["tries"] == (4 if remeasured else 2), (doc["ceiling"], steal)
    # meta.json keeps the speed canary's figures in µs for every cell, the ceiling's too: the canary's loop of 2,000
    # additions takes tens of µs (28-31 µs on the fast hours of 2026-11-27, 50-80 on those of 2026-12-04)
    for c in json.loads((out / "meta.json").read_text())["host_per_cell"]:
        assert all(5 < c[k] < 5_000 for k in ("canary_us", "canary_usual_us", "canary_slowest_us")), c
        assert c["canary_slowest_us"] >= 0.99 * c["canary_us"], c  # a stretch of the cell, its slowest
        assert c["canary_slowed"] == pytest.approx(c["canary_slowest_us"] / c["canary_usual_us"], rel=1e-3), c
    # a passing rate took 1 or 2 cells, a failing one both; a failed cell the hypervisor stole from (knee.STOLEN),
    # or in which the host ran the backend's CPU slow (knee.SLOWED, the speed canary), is not one of them, and
    # another is measured in its place (knee.STOLEN_EXTRA at most). The canary ran: every cell has its figure.
    for p in doc["probes"]:
        assert all(a["slowed"] is not None and 0.5 < a["slowed"] < 20 for a in p["attempts"]), p
        counted = sum(not a["met"] and (a["steal"] or 0) <= knee.STOLEN and a["slowed"] < knee.SLOWED
                      for a in p["attempts"])
        assert p["tries"] == len(p["attempts"]) <= 2 + knee.STOLEN_EXTRA, p
        assert counted <= (1 if p["met"] else 2), p
        assert p["met"] or counted == 2 or p["tries"] == 2 + knee.STOLEN_EXTRA, p
    assert host or (doc["knee"] is not None and 0.5 * ceiling <= doc["knee"] <= 1010), doc
    # the search starts at half the ceiling as first measured; the ceiling is the best of its measures
    assert len(measures) == 1 + remeasured and doc["ceiling"]["msgs_per_sec"] == max(measures), doc["ceiling"]
    assert [p["rate"] for p in doc["probes"]][0] == round(measures[0] / 2)
    for p in doc["probes"]:  # a passing rate was served and within the limit; a failing one was not both
        assert p["met"] == (p["p99_us"] <= 20_000 and p["achieved_share"] >= 0.95), p
    assert json.loads((out / knee.KNEE_JSON).read_text())["knee"] == doc["knee"]
    # its open-loop cells opened connections as requests needed them, up to the default cap
    assert doc["max_connections"] == 1000 and all(p["conns_max"] >= 10 for p in doc["probes"]), doc["probes"]
    assert doc["conns_max"] == max(a["conns_max"] for p in doc["probes"] for a in p["attempts"])
    # every try is in knee.json with its verdict, and the report's table of the knee's tries lists them
    assert all(len(p["attempts"]) == p["tries"] and p["attempts"][-1]["met"] == p["met"] for p in doc["probes"])
    # the latency_knee finding is the knee's verdict (the rule reads knee.json): between the knee and the rate that
    # failed above it, or, where every rate up to the ceiling passed, at the ceiling
    bends = [a for a in json.loads((out / "summary.json").read_text())["anomalies"] if a["id"] == "latency_knee"]
    assert len(bends) == (not host), bends  # the host's verdict says nothing of the server's bend
    lo, hi = doc["bounds"]
    last = {p["rate"]: p["met"] for p in probes}  # the last probe at a rate decides it
    for bend in bends:
        assert "knee's verdict" in bend["explanation"], bend
        if last.get(hi) is False:
            assert f"between {lo:,.0f}/s and {hi:,.0f}/s" in bend["title"], (bend, doc["bounds"], last)
        else:
            assert "at the closed-loop ceiling" in bend["title"], (bend, doc["bounds"], last)
            assert f"Every rate tried up to {lo:,.0f}/s met the objective" in bend["explanation"], bend
    page = (out / "report.md").read_text()
    assert "The knee's tries, each judged on its own against p99<20ms" in page, page[:3000]
    assert page.count("(decided the rate)") == len({p["rate"] for p in doc["probes"]})  # a second look decides
    # the page opens with the knee's verdict, the terminal's last line, then one sentence along the curve that reads
    # what the verdict read: a rate that passed, its passing try (not the mean of its tries, failed ones included)
    assert page.split("\n- ")[1].startswith(f"netprof knee: the {knee_doc.summary_line(doc)}."), page[:1000]
    (curve,) = [s for s in page.split("## Headline")[0].split("\n- ") if " rates, kept a p99 from the intended" in s]
    assert f"asked {len({p['rate'] for p in doc['probes']})} rates" in curve, curve
    assert "Each rate is read as the knee's verdict read it" in curve, curve
    # each rate by itself, or (more than six) among those before the bend, said as one range
    flat = re.search(r"at the (\d+) rates from ([\d,]+)/s to ([\d,]+)/s", curve)
    lo, hi = (float(flat[2].replace(",", "")), float(flat[3].replace(",", ""))) if flat else (1.0, 0.0)
    for p in doc["probes"]:
        said = units.duration_us(p["p99_us"]) if p["met"] else r"[\d.]+ [µm]?s"
        assert lo <= p["rate"] <= hi or re.search(rf"{said} at {p['rate']:,.0f}/s", curve), (p, curve)
    # every cell is a row (the ceiling at rate 0), and the report draws latency against load
    import pandas as pd

    rows = pd.read_parquet(out / "results.parquet")
    assert sorted(rows["rate"]) == sorted([0] * doc["ceiling"]["tries"]
                                          + [p["rate"] for p in doc["probes"] for _ in range(p["tries"])])
    assert (out / "report.html").exists()
    assert not wait_no_children()
