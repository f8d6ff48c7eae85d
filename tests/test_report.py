"""report.finish() on a results directory built from constructed rows (no processes): report.md,
report.html and summary.json say what ran, what was found and why; headless Chromium renders the HTML."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_anomalies import STARVED, frame, make_row

from helpers import REQUIRE_TOOLS
from netprof.profiler.model import results, schema, stats
from netprof.profiler.report import report

META = {"netprof_version": "0.1.0", "started": "2026-11-21T12:00:00+00:00",
        "command": "netprof run selector uvloop_sock asyncio -c 10,100,1000 -r 2 --pipeline 1,4",
        "python": {"version": "3.11.2"}, "packages": {"uvloop": "0.23.0", "gevent": "26.9.0"},
        "kernel": "6.18.0", "cpu_model": "Test CPU @ 2.0GHz", "cpus": 2,
        "pinning": {"enabled": True, "backend_cpu": "0", "loader_cpus": [1]},
        "config": {"rounds": 2, "duration": 2.0, "msize": 64}}


def fair_counts(n: int, per: int) -> list[int]:
    rng = np.random.default_rng(n)
    return [int(v) for v in rng.integers(int(per * 0.97), int(per * 1.03) + 1, n)]


def starved_counts(n: int, total: int) -> list[int]:
    active = max(1, n // 30)
    return [total // active] * active + [1] * (n - active)


def build_results(d: Path) -> Path:
    """selector (fast, fair), uvloop_sock (epoll_ctl churn; starves at pipeline 4 with the eager read),
    asyncio (mmap churn, user-dominated), one EMFILE failure, a stack file and a flamegraph."""
    store = results.ResultsStore(d)
    store.write_meta(META)
    speeds = {"selector": 90_000.0, "uvloop_sock": 60_000.0, "asyncio": 30_000.0}
    extra = {"uvloop_sock": {"syscalls_per_msg": {"epoll_ctl": 2.0},
                             "cpu": {"user_frac": 0.6, "user_s": 1.2, "sys_s": 0.8}},
             "asyncio": {"syscalls_per_msg": {"mmap": 1.0, "munmap": 1.0, "mremap": 1.0},
                         "cpu": {"user_frac": 0.85, "user_s": 1.6, "sys_s": 0.3}}}
    for c in (10, 100, 1000):
        for backend, mps in speeds.items():
            for rnd, jitter in ((1, 0.98), (2, 1.02)):
                m = mps * jitter * (0.6 if c == 1000 and backend == "asyncio" else 1.0)
                row = make_row(backend, c, round=rnd, mps=m, **extra.get(backend, {}))
                store.add(row, fair_counts(c, int(row["messages"] / c)))
    for rnd in (1, 2):  # pipeline 4: uvloop_sock-like backend with the eager read starves
        row = make_row("uvloop_sock", 1000, pipeline=4, round=rnd, mps=120_000.0, per_conn=STARVED,
                       syscalls_per_msg={"epoll_ctl": 0.04}, lat_us={"p50": 50.0, "p999": 20_000.0})
        store.add(row, starved_counts(1000, row["messages"]))
        store.add(make_row("selector", 1000, pipeline=4, round=rnd, mps=150_000.0), fair_counts(1000, 300))
    store.add(make_row("asyncio", 10000, status="failed", error="EMFILE: accept: Too many open files",
                       messages=0, msgs_per_sec=0.0))
    (d / "stacks").mkdir()
    (d / "stacks" / f"{schema.cell_slug(make_row('asyncio', 100))}.json").write_text(json.dumps(
        {"mmap": [{"count": 5000, "frames": ["__mmap (libc.so.6)", "sysmalloc (libc.so.6)",
                                             "PyBytes_FromStringAndSize (python3.11)", "sock_recv (_socket)"]}]}))
    for backend in ("selector", "asyncio"):  # asyncio c=100: the mmap churn card links its flamegraph
        fg = d / "flamegraphs" / schema.cell_slug(make_row(backend, 100))
        fg.mkdir(parents=True)
        (fg / "oncpu.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="100" height="20">'
                                      '<rect width="100" height="20" fill="#e66"/></svg>')
    return d


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    d = build_results(tmp_path_factory.mktemp("run"))
    return d, report.finish(d)


def test_summary_has_contract_shape(reported):
    d, summary = reported
    assert set(summary) == {"schema", "runs", "cells", "anomalies", "artifacts", "meta"}  # docs/results-format.md
    assert summary["schema"] == 1 and summary["cells"]
    assert {"mean", "interval", "n"} <= set(summary["cells"][0]["metrics"]["msgs_per_sec"])
    on_disk = json.loads((d / "summary.json").read_text())
    assert on_disk["anomalies"] == summary["anomalies"]
    run = summary["runs"][0]
    for key in ("backend", "connections", "pipeline", "round", "messages", "duration_s", "msgs_per_sec",
                "lat_us", "per_conn", "cpu", "syscalls_per_msg", "ctx_switches_per_msg", "probes"):
        assert key in run
    for a in summary["anomalies"]:
        assert {"id", "backend", "connections", "severity", "title", "explanation", "evidence"} <= set(a)
    for key in ("report_md", "report_html", "summary_json"):
        assert Path(summary["artifacts"][key]).exists()
    assert summary["artifacts"]["flamegraphs"] and summary["artifacts"]["stacks"]


def test_expected_anomalies_most_severe_first(reported):
    _, summary = reported
    found = {(a["id"], a["backend"], a["connections"], a.get("pipeline")) for a in summary["anomalies"]}
    assert ("starvation", "uvloop_sock", 1000, 4) in found
    assert ("readiness_churn", "uvloop_sock", 1000, 1) in found      # one card for all scales: the largest
    assert ("mmap_churn", "asyncio", 100, 1) in found                # the scale that has stacks
    assert sum(a["id"] == "readiness_churn" for a in summary["anomalies"]) == 1
    assert ("failed_cells", "asyncio", 10000, 1) in found
    assert any(a["id"] == "cpu_split" and a["backend"] == "asyncio" for a in summary["anomalies"])
    assert not any(a["backend"] == "selector" for a in summary["anomalies"])  # the healthy one stays clean
    sev = [a["severity"] for a in summary["anomalies"]]
    assert sev == sorted(sev, key=["critical", "warning", "info"].index)


def test_markdown_reads_as_a_finding(reported):
    d, _ = reported
    md = (d / "report.md").read_text()
    first = md.split("## What ran")[0]
    assert "At 10, 100 and 1000 connections, **selector** is fastest with 90k msgs/s" in first
    assert "the next, uvloop_sock" in first and "µs of CPU per message" in first
    assert "Most severe:" in first
    for heading in ("## Headline", "## What ran", "## Anomalies", "Throughput, msgs/s", "Relative speed",
                    "Latency p50 / p95 / p99 / p999", "Syscalls per message", "## Plots", "## Flamegraphs"):
        assert heading in md
    assert "EMFILE" in md and "fd limit" in md
    assert "sendto + recvfrom" in md                      # compact syscall notation
    assert "(plots/throughput.svg)" in first              # the throughput plot is on the first screen
    assert f"flamegraphs/{schema.cell_slug(make_row('selector', 100))}/oncpu.svg" in md
    assert "already waiting" in md and "selector_events.py" in md and "sock_recv (_socket)" in md
    assert md.index("[CRITICAL]") < md.index("[WARNING]") < md.index("[INFO]")


def test_plots_written_and_html_self_contained(reported):
    d, summary = reported
    names = {Path(p).stem for p in summary["artifacts"]["plots"]}
    assert names == {"throughput", "latency", "syscalls", "cpu", "fairness", "per_conn"}
    for p in summary["artifacts"]["plots"]:
        assert Path(p).suffix == ".svg" and Path(p).read_text().lstrip().startswith("<?xml")
    page = (d / "report.html").read_text()
    assert page.count("data:image/svg+xml;base64,") == 6
    assert "http://" not in page.replace('xmlns="http://www.w3.org', "") and "https://" not in page
    assert "<strong>selector</strong> is fastest" in page and "<code>sock_recv</code>" in page
    assert 'class="anomaly critical"' in page
    # The same data draws the same bytes (a committed report re-made changes only where its figures did): drawn
    # twice here, not through the plot cache, which would hand back the first drawing.
    from netprof.profiler.report import plots
    cells = stats.aggregate(pd.read_parquet(d / results.RESULTS_PARQUET))
    first, second = (plots.draw("throughput", cells, None) for _ in range(2))
    assert first and b"clip-path" in first and first == second


def test_report_without_probes_or_per_conn(tmp_path):
    store = results.ResultsStore(tmp_path)
    row = make_row()
    for k in ("syscalls_per_msg", "syscalls", "ctx", "per_conn"):
        row.pop(k)
    row["probes"] = []
    store.add(row)
    summary = report.finish(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "selector** handled" in md and "No anomaly rule fired" in md
    assert summary["anomalies"] == []


def test_report_when_every_cell_failed(tmp_path):
    store = results.ResultsStore(tmp_path)
    store.add(make_row(status="failed", error="backend exited with code -9: ", messages=0, msgs_per_sec=0.0))
    summary = report.finish(tmp_path)
    assert [a["id"] for a in summary["anomalies"]] == ["failed_cells"]
    assert "every cell failed" in (tmp_path / "report.md").read_text()


# --- the HTML as a browser shows it -------------------------------------------------------------

def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        if REQUIRE_TOOLS:
            pytest.fail("CI=true but chromium is not installed (scripts/setup-system.sh installs it)")
        pytest.skip("chromium not installed")
    return path


def test_html_renders_in_headless_chromium(reported, tmp_path):
    d, _ = reported
    png = tmp_path / "report.png"
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1200,3000",
                    (d / "report.html").resolve().as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert png.exists() and png.stat().st_size > 10_000, "chromium wrote no screenshot"
    import matplotlib.image as mpimg

    img = mpimg.imread(png)[..., :3]
    non_white = float((img.mean(axis=2) < 0.95).mean())
    distinct = len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert non_white > 0.05, f"screenshot is nearly blank ({non_white:.1%} non-white)"
    assert distinct > 200, f"screenshot has only {distinct} colours: text and plots did not render"
    if os.environ.get("NETPROF_KEEP_SCREENSHOT"):
        shutil.copy(png, os.environ["NETPROF_KEEP_SCREENSHOT"])


def test_pinned_and_unpinned_cells_are_told_apart(tmp_path):
    store = results.ResultsStore(tmp_path)
    store.add(make_row("thread", 100, mps=20_000.0, pinned=False, syscalls_per_msg={"futex": 15.0}))
    store.add(make_row("thread", 100, mps=90_000.0, pinned=True, syscalls_per_msg={"futex": 0.01}))
    summary = report.finish(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| thread (not pinned) |" in md and "| thread |" in md
    (a,) = [a for a in summary["anomalies"] if a["id"] == "lock_contention"]
    assert "same cell pinned" in a["evidence"] and "15" in a["explanation"]


def test_fairness_is_stated_plainly_either_way():
    """The seed's starvation question gets an answer in the findings, whether or not it happened."""

    from netprof.profiler.report.findings import _fairness_sentence

    cells = pd.DataFrame({"backend": ["asyncio_sock"] * 2, "connections": [100, 100], "pipeline": [1, 4],
                          "per_conn.jain": [1.0, 0.99]})
    fair = _fairness_sentence(cells, [])
    assert "evenly" in fair and "4 messages in flight" in fair and "did not appear" in fair
    starved = {"id": "starvation", "backend": "asyncio_sock", "connections": 100, "pipeline": 4,
               "evidence": {"Jain index (1 = fair)": 0.4, "mechanism": "reads did not yield."}}
    broke = _fairness_sentence(cells, [starved])
    assert broke.startswith("Fairness broke in 1 cell") and "asyncio_sock at 100 connections, 4 in flight" in broke
    assert "listen queue" not in broke
    # Cells that opened their window with connections not yet accepted: the headline says so, with the counts.
    queued = [{"id": "starvation", "backend": b, "connections": 1000, "pipeline": 1,
               "evidence": {"Jain index (1 = fair)": 0.3, "connections in its listen queue when the window opened": q}}
              for b, q in (("trio", 428), ("uvloop_sock", 470))]
    both = _fairness_sentence(cells, [starved, *queued])
    assert ("In 2 of these cells (trio, uvloop_sock) the window opened with connections the server had not accepted "
            "yet (428–470 in its listen queue): they got nothing until it took them in; `--warmup-after served` "
            "measures those cells with every connection in.") in both, both
    assert "In every one of these cells (trio)" in _fairness_sentence(cells, queued[:1])


