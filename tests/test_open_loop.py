"""Open-loop load (issue 34), the profiler's side, without a run: --rate and --arrivals parsed and
refused, `rate` as a run dimension, the loader request that carries it, the row made from the
loader's open-loop stats (cpp_server/PROTOCOL.md's shape), the rules that judge it and its plot.
tests/test_open_loop_run.py runs it for real."""

from __future__ import annotations

import copy
import json
import os

import pandas as pd
import pytest

from helpers import netprof_cli, wait_no_children
from netprof.profiler.analysis import rules
from netprof.profiler.analysis.rules import Thresholds, detect
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import results, schema, stats
from netprof.profiler.run import cell
from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.loader_client import RunRequest
from netprof.profiler.run.plan import Cell, RunConfig, parse_rates, validate

# --------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text,rates", [
    ("500", [500]), ("500,2k,1.5m", [500, 2000, 1_500_000]), ("2K, 0.5", [2000, 0.5]), ("10m", [10_000_000]),
    ("", None),
])
def test_rates_parse_with_suffixes(text, rates):
    assert parse_rates(text) == ({"rate": rates} if rates else {})
    if rates:  # whole rates are ints (the loader's request and the file names show "2000", not "2000.0")
        assert [type(v) for v in parse_rates(text)["rate"]] == [int if float(v).is_integer() else float for v in rates]


@pytest.mark.parametrize("text,says", [
    ("0", "out of range"), ("-5", "not a rate"), ("abc", "not a rate"), ("11m", "out of range"),
    ("500,,2k", "not a rate"), ("2k,2000", "listed twice"), ("5g", "not a rate"), ("nan", "not a rate"),
])
def test_bad_rates_are_one_line(text, says):
    with pytest.raises(InputError) as e:
        parse_rates(text)
    assert "--rate" in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


REFUSED = [
    (["--rate", "0"], "--rate 0 is out of range"),
    (["--rate", "fast"], "--rate 'fast' is not a rate"),
    (["--rate", "2e7"], "is not a rate"),
    (["--rate", "20m"], "out of range"),
    (["--rate", "500", "--think", "fixed:100"], "--rate and --think cannot go together"),
    (["--arrivals", "poisson"], "add --rate"),
    (["--rate", "500", "--arrivals", "bursty"], "--arrivals 'bursty' is not known"),
    (["--max-connections", "50"], "--max-connections caps the connections an open-loop load opens"),
    (["--rate", "500", "--max-connections", "5"], "--max-connections 5 is below -c 10"),
    (["--rate", "500", "--max-connections", "10000000"], "exceeds what `ulimit -n`"),
]


