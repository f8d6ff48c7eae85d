"""`netprof compare` on real short runs made here (selector, asyncio_sock), plus the statistics and
the --fail-if parser on constructed rows (no processes)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from test_anomalies import make_row

from helpers import run_netprof
from netprof.profiler.analysis import compare, fail_if
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import metrics, results, schema, stats
from netprof.profiler.report import compare_report

SHORT = ("-d", "0.3", "--warmup", "0.1", "--no-report", "--wait")  # --wait: queue behind another run
NO_CHANGE = "no significant change"


def _run(root, name: str, *args: str, rounds: int = 3):
    out = root / name
    r = run_netprof("run", *args, "-r", str(rounds), *SHORT, "--out", str(out), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("compare")


@pytest.fixture(scope="module")
def twice(root) -> dict:
    """The same run twice, 3 rounds each, as the odd and the even rounds of one 6-round run (copies whose
    results.parquet keeps only those rows): the rounds alternate, so the host's speed regimes (docs/facts.md)
    fall on both alike. Two runs made one after the other differ by up to 25% on this host (issue 33; here both
    cells once came out "slower"): that is `netprof ab`'s question, not what this comparison's test is about."""
    whole = _run(root, "whole", "selector", "-c", "10,100", "--no-probes", rounds=6)
    halves = {}
    for name, odd in (("base", 1), ("again", 0)):
        dest = root / name
        shutil.copytree(whole, dest)
        df = pd.read_parquet(dest / results.RESULTS_PARQUET)
        df[df["round"] % 2 == odd].to_parquet(dest / results.RESULTS_PARQUET, index=False)
        halves[name] = dest
    return {**halves, "whole": whole}


@pytest.fixture(scope="module")
def whole(twice):
    """All six rounds: the base a slower run is compared with. With three a side, one round the host stole from
    leaves the comparison no verdict (fresh clone, 2026-12-02: 11.8k msgs/s at 39% steal among 40-79k/s, against
    spin:200's 3.2k/s: p 0.17); six rounds hold one such round."""
    return twice["whole"]


@pytest.fixture(scope="module")
def base(twice):
    return twice["base"]


@pytest.fixture(scope="module")
def again(twice):
    return twice["again"]


@pytest.fixture(scope="module")
def spin(root):
    # 200 µs of CPU per message caps the backend near 5k msgs/s: slower than any plain selector run,
    # also on a loaded 2-core machine (with spin:20 the change can drown in the noise there).
    return _run(root, "spin", "selector", "-c", "10", "--work", "spin:200", "--no-probes")


@pytest.fixture(scope="module")
def framing(message_run, root):
    """The shared message_run (counting probes: the why names the syscall that changed) as two runs,
    one per framing: copies whose results.parquet keeps only that framing's rows."""
    halves = {}
    for f in ("message", "stream"):
        dest = root / f"framing-{f}"
        shutil.copytree(message_run[0], dest)
        df = pd.read_parquet(dest / results.RESULTS_PARQUET)
        df[df["framing"] == f].to_parquet(dest / results.RESULTS_PARQUET, index=False)
        halves[f] = dest
    return halves


def _cells(doc: dict, i: int = 0) -> dict:
    return {c["label"]: c for c in doc["comparisons"][i]["cells"]}


# ---------------------------------------------------------------------------------------------
# Real runs

def test_same_backend_twice_is_no_significant_change(base, again):
    doc = compare.compare([base, again])
    comp = doc["comparisons"][0]
    assert set(schema.CELL_KEYS) <= set(comp["matched_on"]) and comp["compared_across"] == {}
    assert comp["unmatched"] == {"base_only": [], "new_only": []}
    verdicts = [c["metrics"]["msgs_per_sec"]["verdict"] for c in comp["cells"]]
    assert len(verdicts) == 2
    # A noisy 2-core machine: most cells, not necessarily every one.
    assert verdicts.count(NO_CHANGE) >= 1, verdicts
    for c in comp["cells"]:
        m = c["metrics"]["msgs_per_sec"]
        assert m["n_base"] == m["n_new"] == 3, m
        # Fieller's interval is unbounded (null) when BASE's mean is not clearly away from 0: three 0.3-s rounds
        # of selector c=100 at 90k, 24k and 37k msgs/s on a busy hour made it so
        lo, hi = m["ratio_lo"], m["ratio_hi"]
        assert (lo is None and hi is None and not m["significant"]) or lo <= m["ratio"] <= hi, m


def test_work_spin_is_slower_and_the_cpu_delta_is_named(whole, spin, tmp_path):
    doc = compare.compare([whole, spin], out=tmp_path / "cmp")
    comp = doc["comparisons"][0]
    assert comp["compared_across"] == {"work": ["none", "spin:200"]}
    assert comp["unmatched"]["base_only"] == ["selector c=100"] and comp["unmatched"]["new_only"] == []
    cell = _cells(doc)["selector c=10"]
    assert cell["verdict"] == "slower"
    user = cell["metrics"]["cpu_us_per_msg.user"]
    assert user["verdict"] == "higher" and user["delta"] > 50  # spin is wall time: less CPU when preempted
    assert cell["why"].startswith("selector c=10: −") and "user CPU per message +" in cell["why"]
    compare_report.render(doc, tmp_path / "cmp")  # the pages, as `netprof compare --out` writes them
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| selector c=10 |" in md and "slower" in md and "Welch" in md and "only in BASE: selector c=100" in md
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "<table>" in page and "Fieller" in page
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["schema"] == compare.SCHEMA


def test_framing_message_vs_stream_reports_the_fairness_change(bpf, framing):
    doc = compare.compare([framing["message"], framing["stream"]])
    comp = doc["comparisons"][0]
    assert comp["compared_across"] == {"framing": ["message", "stream"]}
    assert len(comp["cells"]) == 2  # asyncio_sock and uvloop_sock
    (cell,) = [c for c in comp["cells"] if c["label"].startswith("asyncio_sock")]
    jain = cell["metrics"]["per_conn.jain"]
    # Stream framing is fairer in every run (its mean Jain above message framing's); whether five rounds a side
    # make that significant is the hour's (stream framing lets one connection keep the loop in some rounds of a
    # busy hour: Jain 0.83-0.86 among rounds of 0.999, p 0.24 over three rounds once). Significant: said as
    # better and named in the why; else no verdict at all, never "lower".
    assert jain["n_base"] == jain["n_new"] == 5 and jain["mean_new"] > jain["mean_base"], jain
    if jain["significant"]:
        assert jain["verdict"] == "higher" and jain["better"] is True and "Jain index" in cell["why"], (jain, cell)
    else:
        assert jain["verdict"] == NO_CHANGE and "Jain index" not in cell["why"], (jain, cell)
    # one 64 KiB read drains the 8 queued messages: fewer recvfrom per message, named in the why
    assert "recvfrom per message" in cell["why"], cell["why"]


def test_fail_if_exit_codes(whole, spin):
    worse = run_netprof("compare", str(whole), str(spin), "--fail-if", "slower:5%,p99:+10%", timeout=60)
    assert worse.returncode == 1, worse.stderr
    assert "FAIL slower:5%" in worse.stdout
    better = run_netprof("compare", str(spin), str(whole), "--fail-if", "slower:5%", "--json", timeout=60)
    assert better.returncode == 0, better.stderr
    doc = json.loads(better.stdout)  # --json: only JSON on stdout
    assert doc["fail_if"]["breaches"] == [] and _cells(doc)["selector c=10"]["verdict"] == "faster"


def test_a_directory_that_is_not_a_run_is_one_line_exit_2(base, tmp_path):
    r = run_netprof("compare", str(tmp_path), str(base), timeout=60)
    assert r.returncode == 2
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "not a netprof run" in r.stderr and "netprof run --out" in r.stderr


def test_runs_without_a_common_cell_are_one_line_exit_2(bpf, base, framing):
    r = run_netprof("compare", str(base), str(framing["message"]), timeout=60)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "share no cell" in r.stderr and "pipeline 1 vs 8" in r.stderr


def test_summary_json_is_a_run_too(base, again):
    doc = compare.compare([base / results.SUMMARY_JSON, again])
    assert len(doc["comparisons"][0]["cells"]) == 2


# ---------------------------------------------------------------------------------------------
# Constructed rows: statistics, verdicts, parsing

def _store(d, rows: list[dict]):
    store = results.ResultsStore(d)
    store.write_meta({"cpus": 2, "kernel": "6.18", "cpu_model": "Test CPU"})
    for r in rows:
        store.add(r)
    return d


def test_fieller_interval_agrees_with_welch():
    same = stats.compare_samples([100, 101, 99], [100, 101, 99])
    assert same["p"] == pytest.approx(1.0) and not same["significant"]
    drop = stats.compare_samples([100, 102, 98], [80, 81, 79])
    assert drop["significant"] and drop["ratio"] == pytest.approx(0.8) and drop["ratio_hi"] < 1
    exact = stats.compare_samples([2.0] * 3, [1.0] * 3)  # a deterministic count that changed
    assert exact["p"] == 0 and exact["ratio_lo"] == exact["ratio_hi"] == 0.5
    for b, n in (([100, 130, 70], [90, 60, 75]), ([10, 11, 12, 13], [12, 14, 13])):
        c = stats.compare_samples(b, n)
        assert (c["ratio_lo"] <= 1 <= c["ratio_hi"]) == (not c["significant"])


def test_fewer_than_three_rounds_is_not_a_verdict(tmp_path):
    a = _store(tmp_path / "a", [make_row(round=r, mps=50_000.0 + r) for r in (1, 2)])
    b = _store(tmp_path / "b", [make_row(round=r, mps=10_000.0 + r) for r in (1, 2)])
    (cell,) = compare.compare([a, b])["comparisons"][0]["cells"]
    assert cell["verdict"] == "not enough rounds" and cell["why"] is None


def test_syscall_change_is_explained(tmp_path):
    a = _store(tmp_path / "a", [make_row("uvloop_sock", round=r, mps=50_000.0 * j,
                                         syscalls_per_msg={"epoll_ctl": 6.0 * j})
                                for r, j in ((1, 0.99), (2, 1.0), (3, 1.01))])
    b = _store(tmp_path / "b", [make_row("uvloop_sock", round=r, mps=59_000.0 * j,
                                         syscalls_per_msg={"epoll_ctl": 2.0 * j},
                                         cpu={"user_s": 0.99, "sys_s": 0.5})
                                for r, j in ((1, 0.99), (2, 1.0), (3, 1.01))])
    doc = compare.compare([a, b], fail_if="syscalls:+0.5")
    (cell,) = doc["comparisons"][0]["cells"]
    assert cell["verdict"] == "faster"
    assert cell["why"].startswith("uvloop_sock c=100: +18% msgs/s")
    assert "epoll_ctl per message 6.00 → 2.00" in cell["why"] and "kernel CPU per message −" in cell["why"]
    assert doc["fail_if"]["breaches"] == []  # fewer syscalls: no regression
    assert compare.compare([b, a], fail_if="syscalls:+0.5")["fail_if"]["breaches"]


def test_io_uring_work_is_compared_beside_the_syscalls(tmp_path):
    """io_uring on against off (issue 50): the ring's epoll_ctl moves back to syscalls; the pages show the
    ring operation and the kernel operations' total beside the syscalls, and the total is unchanged."""
    def rows(ring: float, sys_: float, mps: float) -> list[dict]:
        return [make_row("uvloop_sock", round=r, mps=mps * j, syscalls_per_msg={"epoll_ctl": sys_ * j, "sendto": 1.0,
                                                                                "recvfrom": 1.0},
                         ring_per_msg={"epoll_ctl": ring * j} if ring else {})
                for r, j in ((1, 0.999), (2, 1.0), (3, 1.001))]
    a, b = _store(tmp_path / "a", rows(1.0, 6.0, 50_000.0)), _store(tmp_path / "b", rows(0.0, 7.0, 45_000.0))
    doc = compare.compare([a, b])
    (cell,) = doc["comparisons"][0]["cells"]
    ms = cell["metrics"]
    assert ms["ring_per_msg.epoll_ctl"]["mean_base"] == pytest.approx(1.0) and ms["ring_per_msg.epoll_ctl"]["shown"]
    assert ms["ring_per_msg.epoll_ctl"]["mean_new"] == 0  # a probed cell without ring work: 0, not unknown
    assert ms[metrics.KERNEL_OPS_TOTAL]["mean_base"] == pytest.approx(ms[metrics.KERNEL_OPS_TOTAL]["mean_new"])
    assert "epoll_ctl (io_uring) per message 1.00 → 0.00" in cell["why"], cell["why"]
    (details,) = compare_report.view(doc)["comparisons"][0]["details"]
    labels = [r[0] for r in details["rows"]]
    i = labels.index("syscalls per message")
    assert labels[i + 1] == "kernel operations per message (syscalls + io_uring)", labels
    assert "epoll_ctl (io_uring) per message" in labels and "epoll_ctl per message" in labels


def test_ratios_show_the_digits_their_interval_needs_and_no_negative_bound(tmp_path):
    """A ratio resolved to ±1% prints three decimals (0.98× [0.97, 1.00] would hide it); a count near 0 on
    one side has its interval cut at 0, never printed below it."""
    def rows(mps: float, enter: float) -> list[dict]:
        return [make_row(round=r, mps=mps * j, syscalls_per_msg={"sendto": 1.0, "recvfrom": 1.0,
                                                                 "io_uring_enter": enter * j})
                for r, j in ((1, 0.995), (2, 1.0), (3, 1.005))]
    doc = compare.compare([_store(tmp_path / "a", rows(50_000.0, 0.01)), _store(tmp_path / "b", rows(49_000.0, 0.0))])
    (details,) = compare_report.view(doc)["comparisons"][0]["details"]
    by = {r[0]: r for r in details["rows"]}
    ratio = by["msgs/s"][3]
    assert re.fullmatch(r"0\.980× \[0\.9\d\d, 0\.9\d\d\]", ratio), ratio
    enter = by["io_uring_enter per message"][3]
    assert enter.startswith("0") and "−" not in enter and "[0" in enter, enter


def test_an_ab_page_names_its_variants_and_the_terminal_keeps_the_method_to_a_line(tmp_path):
    """`netprof ab` writes compare's pages about the variants of one run: titled "netprof ab", BASE and NEW
    named as variants (not the same directory twice); compare's terminal output ends with one method line."""
    a, b = (_store(tmp_path / n, [make_row(round=r, mps=v * r) for r in (1, 2, 3)])
            for n, v in (("a", 50_000.0), ("b", 40_000.0)))
    doc = compare.compare([a, b])
    console = Console(width=200, record=True)
    compare_report.print_doc(doc, console)
    lines = console.export_text().splitlines()
    (method,) = [x for x in lines if x.startswith("method:")]
    assert len(method) < 300 and "Fieller" in method and f"BASE {a}" in lines, lines
    ab_doc = {**doc, "ab": {"comparisons": [{"pairs_detail": []}], "metric": "msgs_per_sec"},
              "base": {**doc["base"], "name": "selector"}}
    ab_doc["comparisons"] = [{**doc["comparisons"][0], "new": {**doc["comparisons"][0]["new"], "name": "selector′"}}]
    out = tmp_path / "ab"
    out.mkdir()
    compare_report.render(ab_doc, out)
    md, page = (out / "compare.md").read_text(), (out / "compare.html").read_text()
    assert md.startswith("# netprof ab\n") and "BASE: variant **selector** of" in md
    assert "NEW: variant **selector′**" in md
    assert "<title>netprof ab" in page and "<h1>netprof ab</h1>" in page and "netprof compare" not in page
    console = Console(width=200, record=True)
    compare_report.print_doc(ab_doc, console)
    text = console.export_text()
    assert "BASE variant selector of" in text and "NEW  variant selector′" in text and "docs/ab.md" in text


def test_a_negligible_fairness_change_is_no_why(tmp_path):
    """Jain 0.9999 → 0.995 is significant on the spread's log scale, yet still fair service."""
    a = _store(tmp_path / "a", [make_row(round=r, per_conn={"jain": 0.9999 - r * 1e-6}) for r in (1, 2, 3)])
    b = _store(tmp_path / "b", [make_row(round=r, per_conn={"jain": 0.995 - r * 1e-4}) for r in (1, 2, 3)])
    doc = compare.compare([a, b])
    (cell,) = doc["comparisons"][0]["cells"]
    jain = cell["metrics"]["per_conn.jain"]
    assert jain["verdict"] == "lower" and jain["judged_by"] == metrics.CONN_CV and jain["scale"] == "log"
    assert cell["why"] is None
    (detail,) = compare_report.view(doc)["comparisons"][0]["details"]
    row = next(r for r in detail["rows"] if r[0] == "Jain index")
    assert row[-1] == "lower (negligible)" and row[3].startswith("CV ")


def test_socket_wait_figures_are_judged(tmp_path):
    """--sockwait columns are judged like the others, waits on a log scale: a 10× longer queue wait
    is 'higher', the handler time that did not move is no change, and a 0 wait does not break the log."""
    def sw(wait_p50: float, handler_p50: float, j: float) -> dict:
        return {"sockwait": {"wait_p50_us": wait_p50 * j, "wait_p99_us": 10 * wait_p50 * j,
                             "handler_p50_us": handler_p50 * j, "handler_p99_us": 3 * handler_p50 * j,
                             "rtt_mean_us": 200.0 * j, "server_mean_us": 150.0 * j, "conn_wait_ratio": 1.0}}
    a = _store(tmp_path / "a", [make_row(round=r, **sw(5.0, 20.0, j)) for r, j in ((1, 0.98), (2, 1.0), (3, 1.02))])
    b = _store(tmp_path / "b", [make_row(round=r, **sw(50.0, 20.0, j)) for r, j in ((1, 1.01), (2, 0.97), (3, 1.02))])
    c = _store(tmp_path / "c", [make_row(round=r, **sw(0.0, 20.0, 1.0)) for r in (1, 2, 3)])
    (cell,) = compare.compare([a, b])["comparisons"][0]["cells"]
    m = cell["metrics"]
    assert m["sockwait.wait_p50_us"]["verdict"] == "higher" and m["sockwait.wait_p50_us"]["scale"] == "log"
    assert m["sockwait.wait_p50_us"]["ratio"] == pytest.approx(10, rel=0.05)
    assert m["sockwait.handler_p50_us"]["verdict"] == NO_CHANGE
    assert m[metrics.SOCKWAIT_TRANSIT]["mean_base"] == pytest.approx(50.0)
    assert cell["why"] is None  # msgs/s and latency did not move: no why-sentence for a wait alone
    (cell,) = compare.compare([a, c])["comparisons"][0]["cells"]
    assert cell["metrics"]["sockwait.wait_p50_us"]["verdict"] == "lower"
    assert cell["metrics"]["sockwait.wait_p50_us"]["mean_new"] == pytest.approx(1e-3)


def test_compare_states_its_resolution_and_points_to_ab_when_it_is_wide(tmp_path):
    """Issue 33: separate runs resolve only what their rounds' spread allows. Rounds of 80-120k msgs/s
    (this host's regimes) cannot tell ±10% apart: the comparison says so and names netprof ab; rounds
    within ±1% resolve a few percent, and nothing is said."""
    def run(name: str, values: tuple[float, ...]):
        return _store(tmp_path / name, [make_row(round=r, mps=v) for r, v in enumerate(values, 1)])

    wide_a, wide_b = run("wa", (80e3, 100e3, 120e3)), run("wb", (120e3, 85e3, 100e3))
    comp = compare.compare([wide_a, wide_b])["comparisons"][0]
    (cell,) = comp["cells"]
    m = cell["metrics"]["msgs_per_sec"]
    assert cell["resolution"] == pytest.approx((m["ratio_hi"] - m["ratio_lo"]) / 2) and cell["resolution"] > 0.1
    (said,) = [w for w in comp["warnings"] if "resolve" in w]
    assert f"±{cell['resolution']:.0%}" in said and "`netprof ab`" in said and cell["label"] in said
    tight = compare.compare([run("ta", (99e3, 100e3, 101e3)), run("tb", (101e3, 100e3, 99.5e3))])["comparisons"][0]
    assert tight["cells"][0]["resolution"] < 0.05 and not [w for w in tight["warnings"] if "resolve" in w]
    # one round a side: no interval, no resolution to state
    few = compare.compare([run("fa", (99e3,)), run("fb", (100e3,))])["comparisons"][0]
    assert few["cells"][0]["resolution"] is None and not [w for w in few["warnings"] if "resolve" in w]


@pytest.mark.parametrize("bad", ["slowr:5%", "slower", "slower:+5%", "p99:-10%", "syscalls:lots"])
def test_malformed_fail_if_names_the_fix(bad):
    with pytest.raises(InputError, match="--fail-if slower:5%,p99:\\+10%,syscalls:\\+0.5"):
        fail_if.parse_fail_if(bad)


def test_cell_summaries_have_mean_interval_n():
    df = pd_frame([make_row(round=r, mps=v) for r, v in ((1, 99.0), (2, 100.0), (3, 101.0))]
                  + [make_row(round=4, status="failed", mps=0.0)])
    (cell,) = stats.cell_summaries(df)
    m = cell["metrics"]["msgs_per_sec"]
    assert (cell["rounds"], cell["failed_rounds"], m["n"]) == (3, 1, 3)
    assert m["mean"] == pytest.approx(100.0) and m["interval"][0] < 100 < m["interval"][1]
    assert cell["metrics"]["syscalls_per_msg.sendto"]["mean"] == pytest.approx(1.0)
    json.dumps(cell)


def pd_frame(rows):
    import pandas as pd

    return pd.DataFrame([results.flatten(r) for r in rows])


def test_latency_reads_in_the_unit_a_person_reads():
    """compare's latency figures as the run's own tables write them: '154 µs', '1.9 ms' (not '1921 µs')."""
    from netprof.profiler.analysis import compare

    assert [compare.fmt("lat_us.p99", v) for v in (154.0, 1921.0, 82_512.0)] == ["154 µs", "1.9 ms", "82.5 ms"]


def test_at_a_set_rate_a_cell_is_judged_on_its_p99(tmp_path):
    """Two --rate runs: each side answered the 5,000/s asked, so msgs/s says nothing of the server; the cell's
    verdict is its p99's (netprof ab's stopping metric under --rate), said as faster or slower, and the summary
    row shows that figure, named."""
    def rows(p99: float) -> list[dict]:
        return [make_row(round=r, mps=5_000.0 + r, rate=5000, lat_us={"p99": p99 * j})
                for r, j in ((1, 0.98), (2, 1.0), (3, 1.02))]

    a, b = _store(tmp_path / "a", rows(2_000.0)), _store(tmp_path / "b", rows(1_000.0))
    doc = compare.compare([a, b])
    (cell,) = doc["comparisons"][0]["cells"]
    assert cell["judged_on"] == "lat_us.p99" and cell["verdict"] == "faster", cell["verdict"]
    assert cell["metrics"]["msgs_per_sec"]["verdict"] == "no significant change"
    view = compare_report.view(doc)["comparisons"][0]
    assert view["summary_header"][1:3] == ["BASE", "NEW"], view["summary_header"]
    (row,) = view["summary"]
    assert row[1:3] == ["latency p99 2 ms", "latency p99 1 ms"] and row[-1] == "faster", row
    assert compare.compare([b, a])["comparisons"][0]["cells"][0]["verdict"] == "slower"
    # --fail-if slower reads the same figure: the p99 rose by half (2 ms against 1 ms), msgs/s the schedule's
    (line,) = compare.compare([b, a], fail_if="slower:5%")["fail_if"]["breaches"]
    assert line.startswith("slower:5%: ") and "latency p99 1 ms → 2 ms (+100%" in line, line
    assert not compare.compare([a, b], fail_if="slower:5%")["fail_if"]["breaches"]
    # closed loop: msgs/s, as always
    c = _store(tmp_path / "c", [make_row(round=r, mps=50_000.0 + r) for r in (1, 2, 3)])
    (cell,) = compare.compare([c, c])["comparisons"][0]["cells"]
    assert cell["judged_on"] == "msgs_per_sec"
    assert compare_report.view(compare.compare([c, c]))["comparisons"][0]["summary_header"][1] == "BASE msgs/s"


def test_what_differs_between_the_runs_besides_the_cells_is_a_setting_not_a_watchs_seconds():
    """Two watches of 3 s watched 3.009 and 3.011 s (their meta's duration is what they watched): no warning; runs
    of 3 and 5 s per cell, or on two kernels, are warned of."""
    def run(duration, kernel="6.1.0") -> compare.Run:
        return compare.Run(given="d", dir=Path("d"), name="d", df=pd.DataFrame(),
                           meta={"kernel": kernel, "config": {"duration": duration}})

    assert compare.warnings_for(run(3.009), run(3.011)) == []
    assert compare.warnings_for(run(3.0), run(5.0)) == ["measured seconds per cell differs: 3.0 vs 5.0"]
    assert compare.warnings_for(run(3.0), run(3.0, "6.2.0")) == ["kernel differs: 6.1.0 vs 6.2.0"]
    # Two builds of netprof, and a run from before meta.json named the build: said, with no "None"
    def built(source: str) -> compare.Run:
        return compare.Run(given="d", dir=Path("d"), name="d", df=pd.DataFrame(),
                           meta={"kernel": "6.1.0", "config": {"duration": 3.0}, "netprof_source": source})

    assert compare.warnings_for(run(3.0), built("9a49fb6")) == ["netprof build differs: not recorded vs 9a49fb6"]
    assert compare.warnings_for(built("605da6f"), built("9a49fb6")) == ["netprof build differs: 605da6f vs 9a49fb6"]