def test_probe_sentence_says_whether_the_probes_stayed_inside_the_guards():
    """The report's claim that no probe ran in headline time follows each cell's measured attach and
    detach times (probed.late_ms / probed.spill_ms), and names the cells where it does not hold."""
    from netprof.profiler.report.findings import _probe_sentence

    def cells(spill: float) -> pd.DataFrame:
        return pd.DataFrame({"backend": ["selector", "cpp_epoll"], "interpreter": ["cpython-3.11.2"] * 2,
                             "connections": [100, 100], "pipeline": [1, 1], "probe_cost": [0.03, 0.05],
                             "probed.share": [0.3, 0.3], "probed.guard_s": [0.1, 0.1],
                             "probed.attach_lead_ms": [98.0, 97.5], "probed.detach_lag_ms": [9.0, 9.5 + spill],
                             "probed.late_ms": [0.0, 0.0], "probed.spill_ms": [0.0, spill]})

    inside = _probe_sentence(cells(0.0))
    assert "97.5 ms or more before it" in inside and "within 9.5 ms after it" in inside
    assert "unprobed parts" not in inside  # rows of a loader without the parts say nothing of them
    drifting = cells(0.0).assign(unprobed_drift=[0.012, 0.061])
    assert "were 1% to 6% apart: a cost within that is within the cell's own noise" in _probe_sentence(drifting)
    assert "no probe ran in headline time" in inside
    assert "the probes cost 3% to 5% of throughput while attached" in inside, inside
    # faster with the probes attached in every cell is noise, not a cost of −8%
    faster = _probe_sentence(cells(0.0).assign(probe_cost=[-0.08, -0.03]))
    assert "the probes cost nothing measurable: the probed part ran 3% to 8% faster than the rest of its window" \
        in faster, faster
    assert "cost 0% to 6% of throughput" in _probe_sentence(cells(0.0).assign(probe_cost=[-0.004, 0.06]))  # no -0%
    # at a set rate every part answers the rate asked: the cost is the server's CPU per request, not throughput
    at_rate = cells(0.0).assign(rate=[2000, 2000], protocol="http", probe_cost=[0.0, 0.0001],
                                probe_cpu_cost=[0.03, 0.052], unprobed_drift=[0.0, 0.0])
    said = _probe_sentence(at_rate)
    assert ("Measured in these cells, at a set rate every part of the window answers the rate asked, so the probes "
            "cost 3% to 5% more server CPU per request while attached; the probe-cost table") in said, said
    assert "of throughput" not in said and "unprobed parts" not in said, said
    both = pd.concat([cells(0.0).iloc[:1].assign(rate=0), at_rate.iloc[1:]], ignore_index=True)
    said = _probe_sentence(both)
    assert ("the probes cost 3% of throughput while attached; at a set rate, where every part of the window answers "
            "the rate asked, the probes cost 5% more server CPU per request while attached") in said, said
    mixed = _probe_sentence(at_rate.assign(probe_cpu_cost=[-0.11, 0.03]))
    assert "the probes cost between −11% and +3% in server CPU per request while attached (below zero: noise)" \
        in mixed, mixed
    mixed = _probe_sentence(cells(0.0).assign(probe_cost=[-0.07, 0.12]))
    assert "the probes cost between −7% and +12% of throughput while attached (below zero: noise)" in mixed, mixed
    older = _probe_sentence(at_rate.drop(columns="probe_cpu_cost"))
    assert "the probes' cost does not show in throughput; these cells, older, have no CPU figure for it" in older
    past = _probe_sentence(cells(20.0))
    assert "In 1 cell (cpp_epoll" in past and "no probe ran" not in past and "100 ms guard" in past


