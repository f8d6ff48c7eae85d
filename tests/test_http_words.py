"""Issue 51: HTTP runs speak in requests. An HTTP cell's terminal lines, tables, plots' words, report
sentences and findings say req/s and "per request"; echo (and ZeroMQ, whose rows are "echo") cells keep
msgs/s; the rows keep `msgs_per_sec`. Constructed rows, no processes."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pandas as pd
import pytest
from rich.console import Console
from test_anomalies import frame, ids, make_row
from test_report import META, fair_counts

from netprof.profiler.analysis import compare
from netprof.profiler.analysis.rules import detect
from netprof.profiler.model import results, stats
from netprof.profiler.report import compare_report, plotset, report, tables
from netprof.profiler.run import runner

HTTP = {"protocol": "http", "framing": "own", "reads": "http", "family": "uvicorn"}


def http_row(backend="uvicorn_httptools", connections=10, **over) -> dict:
    return make_row(backend, connections, **{**HTTP, **over})


def build_http_results(d):
    """Two HTTP backends at 10 and 100 connections, 2 rounds; uvicorn_h11 contends for a lock (futex)."""
    store = results.ResultsStore(d)
    store.write_meta({**META, "command": "netprof run uvicorn_httptools uvicorn_h11 -c 10,100 -r 2",
                      "config": {"rounds": 2, "duration": 2.0, "msize": 64, "request": "GET /"}})
    for c in (10, 100):
        for rnd, jitter in ((1, 0.98), (2, 1.02)):
            for backend, mps, extra in (("uvicorn_httptools", 20_000.0, {}),
                                        ("uvicorn_h11", 8_000.0, {"syscalls_per_msg": {"futex": 2.0}})):
                row = http_row(backend, c, round=rnd, mps=mps * jitter, **extra)
                store.add(row, fair_counts(c, int(row["messages"] / c)))
    return d


@pytest.fixture(scope="module")
def http_report(tmp_path_factory):
    d = build_http_results(tmp_path_factory.mktemp("http"))
    out = io.StringIO()
    summary = report.finish(d, console=Console(file=out, width=200, color_system=None))
    return d, summary, out.getvalue()


def test_the_terminal_summary_of_an_http_run_says_req_per_s(http_report):
    _, _, terminal = http_report
    assert "req/s" in terminal and "msgs/s" not in terminal, terminal
    assert "CPU µs/req" in terminal and "kernel ops/req" in terminal and "/msg" not in terminal, terminal
    assert "per request" in terminal and "per message" not in terminal, terminal


def test_the_report_pages_of_an_http_run_say_req_per_s(http_report):
    d, summary, _ = http_report
    md = (d / "report.md").read_text()
    assert "Throughput, req/s ± 95% interval" in md and "Syscalls per request" in md
    assert "msgs/s" not in md and "per message" not in md and "/msg" not in md, md
    page = (d / "report.html").read_text()
    assert "req/s" in page and "msgs/s" not in page and "per message" not in page
    # the rows keep their column names: for HTTP, msgs_per_sec counts requests
    assert all("msgs_per_sec" in r for r in summary["runs"])
    cells = stats.aggregate(results.load(d)[0])
    assert plotset.worded("Syscalls {per}", cells) == "Syscalls per request"
    assert plotset.worded("{many} per second", cells) == "requests per second"
    assert "what every request costs in system calls" in md  # the syscall plot's caption


def test_a_finding_about_an_http_cell_says_per_request():
    found = ids(detect(frame(*[http_row("uvicorn_h11", round=r, syscalls_per_msg={"futex": 2.0}) for r in (1, 2)])),
                "lock_contention")
    assert found and "2.0 futex calls per request" in found[0]["explanation"], found
    assert "per message" not in found[0]["explanation"]
    # summary.json keeps the evidence key as written; the page reads it in the cell's words (units.value)
    assert found[0]["evidence"]["futex per message"] == 2.0
    echo = ids(detect(frame(*[make_row("thread", round=r, syscalls_per_msg={"futex": 2.0}) for r in (1, 2)])),
               "lock_contention")
    assert echo and "2.0 futex calls per message" in echo[0]["explanation"]


def test_headline_table_words_follow_the_cells_protocols():
    http = stats.aggregate(frame(http_row(round=1), http_row(round=2)))
    header, _ = tables.headline_table(http)
    assert "req/s" in header and "CPU µs/req kernel / user" in header and "kernel ops/req" in header
    echo = stats.aggregate(frame(make_row(round=1), make_row(round=2)))
    header, _ = tables.headline_table(echo)
    assert "msgs/s" in header and "CPU µs/msg kernel / user" in header and "kernel ops/msg" in header
    # a table of HTTP and echo cells (two runs' rows): the protocol column says which row is which
    mixed = stats.aggregate(frame(http_row(round=1), make_row("selector", 10, round=1)))
    header, rows = tables.headline_table(mixed)
    assert "protocol" in header and "msgs/s (req/s for HTTP), 1 round" in header, header  # one round each
    assert sorted(r[header.index("protocol")] for r in rows) == ["echo", "http"]
    assert "per request" in tables.cpu_table(http)[1][0][1] and "per message" in tables.cpu_table(echo)[1][0][1]


def test_the_line_of_a_finished_cell_says_its_unit():
    cell = SimpleNamespace(label=lambda: "uvicorn_httptools c=10 round 1")
    line = runner.cell_line(cell, http_row())
    assert re.search(r"^uvicorn_httptools c=10 round 1: 50,000 req/s, p99 300 µs, ", line), line
    assert "msgs/s" in runner.cell_line(cell, make_row())
    # a cell whose server had not accepted every connection when its window opened says so (accept_queue_at_start)
    assert runner.cell_line(cell, http_row(accept_queue_at_start=169)).endswith(
        "; 169 connections not yet accepted when the window opened"), runner.cell_line(cell, http_row())
    assert "accepted" not in runner.cell_line(cell, http_row(accept_queue_at_start=0))
    # --warmup-after served that began without every first answer (its connect timeout ran out) says that too
    cut = http_row(accept_queue_at_start=40, served_first={"served": 960, "unserved": 40, "s": 10.0})
    assert runner.cell_line(cell, cut).endswith("; 40 connections not yet accepted when the window opened; 40 "
                                                "connections unanswered when the warm-up began (the connect timeout "
                                                "ran out)"), runner.cell_line(cell, cut)
    assert "unanswered" not in runner.cell_line(cell, http_row(served_first={"served": 10, "unserved": 0, "s": 0.1}))


def test_compare_of_http_runs_says_req_per_s():
    def rows(mps: float) -> pd.DataFrame:
        return stats.per_round(frame(*[http_row(round=r, mps=mps * j) for r, j in ((1, 0.99), (2, 1.0), (3, 1.01))]))

    base, new = rows(20_000.0), rows(10_000.0)
    cell = compare.judge_cell(base, new)
    assert cell["metrics"]["msgs_per_sec"]["label"] == "req/s"
    assert cell["metrics"]["cpu_us_per_msg.user"]["label"] == "user CPU per request"
    why = compare.why("uvicorn_httptools c=10", cell["metrics"], compare.protocols(base, new))
    assert why is not None and why.startswith("uvicorn_httptools c=10: −50% req/s"), why
    doc = {"base": {"path": "a", "name": "a"}, "method": {"text": ""}, "fail_if": {"checks": [], "breaches": []},
           "comparisons": [{"new": {"path": "b", "name": "b"}, "matched_on": ["backend", "protocol"],
                            "compared_across": {}, "warnings": [], "unmatched": {"base_only": [], "new_only": []},
                            "cells": [{"protocol": "http", "label": "uvicorn_httptools c=10", "verdict": "slower",
                                       "why": why, "rounds": {"base": 3, "new": 3, "base_failed": 0,
                                                              "new_failed": 0}, **cell}]}]}
    view = compare_report.view(doc)["comparisons"][0]
    assert view["summary_header"][1:3] == ["BASE req/s", "NEW req/s"]
    assert [r[0] for r in view["details"][0]["rows"]][:1] == ["req/s"]


def test_headline_table_says_closed_loop_for_a_rate_of_zero():
    """A knee's ceiling cells (closed loop) beside its rates: 'closed loop' under the rate column, not 0."""
    rows = [http_row(round=1, rate=0), http_row(round=2, rate=16662)]
    header, body = tables.headline_table(stats.aggregate(frame(*rows)))
    assert sorted(r[header.index("rate")] for r in body) == ["16,662", "closed loop"], (header, body)


def test_headline_table_at_a_set_rate_puts_the_lowest_p99_first():
    """Every server answers the rate asked: within a rate, the lowest p99 first, not the noise of their msgs/s."""
    rows = [http_row("aiohttp", round=1, rate=5000, mps=5_010.0, lat_us={"p99": 674.0}),
            http_row("granian_rsgi", round=1, rate=5000, mps=5_000.0, lat_us={"p99": 234.0}),
            http_row("uvicorn_httptools", round=1, rate=5000, mps=5_005.0, lat_us={"p99": 464.0})]
    header, body = tables.headline_table(stats.aggregate(frame(*rows)))
    assert [r[0] for r in body] == ["granian_rsgi", "uvicorn_httptools", "aiohttp"], body
    from netprof.profiler.report.report import headline_note

    note = headline_note(stats.aggregate(frame(*rows)))
    assert "latency from the loader (at a set rate, from each request's intended send)" in note, note
    assert note.endswith("Fastest first within each group (at a set rate, the lowest p99 first)."), note