@pytest.mark.parametrize("args,expected", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_through_the_cli_in_one_line_exit_2(args, expected, tmp_path):
    res = netprof_cli("run", "selector", "-c", "10", "--no-probes", *args, "--out", str(tmp_path / "out"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert expected in lines[0], lines[0]
    assert not (tmp_path / "out").exists(), "nothing may start on bad input"
    assert not wait_no_children(timeout=2)


def test_zmq_backends_are_refused_with_a_rate(tmp_path):
    res = netprof_cli("run", "zmq_raw", "-c", "10", "--no-probes", "--rate", "1k", "--out", str(tmp_path / "out"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "ZeroMQ" in lines[0] and "zmq_raw" in lines[0], res.stderr
    assert "add --zmq-client native" in lines[0]  # libzmq's engine is closed-loop only; the loader's own ZMTP is not
    with pytest.raises(InputError, match="ZeroMQ"):
        validate(RunConfig(backends=["selector", "zmq_raw"], connections=[10], extra_dims={"rate": [100]}))
    validate(RunConfig(backends=["selector", "zmq_raw"], connections=[10], extra_dims={"rate": [100]},
                       zmq_client="native"))


# --------------------------------------------------------------------------------------------- the dimension


def test_rate_is_a_dimension_with_label_slug_and_legacy():
    row = {"backend": "selector", "connections": 10, "pipeline": 1, "framing": "message"}
    assert schema.cell_label(row | {"rate": 2000}).endswith("at 2,000/s")
    assert schema.cell_slug(row | {"rate": 2000}).endswith("-r2000")
    assert schema.cell_slug(row | {"rate": 0.5}).endswith("-r0.5")
    assert schema.cell_phrase(row | {"rate": 2000}).endswith(", at 2,000/s (message framing)")
    # Older results, and closed-loop runs, have no rate column: closed loop (0), which labels leave out.
    assert schema.key_of(row)[schema.CELL_KEYS.index("rate")] == 0
    assert "/s" not in schema.cell_label(row) and "asked" not in schema.cell_phrase(row)
    assert schema.cell_slug(row) == schema.cell_slug(row | {"rate": 0})
    legacy = schema.normalize(pd.DataFrame([row]))
    assert legacy["rate"].tolist() == [0]
    assert schema.BY_NAME["rate"].text(0) == "closed loop"  # where it varies, across runs (compare)
    assert schema.RUN_SETTINGS["arrivals"] == "closed"


def test_each_rate_is_a_cell_and_arrivals_default_to_constant():
    cfg = validate(RunConfig(backends=["selector"], connections=[10], rounds=2, extra_dims={"rate": [500, 2000]}))
    cells = list(cfg.cells())
    assert len(cells) == 4 and sorted({c.rate for c in cells}) == [500, 2000]
    assert cfg.arrivals == "constant" and cfg.arrivals_setting() == "constant"
    assert "at 2,000/s" in next(c for c in cells if c.rate == 2000).label()
    closed = validate(RunConfig(backends=["selector"], connections=[10], rounds=1))
    assert [c.rate for c in closed.cells()] == [0] and closed.arrivals_setting() == "closed"


def test_think_refused_with_rate_in_validate_too():
    with pytest.raises(InputError, match="--think"):
        validate(RunConfig(backends=["selector"], connections=[10], think="fixed:5", extra_dims={"rate": [10]}))
    with pytest.raises(InputError, match="out of range"):
        validate(RunConfig(backends=["selector"], connections=[10], extra_dims={"rate": [0]}))


# --------------------------------------------------------------------------------------------- the request


def _request(c: Cell, cfg: RunConfig) -> dict:
    """The request run_cell sends for cell `c` (its open-loop fields as run_cell passes them)."""
    return RunRequest(target="127.0.0.1:9", connections=c.connections, pipeline=c.pipeline,
                      **cell.open_loop_fields(c, cfg)).to_json()


def test_the_rate_reaches_the_loader_request_and_only_with_rate():
    cfg = validate(RunConfig(backends=["selector"], connections=[10], rounds=1, extra_dims={"rate": [500, 1_500_000]},
                             arrivals="poisson"))
    sent = [_request(c, cfg) for c in cfg.cells()]
    assert [(d["rate"], d["arrivals"]) for d in sent] == [(500, "poisson"), (1_500_000, "poisson")]
    assert all(d["timeline"] == cell.TIMELINE_SLICES for d in sent)  # latency through the window, open loop only
    assert all(d["max_connections"] == 1000 for d in sent)  # connections as needed, by default up to 1,000
    assert json.dumps(sent[0]).count('"rate": 500,') == 1  # a whole number goes out as one
    closed = validate(RunConfig(backends=["selector"], connections=[10], rounds=1))
    (c,) = closed.cells()
    d = _request(c, closed)
    assert "rate" not in d and "arrivals" not in d
    # Byte for byte the closed-loop request of before: exactly these fields.
    assert d == RunRequest(target="127.0.0.1:9", connections=10).to_json()
    assert set(d) == {"cmd", "target", "connections", "msize", "duration", "warmup", "pipeline", "think",
                      "connect_timeout", "sources", "transport"}


def test_max_connections_reaches_the_request_and_every_row():
    """--max-connections (default 1,000, never below a cell's -c) goes to the loader with the rate and is a run
    setting every row records (0 closed loop, and in rows written before it: the -c connections only)."""
    cfg = validate(RunConfig(backends=["selector"], connections=[10, 2000], rounds=1, extra_dims={"rate": [500]}))
    cells = list(cfg.cells())
    assert [_request(c, cfg)["max_connections"] for c in cells] == [1000, 2000]  # -c 2000: its own 2,000
    interp = Interpreter("", "python", "python", "3.11.2", "cpython", True, False, "")
    assert [cell.base_row(c, cfg, interp)["max_connections"] for c in cells] == [1000, 2000]
    given = validate(RunConfig(backends=["selector"], connections=[10], rounds=1, extra_dims={"rate": [500]},
                               max_connections=40))
    (c,) = given.cells()
    assert _request(c, given)["max_connections"] == 40 and cell.base_row(c, given, interp)["max_connections"] == 40
    closed = validate(RunConfig(backends=["selector"], connections=[10], rounds=1))
    (c,) = closed.cells()
    assert cell.base_row(c, closed, interp)["max_connections"] == 0 and "max_connections" not in _request(c, closed)
    assert schema.RUN_SETTINGS["max_connections"] == 0
    with pytest.raises(InputError, match="below -c 2000"):
        validate(RunConfig(backends=["selector"], connections=[10, 2000], extra_dims={"rate": [500]},
                           max_connections=1000))
    with pytest.raises(InputError, match="add --rate"):
        validate(RunConfig(backends=["selector"], connections=[10], max_connections=1000))


# --------------------------------------------------------------------------------------------- the row

LAT = {"p50": 1_200_000.0, "p90": 1_800_000.0, "p95": 1_900_000.0, "p99": 1_980_000.0, "p999": 1_999_000.0,
       "max": 2_000_000.0, "mean": 1_250_000.0}
LAT_SENT = {"p50": 9_800.0, "p90": 10_000.0, "p95": 10_050.0, "p99": 10_200.0, "p999": 11_000.0, "max": 12_000.0,
            "mean": 9_900.0}
# A loader's stats at --rate 2000 against a server that answers 1,000/s, in PROTOCOL.md's shape.
STATS = {
    "connected": 10, "setup_s": 0.01, "messages": 3000, "duration_s": 3.0, "msgs_per_sec": 1000.0,
    "latency_us": LAT, "per_conn_messages": [300] * 10, "errors": {"connect": 0, "reset": 0, "timeout": 0},
    "loader_cpu": {"user_s": 0.1, "sys_s": 0.1, "cpu_frac": 0.03}, "t_start": 1.0, "t_stop": 4.0,
    "unanswered": {"count": 0, "max_age_us": 0.0, "connections": 0},
    "rate": 2000, "arrivals": "constant",
    "latency_sent_us": LAT_SENT,
    "open_loop": {"intended": 6000, "sent": 3010, "behind": 2990,
                  "behind_late_us": {"p50": 1_000_000.0, "p99": 1_900_000.0, "max": 2_000_000.0},
                  "schedule_late_us": {"p50": 8.0, "p99": 40.0, "max": 300.0},
                  "loader_late": 0, "loader_late_threshold_us": 1000.0,
                  "queued_at_end": 2990, "in_flight_at_end": 10,
                  "max_connections": 10, "conns_max": 10, "conns_opened": 0, "waited_connect": 0,
                  "waited_slot": 0, "connect_us": {"p50": 0.0, "p99": 0.0, "max": 0.0}, "messages_on_opened": 0},
}


def _measured(result: dict, rate) -> dict:
    row = {"backend": "selector", "connections": 10, "pipeline": 1, "round": 1, "status": "ok"}
    if rate:
        row["rate"] = rate
    cell.measure_row(row, copy.deepcopy(result), cell.Marks(os.getpid()), ())
    return row


def test_open_loop_stats_become_row_columns(tmp_path):
    row = _measured(STATS, 2000)
    assert row["lat_us"]["p99"] == LAT["p99"]  # from the intended send time: the loader's latency_us
    assert row["lat_sent_us"] == LAT_SENT
    ol = row["open_loop"]
    # the share behind: those sent after waiting and those still waiting when the window closed
    assert ol["behind_share"] == pytest.approx((2990 + 6000 - 3010) / 6000)
    assert ol["achieved_share"] == pytest.approx(0.5)
    flat = results.flatten(row)
    expect = {"open_loop.intended": 6000, "open_loop.sent": 3010, "open_loop.behind": 2990,
              "open_loop.behind_late_us.p50": 1e6, "open_loop.behind_late_us.p99": 1.9e6,
              "open_loop.behind_late_us.max": 2e6, "open_loop.schedule_late_us.p50": 8.0,
              "open_loop.schedule_late_us.p99": 40.0, "open_loop.schedule_late_us.max": 300.0,
              "open_loop.queued_at_end": 2990, "open_loop.in_flight_at_end": 10, "open_loop.loader_late": 0,
              "open_loop.loader_late_threshold_us": 1000.0, "lat_sent_us.p50": 9800.0, "lat_sent_us.p99": 10200.0,
              "lat_sent_us.p90": 10000.0, "lat_sent_us.max": 12000.0, "open_loop.max_connections": 10,
              "open_loop.conns_max": 10, "open_loop.conns_opened": 0, "open_loop.waited_connect": 0,
              "open_loop.waited_slot": 0, "open_loop.messages_on_opened": 0, "open_loop.connect_us.p50": 0.0,
              "open_loop.connect_us.max": 0.0}
    assert {k: flat[k] for k in expect} == expect
    assert flat["open_loop.behind_share"] == pytest.approx((2990 + 6000 - 3010) / 6000)
    assert flat["open_loop.achieved_share"] == pytest.approx(0.5)
    # Written and read back as every results file is: the nested groups come back whole.
    store = results.ResultsStore(tmp_path)
    store.add(row)
    back = results.unflatten(pd.read_parquet(tmp_path / results.RESULTS_PARQUET).iloc[0].to_dict())
    assert back["open_loop"]["behind_late_us.p99"] == 1.9e6 and back["lat_sent_us"]["p50"] == 9800.0
    # The per-cell table averages them over rounds.
    cells = stats.aggregate(pd.DataFrame([flat, results.flatten(_measured(STATS, 2000) | {"round": 2})]))
    assert cells["open_loop.achieved_share"].iloc[0] == pytest.approx(0.5) and cells["rate"].iloc[0] == 2000


def _timeline(p99s: list[float], slice_s: float = 0.5) -> dict:
    """A loader's `timeline` (PROTOCOL.md, "Timeline") whose slices have these p99s; 0: a slice that answered none."""
    return {"slice_s": slice_s, "slices": [{"t_s": i * slice_s, "messages": 100 if p else 0,
                                            "p50_us": p / 2 if p else 0, "p99_us": p, "max_us": p}
                                           for i, p in enumerate(p99s)]}


def test_the_timeline_becomes_slice_rows_and_its_growth_a_row_figure(tmp_path):
    row = _measured({**STATS, "timeline": _timeline([0, 400_000.0, 900_000.0, 1_600_000.0, 2_000_000.0, 0])}, 2000)
    ol = row["open_loop"]  # first and last slices that answered anything: an empty slice has no p99
    assert (ol["p99_first_slice_us"], ol["p99_last_slice_us"], ol["slice_s"]) == (400_000.0, 2_000_000.0, 0.5)
    assert ol["p99_growth"] == pytest.approx(5.0)
    rows = stats.timeline_rows(_timeline([0, 1_000.0]))
    assert rows[0] == {"slice": 0, "t_s": 0.0, "slice_s": 0.5, "messages": 0, "msgs_per_sec": 0.0, "p50_us": None,
                       "p99_us": None, "max_us": None}
    assert rows[1]["msgs_per_sec"] == 200.0 and rows[1]["p99_us"] == 1_000.0
    # Without a timeline (an older loader, several loader hosts) the figures are None, the row still whole.
    ol = _measured(STATS, 2000)["open_loop"]
    assert ol["p99_growth"] is None and ol["p99_first_slice_us"] is None and ol["achieved_share"] == 0.5
    # The store writes the slices beside the row's keys, one file for the run.
    store = results.ResultsStore(tmp_path)
    store.add({**row, "rate": 2000}, timeline=rows)
    back = results.load_timeline(tmp_path)
    assert list(back.columns[:len(schema.ROW_KEYS)]) == schema.ROW_KEYS and list(back["slice"]) == [0, 1]
    assert set(back["rate"]) == {2000}


def test_headline_phase_figures_win_and_closed_loop_rows_have_none():
    phased = copy.deepcopy(STATS)
    phased["phases"] = {"unprobed": {**{k: STATS[k] for k in ("messages", "duration_s", "per_conn_messages")},
                                     "msgs_per_sec": 800.0, "latency_us": LAT,
                                     "latency_sent_us": {**LAT_SENT, "p50": 1.0}},
                        "probed": {"messages": 900, "duration_s": 0.9, "msgs_per_sec": 1000.0, "latency_us": LAT}}
    row = _measured(phased, 2000)
    assert row["lat_sent_us"]["p50"] == 1.0 and row["open_loop"]["achieved_share"] == pytest.approx(0.4)
    closed = {k: v for k, v in STATS.items() if k not in ("rate", "arrivals", "latency_sent_us", "open_loop")}
    row = _measured(closed, None)
    assert "open_loop" not in row and "lat_sent_us" not in row


def test_open_loop_figures_without_a_count_are_none():
    ol = stats.open_loop({"intended": 0, "behind": 0}, None, 100)
    assert ol["behind_share"] is None and ol["achieved_share"] is None and ol["schedule_late_us.p99"] is None


# --------------------------------------------------------------------------------------------- the rules


def open_row(rate, mps, p99=2_000.0, round=1, backend="selector", behind=0, loader_late=0, p50=1_500.0,
             syscalls=2.0, timeline: dict | None = None, waited=0) -> dict:
    """A round of an open-loop cell at `rate` asked and `mps` achieved (10 connections, 1 in flight); `waited`
    requests waited below the connection cap for a slot (connections as needed)."""
    intended = int(rate * 3)
    return {
        "backend": backend, "family": "selectors", "interpreter": "", "connections": 10, "pipeline": 1,
        "round": round, "rate": rate, "arrivals": "constant", "msize": 64, "work": "sleep:1000", "think": "none",
        "pinned": True, "status": "ok", "error": None, "messages": int(mps * 3), "duration_s": 3.0,
        "msgs_per_sec": mps, "connected": 10,
        "lat_us": {"p50": p50, "p90": p99 * 0.8, "p95": p99 * 0.9, "p99": p99, "p999": p99 * 1.2, "max": p99 * 1.5,
                   "mean": p50},
        "per_conn": {"min": 1, "p5": 1, "p50": 1, "p95": 1, "max": 1, "jain": 1.0, "active_share": 0.95, "idle": 0},
        "errors": {"connect": 0, "reset": 0, "timeout": 0, "mismatch": 0},
        "loader_cpu": {"user_s": 0.05, "sys_s": 0.05, "cpu_frac": 0.05},
        "cpu": {"user_s": 0.3, "sys_s": 0.3, "user_frac": 0.5, "busy_frac": 0.2},
        "syscalls_per_msg": {"sendto": syscalls / 2, "recvfrom": syscalls / 2}, "probes": ["counting"],
        "lat_sent_us": {"p50": p50, "p90": 1_900.0, "p95": 1_950.0, "p99": 2_000.0, "p999": 2_100.0, "max": 2_500.0,
                        "mean": p50},
        "open_loop": stats.open_loop(
            {"intended": intended, "sent": intended, "behind": behind,  # all sent in the window, `behind` late
             "behind_late_us": {"p50": 0.0, "p99": 0.0, "max": 0.0},
             "schedule_late_us": {"p50": 5.0, "p99": 30.0 if not loader_late else 4_000.0, "max": 5_000.0},
             "loader_late": loader_late, "loader_late_threshold_us": 1000.0, "queued_at_end": behind // 2,
             "in_flight_at_end": 10, "waited_slot": waited, "waited_connect": 0}, mps, rate,
            stats.timeline_rows(timeline)),
    }


def detect_rows(*rows: dict, **thresholds) -> list[dict]:
    return detect(pd.DataFrame([results.flatten(r) for r in rows]), thresholds=Thresholds(**thresholds))


def ids(found: list[dict], id: str) -> list[dict]:
    return [a for a in found if a["id"] == id]


def test_overloaded_fires_when_the_server_falls_behind_the_rate():
    found = detect_rows(open_row(500, 499.0), open_row(2000, 1000.0, p99=1_900_000.0, behind=2900))
    (a,) = ids(found, "overloaded")
    assert a["severity"] == "warning" and "2,000" in a["title"]
    ev = a["evidence"]
    assert ev["asked (requests/s)"] == 2000 and ev["achieved (msgs/s)"] == 1000 and ev["achieved share"] == "50%"
    assert ev["latency p99 from the intended send (µs)"] == 1_900_000
    assert ev["latency p99 from the actual send (µs)"] == 2000
    assert ev["requests behind (past the cap or unsent at the window's end)"] == "48%"
    assert "requests that waited in the loader for a connection" not in ev  # -c connections only: the behind ones
    assert "and 48% of the requests came due while" in a["explanation"]
    assert "intended send" in a["explanation"] and "1.9 s" in a["explanation"]
    assert "first slice" not in a["explanation"]  # no timeline: no claim about its growth


def test_overloaded_with_connections_as_needed_says_how_many_waited_below_the_cap():
    """The loader opened connections as needed and stopped below its cap (the server queueing): 55% of the requests
    waited for a connection, 2% were still unsent at the end. The sentence that says requests came due with every
    connection busy gives the 55% (the knee's lines say the same), the evidence both."""
    over = open_row(40_000, 37_000.0, p99=60_000.0, behind=2_400, waited=66_000)
    over["open_loop"].update({"max_connections": 1000, "conns_max": 30})
    (a,) = ids(detect_rows(over), "overloaded")
    ev = a["evidence"]
    assert ev["requests that waited in the loader for a connection"] == "57%"  # (66,000 + 2,400) / 120,000
    assert ev["requests behind (past the cap or unsent at the window's end)"] == "2%"
    assert ("and 57% of the requests came due while all 30 connections the loader had open (--max-connections "
            "1,000) had their 1 in flight, so they queued in the loader") in a["explanation"], a["explanation"]


def test_overloaded_quotes_the_latency_growing_through_the_window():
    over = open_row(2000, 1000.0, p99=1_900_000.0, behind=2900, timeline=_timeline([500_000.0, 1_000_000.0, 2e6]))
    (a,) = ids(detect_rows(over), "overloaded")
    ev = a["evidence"]
    assert ev["p99 in the window's first slice (µs)"] == 500_000 and ev["p99 in the window's last slice (µs)"] == 2e6
    assert "first 500 ms was 500 ms, in its last 2 s: 4.0× as long" in a["explanation"], a["explanation"]
    assert "latency_time" in rules.META["overloaded"].plots


def test_overloaded_fires_on_requests_behind_alone_and_is_silent_when_kept_up():
    (a,) = ids(detect_rows(open_row(1000, 995.0, behind=90)), "overloaded")  # 3% behind, rate achieved
    assert a["evidence"]["requests behind (past the cap or unsent at the window's end)"] == "3%"
    assert not ids(detect_rows(open_row(1000, 990.0, behind=10)), "overloaded")  # 99% and 0.3%: kept up
    assert ids(detect_rows(open_row(1000, 990.0), overload_shortfall=0.005), "overloaded")  # Thresholds decide


def test_requests_behind_with_flat_latency_are_the_connections_not_the_server():
    """At -c 10 a request waits for its connection when the one before it takes longer than 10/rate: with the
    rate achieved and the latency flat through the window that is the loader's limit, said as such; with the
    latency growing, or without a timeline to tell, it is overload as before."""
    flat = open_row(20_000, 20_000.0, p99=1_800.0, behind=1800, timeline=_timeline([3_000.0, 500.0, 450.0]))
    flat["open_loop"]["queued_at_end"] = 10  # 0.5 ms of the schedule: kept up to the end, as its last slice says
    found = detect_rows(flat)
    assert not ids(found, "overloaded")
    (a,) = ids(found, "connections_busy")
    assert a["severity"] == "info" and a["evidence"]["time between requests on one connection (µs)"] == 500
    assert "every 500 µs" in a["explanation"] and "never saw more than 10 requests at once" in a["explanation"]
    growing = open_row(20_000, 20_000.0, p99=90_000.0, behind=1800, timeline=_timeline([3_000.0, 40_000.0, 9e4]))
    found = detect_rows(growing)
    assert ids(found, "overloaded") and not ids(found, "connections_busy")
    unknown = open_row(20_000, 20_000.0, p99=1_800.0, behind=1800)  # no timeline
    assert ids(detect_rows(unknown), "overloaded")
    # Connections opened as needed up to a cap of 40: the cap, not -c, was the limit, and the advice says so.
    capped = open_row(20_000, 20_000.0, p99=1_800.0, behind=1800, timeline=_timeline([3_000.0, 500.0, 450.0]))
    capped["open_loop"] |= {"max_connections": 40, "conns_max": 40, "queued_at_end": 10}
    (a,) = ids(detect_rows(capped), "connections_busy")
    assert "all 40 connections the loader had open (--max-connections 40) had their 1 in flight" in a["explanation"]
    assert "never saw more than 40 requests at once: a higher --max-connections" in a["explanation"], a["explanation"]
    assert a["evidence"]["time between requests on one connection (µs)"] == 2000
    # Below the cap (22 of 1,000 open): the loader could have opened more and did not (the server queueing); its
    # "behind" are requests unsent at the end. Not the loader's connections (a knee's rate once said so).
    below = open_row(20_000, 20_000.0, p99=1_800.0, behind=1800, timeline=_timeline([3_000.0, 500.0, 450.0]))
    below["open_loop"] |= {"max_connections": 1000, "conns_max": 22, "queued_at_end": 10}
    assert not ids(detect_rows(below), "connections_busy")
    short = open_row(20_000, 15_000.0, behind=1800, timeline=_timeline([500.0, 450.0]))  # 75%: overloaded
    found = detect_rows(short)
    assert ids(found, "overloaded") and not ids(found, "connections_busy")


def test_a_backlog_at_the_windows_end_longer_than_a_pause_is_overload():
    """A queue formed before the window (in the warm-up) need not grow 2× through it: a knee try at 32,146/s kept
    98.6% of the rate with p99 30 → 40 ms slice to slice (1.34×) and 1,248 requests still queued in the loader at
    the window's end, 39 ms of its schedule. More than this host stops a busy CPU (13.5 ms at most): overload. A
    backlog of a pause's length is not."""
    row = open_row(32_000, 31_700.0, p99=40_000.0, behind=100, timeline=_timeline([30_000.0, 35_000.0, 40_000.0]))
    row["open_loop"]["queued_at_end"] = 1248
    (a,) = ids(detect_rows(row), "overloaded")
    assert ("At the window's end 1,248 requests were still queued in the loader, 39 ms of this rate's schedule"
            in a["explanation"]), a["explanation"]
    assert a["evidence"]["backlog in the loader at the window's end, as schedule time (µs)"] == 39_000
    row["open_loop"]["queued_at_end"] = 160  # 5 ms: a pause's worth
    assert not ids(detect_rows(row), "overloaded")


def test_loader_late_names_its_threshold_and_count():
    (a,) = ids(detect_rows(open_row(1000, 1000.0, loader_late=12)), "loader_late")
    assert a["severity"] == "warning"  # its p99 lateness (4 ms) is past the threshold
    ev = a["evidence"]
    assert ev["lateness threshold (µs)"] == 1000.0 and ev["requests the loader sent late"] == 12
    assert ev["schedule lateness p99 (µs)"] == 4000.0
    assert "the load generator itself fell behind" in a["explanation"] and "1 ms" in a["explanation"]
    # this host's lateness beside the reference host's timer cost, with its source
    assert "on this host this cell's sends came 5 µs after" in a["explanation"], a["explanation"]
    assert "timer due in 20 µs costs 11.1 µs" in a["explanation"] and "bench/timer_cost.py" in a["explanation"]
    assert not ids(detect_rows(open_row(1000, 1000.0)), "loader_late")
    # A few late sends, the p99 well inside the threshold (a loader disturbed on a busy host): an info.
    row = open_row(500, 500.0)
    row["open_loop"] |= {"loader_late": 9, "schedule_late_us.p99": 314.0}
    (a,) = ids(detect_rows(row), "loader_late")
    assert a["severity"] == "info" and a["evidence"]["share of the requests sent"] == "0.6%"
    assert a["title"].startswith("The loader fell behind its schedule, briefly: ")
    # 9 late sends at 500/s are 18 ms of its schedule, set beside the reference host's pauses of a busy CPU
    assert a["evidence"]["late sends as schedule time (µs)"] == 18_000
    assert "9 late sends are 18 ms of this rate's schedule" in a["explanation"], a["explanation"]
    assert "bench/cpu_pauses.py" in a["explanation"]
    (a,) = ids(detect_rows(row, loader_late_warning_share=0.001), "loader_late")
    assert a["severity"] == "warning" and "briefly" not in a["title"]
    # Few and brief at several rates: one card, told by the rate with the most late sends, the others listed;
    # a rate where it was serious keeps its own card.
    rows = []
    for rate, late in ((500, 9), (600, 12), (700, 10)):  # under 1% of the sends each
        rows.append(open_row(rate, float(rate)))
        rows[-1]["open_loop"] |= {"loader_late": late, "schedule_late_us.p99": 314.0}
    rows.append(open_row(1000, 1000.0, loader_late=12))
    found = ids(detect_rows(*rows), "loader_late")
    assert sorted(a["severity"] for a in found) == ["info", "warning"], found
    (brief,) = [a for a in found if a["severity"] == "info"]
    assert brief["rate"] == 600 and brief["title"].endswith("(also at 500/s, 700/s)"), brief["title"]


def test_latency_knee_says_between_which_rates_and_what_moved():
    rows = [open_row(500, 500.0, p99=2_500.0), open_row(800, 799.0, p99=4_000.0),
            open_row(1000, 960.0, p99=30_000.0, syscalls=4.0), open_row(2000, 1000.0, p99=1_900_000.0)]
    (a,) = ids(detect_rows(*rows), "latency_knee")
    assert "between 800/s and 1,000/s" in a["title"]
    assert "12×" in a["explanation"] and "30 ms" in a["explanation"]
    assert "syscalls per message rose from 2.00 to 4.00" in a["explanation"]
    assert any(k.startswith("syscalls per message at 500/s") for k in a["evidence"])
    assert "io_uring" not in a["explanation"]


def test_latency_knee_says_how_the_work_handed_to_io_uring_moved():
    """uvloop hands epoll_ctl to io_uring (kernel work no syscall count shows): as the loop batches past the knee
    its ring operations per message move too, and the finding says so beside the syscalls."""
    def ring(rate, mps, p99, ops):
        return open_row(rate, mps, p99=p99) | {"ring_per_msg": {"epoll_ctl": ops}}

    (a,) = ids(detect_rows(ring(500, 500.0, 2_500.0, 1.0), ring(1000, 960.0, 30_000.0, 0.4)), "latency_knee")
    assert "io_uring operations per message fell from 1.00 to 0.4;" in a["explanation"], a["explanation"]


def test_latency_knee_says_how_much_of_the_tail_was_the_socket_queue():
    """With --sockwait, each rate's socket-queue wait p99 against its p99 from the send; with --breakdown,
    queue_wait's share of the slowest 1% (their composition, which it prefers)."""
    rows = [open_row(500, 500.0, p99=2_500.0), open_row(1000, 960.0, p99=30_000.0)]
    rows[0]["lat_sent_us"]["p99"], rows[1]["lat_sent_us"]["p99"] = 2_500.0, 30_000.0
    rows[0]["sockwait"], rows[1]["sockwait"] = {"wait_p99_us": 250.0}, {"wait_p99_us": 24_000.0}
    (a,) = ids(detect_rows(*rows), "latency_knee")
    assert a["evidence"]["at 500/s: the socket queue's share"].startswith("10% socket-queue wait p99"), a["evidence"]
    assert a["evidence"]["at 1,000/s: the socket queue's share"].startswith("80% ")
    assert "went from 10% at 500/s to 80% at 1,000/s" in a["explanation"] and "wait unread" in a["explanation"]
    for r, q in zip(rows, (100.0, 300.0)):  # the breakdown's tail composition wins: 100 of 1000, 300 of 1000
        r["breakdown"] = {"tail_us": {"queue_wait": q, "on_cpu": 1000.0 - q - 100.0, "transit": 100.0}}
    (a,) = ids(detect_rows(*rows), "latency_knee")
    assert a["evidence"]["at 1,000/s: the socket queue's share"] == "30% of the slowest 1%'s time (--breakdown)"
    assert "most of their time is not the socket queue" in a["explanation"]
    (a,) = ids(detect_rows(open_row(500, 500.0, p99=2_500.0), open_row(1000, 960.0, p99=30_000.0)), "latency_knee")
    assert not any("socket queue" in k for k in a["evidence"]) and "socket queue" not in a["explanation"]


def test_latency_knee_names_the_resource_that_ran_out():
    """Issue 51: the finding names what reached its limit at the knee, from the figures at the rates tried:
    the loader's CPU before anything else, then the server's CPU, the run queue, the loop's idle time."""
    def knee(**at) -> dict:
        base, top = open_row(500, 500.0, p99=2_500.0), open_row(1000, 960.0, p99=30_000.0)
        for r, part in ((base, at.pop("base", {})), (top, at)):
            for k, v in part.items():
                r[k] = {**r[k], **v} if isinstance(v, dict) and isinstance(r.get(k), dict) else v
        (a,) = ids(detect_rows(base, top), "latency_knee")
        return a

    a = knee(cpu={"busy_frac": 0.97}, base={"cpu": {"busy_frac": 0.45}})
    assert a["evidence"]["what ran out first"] == "the server's CPU"
    assert "What ran out first at the knee: the server's CPU: busy 97% of one CPU at 1,000/s, against 45% at 500/s" \
        in a["explanation"], a["explanation"]
    a = knee(cpu={"busy_frac": 0.97}, loader_cpu={"cpu_frac": 0.95})
    assert a["evidence"]["what ran out first"] == "the loader's CPU" and "give it more CPUs" in a["explanation"]
    a = knee(cpu={"busy_frac": 0.6}, breakdown={"tail_us": {"runqueue": 600.0, "on_cpu": 300.0, "transit": 100.0}})
    assert a["evidence"]["what ran out first"] == "the run queue" and "60% of their time ready" in a["explanation"]
    # without the breakdown, the server's threads' schedstat (row `sched`): a pool of 8 threads on 2 CPUs, 2.6 waiting
    a = knee(cpu={"busy_frac": 0.6}, sched={"runq_mean": 2.6, "threads": 8, "threads_exited": 0},
             base={"sched": {"runq_mean": 0.1, "threads": 8, "threads_exited": 0}})
    assert a["evidence"]["what ran out first"] == "the run queue"
    assert ("the run queue: on average 2.6 of the server's 8 threads were ready to run with no CPU for them at "
            "1,000/s (/proc schedstat), against 0.1 at 500/s") in a["explanation"], a["explanation"]
    a = knee(cpu={"busy_frac": 0.6}, sched={"runq_mean": 0.3, "threads": 1, "threads_exited": 0})
    assert "what ran out first" not in a["evidence"]
    a = knee(cpu={"busy_frac": 0.8}, syscalls_per_msg={"sendto": 1.0, "recvfrom": 1.0, "epoll_wait": 0.1},
             base={"syscalls_per_msg": {"sendto": 1.0, "recvfrom": 1.0, "epoll_wait": 1.0}})
    assert a["evidence"]["what ran out first"] == "the loop's idle time"
    assert "waits per message fell from 1.00 to 0.1 " in a["explanation"], a["explanation"]
    # no idle turn left, yet the CPU mostly idle (a handler that sleeps 1 ms, 2026-12-04: busy 6%): the turns blocked,
    # in the blocking call the counts name; without one, where to look
    slept = {"sendto": 1.0, "recvfrom": 1.0, "clock_nanosleep": 1.0}
    a = knee(cpu={"busy_frac": 0.06}, syscalls_per_msg=slept | {"epoll_wait": 0.03},
             base={"syscalls_per_msg": slept | {"epoll_wait": 1.0}})
    assert a["evidence"]["what ran out first"] == "the loop's time, blocked off the CPU", a["evidence"]
    assert ("yet the server was busy only 6% of one CPU at 1,000/s: its turns went waiting off the CPU, in "
            "clock_nanosleep (1.00 per message). A call that blocks holds the whole loop") in a["explanation"], \
        a["explanation"]
    a = knee(cpu={"busy_frac": 0.06}, syscalls_per_msg={"sendto": 1.0, "epoll_wait": 0.03},
             base={"syscalls_per_msg": {"sendto": 1.0, "epoll_wait": 1.0}})
    assert "off the CPU, in a call its syscall counts do not name (--breakdown" in a["explanation"], a["explanation"]
    a = knee()  # 20% busy, nothing else: said so, with where to look
    assert "what ran out first" not in a["evidence"] and "No resource netprof measures" in a["explanation"]
    # near the limit at the rate that bent and at it one rate up: a queue's tail grows before the CPU is wholly busy
    base, top, up = (open_row(500, 500.0, p99=2_500.0), open_row(1000, 960.0, p99=30_000.0),
                     open_row(1500, 1300.0, p99=90_000.0))
    for r, busy in ((base, 0.45), (top, 0.85), (up, 0.97)):
        r["cpu"] = r["cpu"] | {"busy_frac": busy}
    (a,) = ids(detect_rows(base, top, up), "latency_knee")
    assert "between 500/s and 1,000/s" in a["title"] and a["evidence"]["what ran out first"] == "the server's CPU"
    assert ("What ran out first at the knee: the server's CPU, near its limit: busy 85% of one CPU at 1,000/s and 97% "
            "at 1,500/s, against 45% at 500/s") in a["explanation"], a["explanation"]
    up["cpu"]["busy_frac"] = 0.88  # not at it above either: nothing named
    (a,) = ids(detect_rows(base, top, up), "latency_knee")
    assert "what ran out first" not in a["evidence"], a["evidence"]


def test_latency_knee_bends_where_the_queue_moved_into_the_loader():
    """Issue 51: with connections as needed the loader opens none while the server queues (its round trip over
    twice its unqueued one), so past the knee the requests wait in the loader and the rate is still achieved (the
    default knee of uvicorn_httptools on a fresh clone, 2026-12-02: achieved 0.99-1.04, p99 19.9-94.6 ms against
    1.9 ms, 44-100% of the requests waited for a connection). The bend is there, with the waited share as
    evidence, and the resource behind it named as before."""
    base, mid = open_row(20_000, 20_000.0, p99=1_900.0), open_row(30_000, 30_100.0, p99=2_400.0, waited=900)
    top = open_row(40_000, 40_200.0, p99=19_900.0, waited=66_000)  # 55% of the 120,000 due waited
    top["lat_sent_us"]["p99"] = 4_100.0
    base["cpu"], top["cpu"] = base["cpu"] | {"busy_frac": 0.5}, top["cpu"] | {"busy_frac": 0.98}
    (a,) = ids(detect_rows(base, mid, top), "latency_knee")
    assert "between 30,000/s and 40,000/s" in a["title"], a["title"]
    assert "They queued in the loader: 55% of the requests at 40,000/s came due with every connection busy" \
        in a["explanation"] and "the p99 is 4.1 ms" in a["explanation"], a["explanation"]
    assert a["evidence"]["at 40,000/s: waited in the loader for a connection, p99 from the actual send"] == \
        "55%, 4.1 ms", a["evidence"]
    assert a["evidence"]["what ran out first"] == "the server's CPU"
    # a few waits for a slot (a burst) with a p99 well up is not yet the bend (under 5 points more than the lowest)
    assert not ids(detect_rows(base, open_row(40_000, 40_200.0, p99=19_900.0, waited=4_000)), "latency_knee")


def test_in_a_knee_run_the_bend_is_the_knees_verdict_from_the_tries_that_decided_it(tmp_path):
    """`netprof knee` tries a rate until a cell passes: a rate's mean over its tries mixes a failed try with the
    passing one, and the rule read on those means bent below the knee's verdict (2026-12-02: at 36,590/s on means,
    the knee 41,444/s). In a knee run (knee.json beside the rows) the bend is the verdict's, from the tries that
    decided each rate; none where the verdict found no bend of the server's."""
    rows = [open_row(500, 500.0, p99=2_000.0, round=1),
            open_row(1000, 900.0, p99=90_000.0, round=2), open_row(1000, 1000.0, p99=3_000.0, round=3),
            open_row(1500, 1350.0, p99=60_000.0, round=4), open_row(1500, 1350.0, p99=80_000.0, round=5)]
    df = pd.DataFrame([results.flatten(r) for r in rows])
    (a,) = ids(detect(df), "latency_knee")  # the rule on each rate's mean: 1,000/s's p99 46.5 ms
    assert "between 500/s and 1,000/s" in a["title"], a["title"]
    doc = {"slo": {"text": "p99<5ms"}, "knee": 1000, "bounds": [1000, 1500], "stop": "steps",
           "probes": [{"rate": 500, "met": True, "attempts": [{"round": 1}]},
                      {"rate": 1000, "met": True, "attempts": [{"round": 2}, {"round": 3}]},
                      {"rate": 1500, "met": False, "attempts": [{"round": 4}, {"round": 5}]}]}
    (tmp_path / results.KNEE_JSON).write_text(json.dumps(doc))
    (a,) = ids(detect(df, out_dir=tmp_path), "latency_knee")
    assert "between 1,000/s and 1,500/s" in a["title"], a["title"]
    assert "This is netprof knee's verdict against p99<5ms" in a["explanation"], a["explanation"]
    # each rate as the verdict read it: 1,000/s its try that passed, 1,500/s the mean of its tries (each failed)
    assert "At 1,500/s the p99 from the intended send is 70 ms" in a["explanation"], a["explanation"]
    assert a["evidence"]["at 1,000/s: achieved, p99 from the intended send"] == "1k/s (100%), 3 ms", a["evidence"]
    # no bend of the server's to explain: the loader or the host ran out, no rate passed
    for stop in ({"stop": "loader"}, {"stop": "host"}, {"knee": None}):
        (tmp_path / results.KNEE_JSON).write_text(json.dumps(doc | stop))
        assert not ids(detect(df, out_dir=tmp_path), "latency_knee"), stop
    # every rate up to the closed-loop ceiling passed (the fast hour of 2026-12-02: uvicorn_httptools's knee 99% of
    # its ceiling): the bend is the ceiling, and what ran out is read in its best closed-loop cell (rate 0)
    (tmp_path / results.KNEE_JSON).write_text(json.dumps(doc | {"knee": 1500, "bounds": [1500, 1600]}))
    assert not ids(detect(df, out_dir=tmp_path), "latency_knee")  # no ceiling cell: nothing to read it in
    closed = {k: v for k, v in open_row(1500, 1600.0).items() if k not in ("rate", "open_loop", "lat_sent_us")}
    cells = [closed | {"rate": 0, "round": 6, "msgs_per_sec": 1550.0, "cpu": closed["cpu"] | {"busy_frac": 0.8}},
             closed | {"rate": 0, "round": 7, "msgs_per_sec": 1600.0, "cpu": closed["cpu"] | {"busy_frac": 0.97}}]
    both = pd.concat([df, pd.DataFrame([results.flatten(r) for r in cells])], ignore_index=True)
    (a,) = ids(detect(both, out_dir=tmp_path), "latency_knee")
    assert a["title"] == "Latency knee at the closed-loop ceiling, 1.6k/s: selector", a["title"]
    assert "did not bend below the server's closed-loop ceiling. Every rate tried up to 1,500/s met" in \
        a["explanation"] and "1,500/s is 94% of the 1.6k/s it answers flat out" in a["explanation"], a["explanation"]
    assert a["evidence"]["what ran out first"] == "the server's CPU"
    assert "busy 97% of one CPU in the closed-loop ceiling's cell (1.6k/s), against 20% at 500/s" in \
        a["explanation"], a["explanation"]


def test_in_a_knee_run_the_cards_of_a_rate_that_passed_are_its_passing_trys(tmp_path):
    """The tables average a rate's tries as rounds of one cell; a rate the knee passed on its second try, after an
    overloaded first, read on that mean "could not keep up" (2026-12-04, at 102% of the rate achieved). In a knee
    run the per-cell open-loop cards (overloaded, connections_busy, loader_late) of a rate that passed are its
    passing try's; of a rate that failed, the mean of its tries (each of them failed); each says which."""
    rows = [open_row(500, 500.0, round=1),
            open_row(1000, 700.0, p99=90_000.0, behind=900, round=2), open_row(1000, 1000.0, round=3),
            open_row(1500, 1100.0, p99=60_000.0, behind=1000, round=4),
            open_row(1500, 1000.0, p99=80_000.0, behind=1300, round=5)]
    df = pd.DataFrame([results.flatten(r) for r in rows])
    # on the means, 1,000/s answered 85% of it: overloaded
    assert sorted(a["title"].split(" (")[0] for a in ids(detect(df), "overloaded")) == [
        "Overloaded, 1.05k/s answered: selector at 10 connections, at 1,500/s",
        "Overloaded, 850/s answered: selector at 10 connections, at 1,000/s"]
    doc = {"slo": {"text": "p99<5ms"}, "knee": 1000, "bounds": [1000, 1500], "stop": "steps",
           "probes": [{"rate": 500, "met": True, "attempts": [{"round": 1}]},
                      {"rate": 1000, "met": True, "attempts": [{"round": 2}, {"round": 3}]},
                      {"rate": 1500, "met": False, "attempts": [{"round": 4}, {"round": 5}]}]}
    (tmp_path / results.KNEE_JSON).write_text(json.dumps(doc))
    (a,) = ids(detect(df, out_dir=tmp_path), "overloaded")  # the try that passed 1,000/s: no card for it
    assert a["title"].startswith("Overloaded, 1.05k/s answered: selector at 10 connections, at 1,500/s"), a["title"]
    assert a["evidence"]["the knee's tries these figures are from (rounds)"] == "4, 5 (each failed)", a["evidence"]
    # a knee.json whose probes kept no attempts (written before them): the cells over their rounds, as before
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / results.KNEE_JSON).write_text(json.dumps(
        doc | {"probes": [{k: v for k, v in p.items() if k != "attempts"} for p in doc["probes"]]}))
    assert len(ids(detect(df, out_dir=tmp_path / "old"), "overloaded")) == 2
    # connections opened as needed: the most open at once is the most of any try, not their mean (no try had 24)
    for r, most in zip(rows[3:], (10, 38)):
        r["open_loop"] |= {"max_connections": 1000, "conns_max": most}
    (a,) = ids(detect(pd.DataFrame([results.flatten(r) for r in rows]), out_dir=tmp_path), "overloaded")
    assert "while all 38 connections the loader had open (--max-connections 1,000)" in a["explanation"], \
        a["explanation"]
    # the late sends of a rate that passed: its passing try's, not the mean's
    late = [open_row(1000, 1000.0, round=2, loader_late=200), open_row(1000, 1000.0, round=3)]
    df = pd.DataFrame([results.flatten(r) for r in late])
    assert ids(detect(df), "loader_late")
    assert not ids(detect(df, out_dir=tmp_path), "loader_late")
    late = [open_row(1000, 1000.0, round=2), open_row(1000, 1000.0, round=3, loader_late=200)]
    (a,) = ids(detect(pd.DataFrame([results.flatten(r) for r in late]), out_dir=tmp_path), "loader_late")
    assert a["evidence"]["the knee's tries these figures are from (rounds)"] == "3 (the one that passed)"


def test_latency_knee_silent_without_a_drop_in_share_or_with_one_rate():
    # p99 grows 10× but every rate is achieved: no knee yet
    rows = [open_row(500, 500.0, p99=2_000.0), open_row(1000, 1000.0, p99=20_000.0)]
    assert not ids(detect_rows(*rows), "latency_knee")
    assert not ids(detect_rows(open_row(2000, 1000.0, p99=1e6)), "latency_knee")
    # two backends at two rates each: judged per backend, only the one that bends has a knee
    rows = [open_row(500, 500.0), open_row(2000, 1000.0, p99=1e6),
            open_row(500, 500.0, backend="uvloop"), open_row(2000, 2000.0, backend="uvloop")]
    found = ids(detect_rows(*rows), "latency_knee")
    assert [a["backend"] for a in found] == ["selector"]


def test_closed_loop_rows_fire_no_open_loop_rule():
    row = open_row(1000, 10.0, loader_late=5)
    closed = {k: v for k, v in row.items() if k not in ("rate", "open_loop", "lat_sent_us", "arrivals")}
    found = detect_rows(closed, closed | {"connections": 100})
    assert not [a for a in found if a["id"] in ("overloaded", "loader_late", "latency_knee")]


# --------------------------------------------------------------------------------------------- the plot


def test_latency_against_load_is_drawn_with_two_rates_only():
    from netprof.profiler.report import plots

    two = stats.aggregate(pd.DataFrame([results.flatten(r) for r in
                                        (open_row(500, 500.0), open_row(2000, 1000.0, p99=1e6))]))
    svg = plots.draw("latency_load", two, None)
    assert svg is not None and b"Latency against load" in svg
    one = stats.aggregate(pd.DataFrame([results.flatten(open_row(500, 500.0))]))
    assert plots.draw("latency_load", one, None) is None
    closed = one.drop(columns=["rate"])
    assert plots.draw("latency_load", closed, None) is None


def test_latency_against_load_labels_rates_apart_and_a_knees_crowd_on_a_linear_axis():
    """A knee's rates crowd near it (20,752 ... 38,910, 39,558, 40,207/s): on a log axis with a label at each,
    three ran together ("36.3k38.9k40.2k"). Rates within a factor of LOG_RATES get a linear axis, and a rate whose
    label would touch the one labelled before it goes unlabelled (its point stays); the highest is always labelled."""
    import math

    from netprof.profiler.report import plots

    knee = [20_752.0, 31_128.0, 36_316.0, 38_910.0, 39_558.0, 40_207.0]
    assert plots._spaced(knee, float) == [20_752.0, 31_128.0, 36_316.0, 40_207.0]
    sweep = [5e3, 1e4, 1.5e4, 2e4, 2.5e4, 3e4, 4e4]  # bench/reports/knee: every one apart enough on a log axis
    assert plots._spaced(sweep, math.log) == sweep and plots._spaced([1e3, 1.01e3, 1e4], math.log) == [1e3, 1e4]
    assert plots._spaced([500.0, 2000.0], math.log) == [500.0, 2000.0]
    cells = stats.aggregate(pd.DataFrame([results.flatten(open_row(r, r)) for r in knee]))
    svg = plots.draw("latency_load", cells, None)
    assert b"messages / s asked (open loop)" in svg and b"36.3k" in svg and b"38.9k" not in svg


# --------------------------------------------------------------------------------------------- the report


def test_report_of_an_open_loop_run(tmp_path, monkeypatch):
    """A results directory of two rates × two backends: the report labels cells by rate, draws latency
    against load, and finds the overload and the knee."""
    from netprof.profiler.core import cache
    from netprof.profiler.report import report

    monkeypatch.setattr(cache, "ROOT", str(tmp_path / "cache"))  # not the real /var/cache/netprof
    store = results.ResultsStore(tmp_path / "run")
    store.write_meta({"config": {"backends": ["selector", "uvloop"], "arrivals": "constant"}})
    for rnd in (1, 2):
        for backend, top in (("selector", 1000.0), ("uvloop", 5000.0)):
            for rate in (500, 2000):
                mps = min(rate, top) * (1 - 0.002 * rnd)
                p99 = 2_000.0 if rate <= top else 1.5e6
                row = open_row(rate, mps, p99=p99, round=rnd, backend=backend, behind=0 if rate <= top else 2900)
                store.add(row, [int(mps * 0.3)] * 10,
                          timeline=stats.timeline_rows(_timeline([p99 / 3, p99 / 2, p99] if rate > top else [p99] * 3)))
    report.finish(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / results.SUMMARY_JSON).read_text())
    assert {c["rate"] for c in summary["cells"]} == {500, 2000}
    assert [(a["backend"], a["evidence"]["asked (requests/s)"]) for a in summary["anomalies"]
            if a["id"] == "overloaded"] == [("selector", 2000)]
    assert [a["backend"] for a in summary["anomalies"] if a["id"] == "latency_knee"] == ["selector"]
    assert any(p.endswith("plots/latency_load.svg") for p in summary["artifacts"]["plots"])
    time_svg = (tmp_path / "run" / "plots" / "latency_time.svg").read_bytes()  # one line per cell, both rates
    assert b"Latency through the window" in time_svg and b"uvloop (at 2,000/s)" in time_svg
    md = (tmp_path / "run" / "report.md").read_text()
    assert "at 2,000/s" in md and "Latency against load" in md and "plots/latency_time.svg" in md


def test_a_closed_loop_cell_beside_open_loop_ones_says_closed_loop():
    """A knee's ceiling cells (closed loop) beside its rates: their findings say 'closed loop', or they would read
    as any cell ('Noisy measurement: uvicorn_httptools at 10 connections'); alone, a closed-loop cell says nothing
    of it. An open-loop cell named in the same text keeps its rate."""
    closed = {k: v for k, v in open_row(0, 900.0).items() if k not in ("rate", "open_loop", "lat_sent_us")}
    noisy = [closed | {"rate": 0, "round": n, "msgs_per_sec": mps} for n, mps in ((1, 900.0), (2, 1400.0))]
    (a,) = ids(detect_rows(*noisy), "noisy")
    assert "selector at 10 connections (" in a["title"] and "closed loop" not in a["title"], a["title"]
    (a,) = ids(detect_rows(*noisy, open_row(500, 500.0, round=3)), "noisy")
    assert "selector at 10 connections, closed loop (" in a["title"], a["title"]
    assert "selector at 10 connections, closed loop (" in a["explanation"], a["explanation"]
    from netprof.profiler.kit.rule_registry import Anomaly, say_closed_loop
    http = closed | {"framing": "own", "protocol": "http"}  # no framing words: one phrase begins the other's
    a = Anomaly.at(http, "noisy", "info", "t: selector at 10 connections",
                   "selector at 10 connections, against selector at 10 connections, at 500/s", {})
    say_closed_loop([a], stats.aggregate(pd.DataFrame([results.flatten(r) for r in (
        http | {"round": 1}, open_row(500, 500.0, round=2) | {"framing": "own", "protocol": "http"})])))
    assert a.title == "t: selector at 10 connections, closed loop", a.title
    assert a.explanation == ("selector at 10 connections, closed loop, against selector at 10 connections, at "
                             "500/s"), a.explanation