def test_at_a_set_rate_the_findings_rank_by_p99_not_throughput():
    """At a set rate every backend answers the rate asked (30.1k/s against 30k/s was "fastest, 1.00× the next"):
    the opening sentence ranks the backends by their p99 from the intended send and says which fell short of the
    rate; one backend alone says its p99, and the rate even when it is the run's only one."""
    from netprof.profiler.report.findings import sentences as findings

    def at(backend, p99, mps, rnd=1, rate=30_000):
        return make_row(backend, 10, round=rnd, mps=mps, rate=rate, lat_us={"p50": 80.0, "p99": p99},
                        open_loop={"achieved_share": mps / rate})

    rows = [at("uvicorn_httptools", 883.0, 30_000.0), at("granian_rsgi", 145_000.0, 30_100.0),
            at("aiohttp", 1_200_000.0, 24_300.0)]
    first = findings(stats.aggregate(frame(*rows)), [], frame(*rows))[0]
    assert first.startswith("At 10 connections, at 30,000/s, **uvicorn_httptools** kept the lowest p99 from the "
                            "intended send, "
                            "883 µs (p50 80 µs); granian_rsgi 145 ms, aiohttp 1.2 s, answering 81% of it."), first
    assert "fastest" not in first and "not a clear win" not in first  # one round each: nothing to overlap
    # two rounds each, the runner-up's best below the leader's worst: said
    rows = [at("uvicorn_httptools", p99, 30_000.0, rnd) for rnd, p99 in ((1, 800.0), (2, 1_000.0))] + \
           [at("granian_rsgi", p99, 30_000.0, rnd) for rnd, p99 in ((1, 900.0), (2, 1_500.0))]
    first = findings(stats.aggregate(frame(*rows)), [], frame(*rows))[0]
    assert ("Their rounds' p99s overlapped (800 µs–1 ms against 900 µs–1.5 ms): not a clear win." in first), first
    one = [at("uvicorn_httptools", 883.0, 30_000.0, rnd) for rnd in (1, 2)]
    first = findings(stats.aggregate(frame(*one)), [], frame(*one))[0]
    assert first.startswith("At 10 connections, at 30,000/s (the mean of 2 rounds), **uvicorn_httptools** answered "
                            "with p99 883 µs from the intended send (p50 80 µs). It used"), first


def test_a_starved_leader_is_cautioned_as_the_fastest_only_among_several():
    """The caution after the ranking sentence: "the fastest backend starved part of its connections" where another
    backend ran beside it; a run of one backend ("the fastest" of one, 2026-12-06) says "it"."""
    from netprof.profiler.report.findings import sentences as findings

    starved = {"id": "starvation", "backend": "socketserver", "connections": 1000, "pipeline": 1,
               "framing": "message", "severity": "critical", "title": "Connection starvation",
               "evidence": {"Jain index (1 = fair)": 0.3}}
    one = [make_row("socketserver", 1000, mps=180_000.0, per_conn=STARVED, framing="message")]
    first = findings(stats.aggregate(frame(*one)), [starved], frame(*one))[0]
    assert first.endswith(" Caution: at 1000 connections it starved part of its connections (see the anomalies), so "
                          "its figure there is not fair service."), first
    two = one + [make_row("selector", 1000, mps=120_000.0, framing="message")]
    first = findings(stats.aggregate(frame(*two)), [starved], frame(*two))[0]
    assert " Caution: at 1000 connections the fastest backend starved part of its connections" in first, first


def test_one_backend_at_several_rates_is_one_sentence_along_its_curve():
    """A sentence per rate restated the table (a knee run opened with seven): one backend at several rates reads as
    one sentence, each rate's p99 from the intended send (and the share answered, where short), its rounds, and its
    cost at the lowest rate and at the highest; two backends at a rate still say who kept the lower p99."""
    from netprof.profiler.report.findings import sentences as findings

    def at(backend, rate, p99, mps, rnd=1):
        return make_row(backend, 10, round=rnd, mps=mps, rate=rate, lat_us={"p50": 80.0, "p99": p99},
                        open_loop={"achieved_share": mps / rate})

    rows = [at("selector", rate, p99, mps, rnd) for rnd in (1, 2)
            for rate, p99, mps in ((500, 900.0, 500.0), (2_000, 4_000.0, 2_000.0), (4_000, 250_000.0, 3_000.0))]
    out = findings(stats.aggregate(frame(*rows)), [], frame(*rows))
    (curve,) = [s for s in out if "rates, kept" in s]
    assert curve.startswith("At 10 connections, **selector**, asked 3 rates, kept a p99 from the intended send of "
                            "900 µs at 500/s, 4 ms at 2,000/s and 250 ms at 4,000/s (answering 75% of it). Each rate "
                            "is the mean of its 2 rounds. It used "), curve
    assert " at 500/s, " in curve.split("It used")[1] and curve.endswith(" at 4,000/s."), curve
    assert not [s for s in out if "kept the lowest p99" in s]
    # a knee's search tries many rates (14 at 19:51): past CURVE_LIST, those before the bend read as one range
    many = [at("selector", 1_000 * k, p99, 1_000.0 * k * share)
            for k, p99, share in ((1, 900.0, 1.0), (2, 1_200.0, 1.0), (3, 800.0, 1.0), (4, 2_000.0, 1.0),
                                  (5, 1_500.0, 1.0), (6, 1_000.0, 1.0), (7, 9_000.0, 1.0), (8, 300_000.0, 0.8))]
    (long,) = [s for s in findings(stats.aggregate(frame(*many)), [], frame(*many)) if "rates, kept" in s]
    assert ("asked 8 rates, kept a p99 from the intended send of 800 µs to 2 ms at the 6 rates from 1,000/s to "
            "6,000/s, 9 ms at 7,000/s and 300 ms at 8,000/s (answering 80% of it).") in long, long
    rows += [at("uvloop_sock", 2_000, 1_000.0, 2_000.0)]
    out = findings(stats.aggregate(frame(*rows)), [], frame(*rows))
    assert len([s for s in out if "kept the lowest p99" in s or "answered with p99" in s]) == 3, out
    assert any(s.startswith("At 10 connections, at 2,000/s, **uvloop_sock** kept the lowest p99") for s in out), out


def test_several_backends_at_several_rates_are_one_sentence_on_who_kept_the_lowest_p99():
    """bench/reports/knee opened with a sentence per rate (seven, each naming three servers): at three rates or more,
    one sentence says who kept the lowest p99 at how many of them, the others where they did, the rates where the
    runner-up's rounds reached the leader's p99, and who answered short of the rate."""
    from netprof.profiler.report.findings import sentences as findings

    def at(backend, rate, p99, share=1.0, rnd=1):
        return make_row(backend, 10, round=rnd, mps=rate * share, rate=rate, lat_us={"p50": 80.0, "p99": p99},
                        open_loop={"achieved_share": share})

    rows = [at("uvicorn_httptools", 1_000, 500.0), at("granian_rsgi", 1_000, 400.0),
            at("uvicorn_httptools", 2_000, 600.0), at("granian_rsgi", 2_000, 900.0, 0.9),
            at("uvicorn_httptools", 4_000, 1_000.0), at("granian_rsgi", 4_000, 90_000.0, 0.5)]
    out = findings(stats.aggregate(frame(*rows)), [], frame(*rows))
    assert out[0] == ("At 10 connections, across 3 rates from 1,000/s to 4,000/s, **uvicorn_httptools** kept the "
                      "lowest p99 from the intended send at 2 of them (600 µs to 1 ms); granian_rsgi at 1,000/s "
                      "(400 µs). Short of the rate asked: granian_rsgi answered 90% of 2,000/s and 50% of 4,000/s."
                      ), out
    assert not [s for s in out if "kept the lowest p99 from the intended send," in s]  # no sentence per rate
    # two rounds each at 2,000/s, the runner-up's best below the leader's worst: not a clear win there
    rows += [at("uvicorn_httptools", 2_000, 800.0, rnd=2), at("granian_rsgi", 2_000, 700.0, 0.9, rnd=2)]
    out = findings(stats.aggregate(frame(*rows)), [], frame(*rows))
    assert "At 2,000/s the runner-up's rounds reached the leader's p99: not a clear win there." in out[0], out[0]


def test_a_knee_runs_headline_table_reads_each_rate_as_its_verdict(tmp_path):
    """Issue 51: the knee rate's merged row showed p99 16.3 ms under a 5-ms objective it passed (the mean of a try
    that passed and two that failed). In a knee run the headline table reads a rate that passed as its passing try,
    one that failed as the mean of its tries, and its note says so; the other tables keep the mean of every try."""
    store = results.ResultsStore(tmp_path)

    def at(rate, rnd, p99, mps):
        store.add(make_row("selector", 10, round=rnd, mps=mps, rate=rate, lat_us={"p50": 80.0, "p99": p99},
                           open_loop={"achieved_share": mps / rate, "conns_max": 10 + rnd, "max_connections": 1000}))

    at(1000, 1, 2_000.0, 1000.0)
    at(2000, 2, 30_000.0, 2000.0), at(2000, 3, 4_000.0, 2000.0)  # failed, then passed: 2,000/s passed
    at(3000, 4, 90_000.0, 2500.0), at(3000, 5, 70_000.0, 2600.0)  # failed both
    (tmp_path / results.KNEE_JSON).write_text(json.dumps(
        {"slo": {"text": "p99<5ms", "stat": "p99", "limit_us": 5000.0}, "knee": 2000, "bounds": [2000, 3000],
         "stop": "steps", "probes": [{"rate": r, "met": met, "attempts": [{"round": n} for n in rounds]}
                                     for r, met, rounds in ((1000, True, [1]), (2000, True, [2, 3]),
                                                            (3000, False, [4, 5]))]}))
    report.finish(tmp_path)
    md = (tmp_path / "report.md").read_text()
    rows = {r[1]: r for r in _headline_rows(md)}
    assert rows["2,000"][4] == "4 ms" and rows["3,000"][4] == "80 ms", rows  # its passing try; the mean of both
    assert rows["2,000"][3] == "2k (the try that passed)", rows
    assert rows["3,000"][3].startswith("2.55k ±") and rows["3,000"][3].endswith(" (2 tries, each failed)"), rows
    assert "In this knee run each rate is read as the verdict read it" in md
    # "What ran" says the loader opened connections as requests needed them, and how many at most
    assert ("| connections | 10 (pipeline 1); at a set rate, more as messages needed them: up to 15 open at once "
            "(--max-connections 1,000) |") in md
    latency = md.split("### Latency p50")[1].split("\n\n")[1]
    assert "(at 2,000/s) | 80 µs / " in latency and "/ 17 ms / " in latency, latency  # the table: mean of 2 tries


def test_what_ran_says_the_warm_up_and_when_it_began():
    """"What ran" says each window's warm-up, and that it began once every connection had been answered when the run
    asked for that (--warmup-after served: what a 1000-connection cell measures depends on it)."""
    rows = pd.DataFrame([results.flatten(make_row("thread", 1000, warmup_after=after)) for after in ("served",)])
    served = report.run_facts(rows, {**META, "config": {**META["config"], "warmup": 1.0}})
    assert served["warmup"] == " after 1 s of warm-up begun once every connection had been answered (--warmup-after " \
                               "served)"
    half = {**META, "config": {**META["config"], "warmup": 0.5}}
    plain = report.run_facts(rows.assign(warmup_after="connected"), half)
    assert plain["warmup"] == " after 0.5 s of warm-up"
    assert report.run_facts(rows, META)["warmup"] == ""  # no warm-up in the config (a watch's)


def test_the_plot_beside_the_headline_table_at_a_set_rate_is_latency():
    """Throughput bars of cells at a set rate draw the rates asked: beside the headline table, latency against load
    (two rates or more), or through the window (one rate); closed loop keeps throughput."""
    from netprof.profiler.report.plotset import Plot
    from netprof.profiler.report.report import _first_plot

    drawn = [Plot(name, name, "", f"plots/{name}.svg", "") for name in ("throughput", "latency_load", "latency_time")]
    rated = stats.aggregate(frame(make_row(rate=5000), make_row(rate=10_000)))
    assert _first_plot(rated, drawn) == "latency_load"
    assert _first_plot(rated, [p for p in drawn if p.name != "latency_load"]) == "latency_time"
    assert _first_plot(stats.aggregate(frame(make_row())), drawn) == "throughput"


def test_probe_cost_table_gives_the_interval_over_rounds():
    """One window's probe cost moves by a few percent with no probe attached (bench/RESULTS.md,
    --edges): over rounds the table gives the 95% interval beside the mean; one round gives none."""
    from netprof.profiler.model import stats
    from netprof.profiler.report import tables

    def rows(costs: list[float], drift: list[float] | None = None) -> pd.DataFrame:
        df = pd.DataFrame({"backend": "selector", "interpreter": "cpython-3.11.2", "framing": "message",
                           "connections": 100, "pipeline": 1, "round": range(1, len(costs) + 1),
                           "status": "ok", "messages": 100_000, "msgs_per_sec": 50_000.0,
                           "probe_cost": costs, "probed.msgs_per_sec": 45_000.0})
        if drift is not None:
            df["unprobed_drift"] = drift
        return df

    (_, three), = tables.probe_cost_table(stats.aggregate(rows([0.04, 0.06, 0.08], [0.02, 0.03, 0.04])))[1]
    assert three == "-6% ±5% (45k probed; unprobed parts 3% apart)"  # t(2) 4.30 × 2% / √3 = 4.97%
    (_, one), = tables.probe_cost_table(stats.aggregate(rows([0.05])))[1]  # an older loader: no parts
    assert one == "-5% (45k probed)"
    cpu = rows([0.05, 0.05]).assign(**{"probe_cpu_cost": [0.04, 0.06], "probed.cpu_us_per_msg": 7.0})
    (_, both), = tables.probe_cost_table(stats.aggregate(cpu))[1]
    assert both == "-5% ±0% (45k probed); server CPU/msg +5% ±13% (7 µs probed)", both  # t(1) 12.7 × 1.41% / √2
    (_, at_rate), = tables.probe_cost_table(stats.aggregate(cpu.assign(rate=2000, probe_cost=0.0)))[1]
    assert at_rate == "server CPU/msg +5% ±13% (7 µs probed); throughput: the rate asked", at_rate


# --- the first screen, units, links -------------------------------------------------------------

def _headline_rows(md: str) -> list[list[str]]:
    block = md.split("## Headline")[1].split("\n\n")[1]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in block.splitlines()[2:]]


def test_headline_table_comes_first_with_every_cell(reported):
    d, summary = reported
    md = (d / "report.md").read_text()
    assert md.index("## Headline") < md.index("## What ran") < md.index("## Anomalies")
    rows = _headline_rows(md)
    header = [c.strip() for c in md.split("## Headline")[1].split("\n\n")[1].splitlines()[0].strip("|").split("|")]
    # pipeline varies in this run (1, 4), so it has its column; framing and interpreter do not
    assert header == ["backend", "pipeline", "connections", "msgs/s", "p99 latency", "CPU µs/msg kernel / user",
                      "kernel ops/msg", "Jain"]
    assert len(rows) == len(summary["cells"]) - 1  # every cell that measured something (the EMFILE one did not)
    sel = [r for r in rows if r[0] == "selector" and r[1] == "1" and r[2] == "10"]
    assert sel and sel[0][3].startswith("90k ±") and sel[0][7] == "1.00"
    page = (d / "report.html").read_text()
    assert page.index('id="headline"') < page.index('id="plot-throughput"') < page.index('id="what-ran"')
    assert '<details class="ran" id="what-ran">' in page


def test_one_backend_one_round_reads_plainly(tmp_path):
    """No 'Relative speed' with one backend; one round says why it has no interval (no '±–%'): in the throughput
    table beside each figure, and under the headline table once (its rows, every one a single round, say nothing)."""
    store = results.ResultsStore(tmp_path)
    store.add(make_row("selector", 10, mps=2_113_929.0, lat_us={"p50": 50.0, "p99": 2_113_929.0}))
    report.finish(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "Relative speed" not in md
    assert "±–" not in md and "1 round: no interval" in md
    row = _headline_rows(md)[0]
    assert row[2] == "2.11M" and row[3] == "2.1 s"
    assert "| msgs/s, 1 round |" in md and "msgs/s: one round each, so no interval; latency from the loader" in md
    # with a cell of two rounds beside it, each row says its own
    store.add(make_row("selector", 100, mps=2_000_000.0, round=1))
    store.add(make_row("selector", 100, mps=2_100_000.0, round=2))
    report.finish(tmp_path)
    md = (tmp_path / "report.md").read_text()
    rows = _headline_rows(md)
    assert rows[0][2] == "2.11M (1 round: no interval)" and rows[1][2].startswith("2.05M ±"), rows
    assert "msgs/s: mean of 1–2 rounds ± its 95% interval" in md


def test_each_anomaly_links_its_plot_and_its_cells_flamegraph(reported):
    d, summary = reported
    md = (d / "report.md").read_text()
    card = md.split("Memory-mapping churn: asyncio")[1].split("\n### ")[0]
    slug = schema.cell_slug(make_row("asyncio", 100))
    assert "[Syscalls per message plot](plots/syscalls.svg)" in card
    assert f"[oncpu flamegraph](flamegraphs/{slug}/oncpu.svg)" in card
    churn = md.split("epoll_ctl churn: uvloop_sock")[1].split("\n### ")[0]
    assert "plots/syscalls.svg" in churn and "flamegraph" not in churn  # its cells were not sampled
    page = (d / "report.html").read_text()
    assert 'href="#plot-syscalls"' in page and f'href="flamegraphs/{slug}/oncpu.svg"' in page
    assert all("links" not in a for a in summary["anomalies"])  # the links are the page's, not summary.json's


def test_evidence_reads_in_units(reported):
    d, _ = reported
    md = (d / "report.md").read_text()
    tail = md.split("Latency tail")[1].split("\n### ")[0]
    assert "| latency p999 | 20 ms |" in tail and "(µs)" not in tail


def test_uvloop_churn_card_names_every_epoll_ctl_call():
    """6 epoll_ctl per read on a uvloop backend: the card explains each call (traced on uvloop 0.23: 1 ADD,
    5 DEL, 3 of them ENOENT) and quotes uvloop's own source; asyncio's 2 per read gets the plain model."""
    from netprof.profiler.analysis import rules as anomalies

    uv = make_row("uvloop_sock", 100, family="uvloop",
                  syscalls_per_msg={"epoll_ctl": 6.0, "ioctl": 1.0, "sendto": 1.0, "recvfrom": 1.0})
    aio = make_row("asyncio_sock", 100, family="asyncio", syscalls_per_msg={"epoll_ctl": 2.0})
    found = {a["backend"]: a for a in anomalies.detect(pd.DataFrame([results.flatten(uv), results.flatten(aio)]))
             if a["id"] == "readiness_churn"}
    card = found["uvloop_sock"]
    assert "1 ADD and 5 DEL per message, 3 of them failing" in card["explanation"]
    assert "uv_poll_init" in card["evidence"]["each read, call by call (uvloop on libuv)"]
    assert card["evidence"]["ioctl per message (FIONBIO from uv_poll_init)"] == 1.0
    assert "uvloop/loop.pyx" in card["evidence"]["source"] and "poll._close()" in card["evidence"]["source"]
    assert "uv_poll_init" not in found["asyncio_sock"]["explanation"]


@pytest.mark.parametrize("best, other, says", [
    ((16.1, 13.7), (19.9, 9.0), ": its lead is not less CPU per request."),  # granian beside uvicorn, 2026-12-06
    ((11.3, 17.4), (22.6, 16.7), ", the difference mostly in user space"),
    ((0.7, 4.0), (6.8, 13.0), ", the difference mostly in the kernel"),
])
def test_the_fastest_servers_lead_is_placed_where_its_cpu_is_lower_and_never_in_cpu_it_spends(best, other, says):
    from netprof.profiler.report import findings

    def row(name, cpu):
        return pd.Series({"backend": name, "protocol": "http", "cpu_us_per_msg.user": cpu[0],
                          "cpu_us_per_msg.sys": cpu[1], "syscalls_per_msg.recvfrom": 1.0})

    text = findings._why(row("a", best), row("b", other))
    assert text.startswith(" It needs ") and says in text, text


def test_a_servers_cost_counts_the_work_it_hands_to_io_uring_beside_its_syscalls():
    """uvloop_sock hands ~1 epoll_ctl a message to io_uring: the summary's cost says it, as the table's kernel ops."""
    from netprof.profiler.model import metrics
    from netprof.profiler.report import findings

    row = {"backend": "uvloop_sock", "protocol": "echo", "cpu_us_per_msg.user": 4.9, "cpu_us_per_msg.sys": 10.0,
           "syscalls_per_msg.read": 2.0, "syscalls_per_msg.epoll_ctl": 6.03, "syscalls_per_msg.write": 1.0}
    assert findings._cost(pd.Series(row)).endswith(" and 9.03 syscalls per message")
    ring = pd.Series(row | {f"{metrics.RING_PREFIX}epoll_ctl": 1.0})
    assert findings._cost(ring).endswith(" and 9.03 syscalls + 1.00 io_uring operations per message")


def test_cpu_table_says_how_many_threads_waited_for_a_cpu():
    """The Backend CPU table adds the row's `sched` where threads waited for a CPU (a thread per connection on one
    core; prethread's two loops on one), not for a loop alone on its core, nor from figures a window's end cut
    short."""
    from netprof.profiler.report import tables

    queued = {"runq_mean": 94.3, "threads": 102, "threads_exited": 0}
    cells = [make_row("socketserver", 100, round=1, sched=queued),
             make_row("selector", 100, round=1, sched={"runq_mean": 0.02, "threads": 1, "threads_exited": 0}),
             make_row("thread", 100, round=1, sched={**queued, "threads_exited": 30}),
             make_row("prethread", 100, round=1, sched={"runq_mean": 0.98, "threads": 3, "threads_exited": 0})]
    _, rows = tables.cpu_table(stats.aggregate(frame(*cells)))
    text = {r[0]: r[1] for r in rows}
    assert text["socketserver"].endswith(", 94 of 102 threads waiting for a CPU"), text
    assert "waiting" not in text["selector"] and "waiting" not in text["thread"], text
    assert text["prethread"].endswith(", 1.0 of 3 threads waiting for a CPU"), text  # two busy loops on one CPU
