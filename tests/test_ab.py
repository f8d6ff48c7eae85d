"""`netprof ab`: real servers, a real loader and the canary, end to end with short windows; its input rules
without starting anything. The statistics alone are tests/test_paired.py's."""

from __future__ import annotations

import contextlib
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import psutil
import pytest

from helpers import _missing_bpf, netprof_cli, run_netprof, wait_no_children
from netprof.profiler import ab
from netprof.profiler.core.errors import InputError
from netprof.profiler.run.plan import RunConfig

# One 64-byte recv per message, then --spin-ns of busy CPU, then the echo (bench/spin_echo.py: the server
# issue 33's acceptance bench uses).
SPIN_ECHO = Path(__file__).resolve().parent.parent / "bench" / "spin_echo.py"
# Short cells: the whole file runs in well under a minute.
SHORT = ("--window", "0.5", "--warmup", "0.2", "--max-time", "10", "--wait")


@contextlib.contextmanager
def _echo_in(directory: Path):
    script = directory / "spin_echo.py"  # a copy per test: what it leaves running is told apart by its path
    script.write_text(SPIN_ECHO.read_text())

    def command(spin_ns: int) -> str:
        return f"{sys.executable} {script} --spin-ns {spin_ns} --port {{port}}"

    yield command
    left = [p for p in psutil.process_iter(["cmdline"]) if str(script) in " ".join(p.info["cmdline"] or [])]
    assert not left, f"echo servers left running: {left}"


@pytest.fixture
def echo(tmp_path):
    with _echo_in(tmp_path) as command:
        yield command


def _ab(*args: str, timeout: float = 90) -> tuple[dict, str]:
    res = run_netprof("ab", *SHORT, *args, "--json", timeout=timeout)  # args last: theirs win
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout), res.stderr


def _msgs(doc: dict, i: int = 0) -> dict:
    return doc["comparisons"][i]["cells"][0]["metrics"]["msgs_per_sec"]


@pytest.fixture(scope="module")
def turns_ab(tmp_path_factory):
    """One `netprof ab` in turns of the echo against itself with 20 µs of spin per message, for two tests: the
    verdict in turns and, where BPF is, --flamegraph's sampling round per variant after the pairs (each made an ab
    of its own: ~8 s of the serial pass). (results directory, JSON document, stderr)"""
    root = tmp_path_factory.mktemp("turns")
    flame = ("--flamegraph",) if _missing_bpf() is None else ()
    # 8 s hold the 2 generations a verdict needs on an ordinary hour; on a slow one a generation (two server starts
    # and their blocks of turns) can take longer, and ab then says "not enough rounds" (a fresh-clone run at 22-33%
    # steal, 2026-12-02: one generation in 8 s). That answer is ab's to give, the time it was given the test's: it
    # is given once more, 20 s.
    with _echo_in(root) as echo:
        for max_time in ("8", "20"):
            out = root / f"ab-{max_time}s"
            doc, err = _ab("--cmd", echo(0), "--name", "fast", "--cmd", echo(20000), "--name", "slow", "--no-probes",
                           *flame, "--out", str(out), "--precision", "10%", "--max-time", max_time, timeout=150)
            if _msgs(doc)["verdict"] != "not enough rounds":
                break
    yield out, doc, err


def test_a_slower_variant_is_resolved_as_slower_in_turns(turns_ab):
    """The default method: one loader serves both servers in 0.1 s turns; rounds of turns within a generation of
    the servers' processes, generations restarted every GEN_BLOCKS blocks, the interval over generations."""
    out, doc, err = turns_ab
    m, info = _msgs(doc), doc["ab"]
    print(f"slow/fast: {m['ratio']:.3f} [{m['ratio_lo']:.3f}, {m['ratio_hi']:.3f}], {info['elapsed_s']} s")
    assert info["method"] == "turns" and info["turn_s"] == 0.1 and info["canary_samples"] == 0
    assert m["verdict"] == "slower" and m["ratio_hi"] < 1 and m["significant"]
    # 20 µs of spin per message: the ratio is the two servers' CPU per message (/proc, from the blocks' rows)
    cpu = doc["comparisons"][0]["cells"][0]["metrics"]["cpu_us_per_msg_total"]
    # The slow variant is slower by no more than its CPU per message says: the rate ratio is not below the CPU
    # ratio. It is above it where the servers are not CPU-bound (the loader, on a host whose hypervisor steals
    # time, holds the fast one back more than the slow one): 0.258 against 0.223 on such an hour, 0.243 against
    # 0.189 in a fresh-clone run beside bench/bystander.py and 0.278 against 0.156 on a quiet host while its
    # steal ran at ~10% (2026-12-01: the fast server 44% busy). The verdict above says slower.
    assert 0.9 / cpu["ratio"] <= m["ratio"], (m, cpu)
    starts = info["server_starts"]
    assert starts["fast"] == starts["slow"] == len(info["comparisons"][0]["pairs_detail"]) >= 2  # one per generation
    assert [p["order"] for p in info["comparisons"][0]["pairs_detail"]][:2] == ["generation 1", "generation 2"]
    turns = pd.read_parquet(out / "turns.parquet")
    assert set(turns["variant"]) == {"fast", "slow"} and turns["generation"].max() == starts["fast"]
    per_round = turns.pivot_table(index=["block", "round"], columns="variant", values="messages")
    assert (per_round["slow"] < per_round["fast"]).mean() > 0.9  # nearly every round shows it
    # each generation's record carries its rounds (the plot's lower panel): every round both servers answered
    rounds = [r for p in info["comparisons"][0]["pairs_detail"] for _, r in p.get("rounds", [])]
    assert len(rounds) == ((per_round["slow"] > 0) & (per_round["fast"] > 0)).sum()
    assert sum(r < 1 for r in rounds) > 0.9 * len(rounds)
    rows = pd.read_parquet(out / "results.parquet")  # one row per variant per block, tagged
    assert set(rows["tag"]) == {"fast", "slow"} and (rows["status"] == "ok").all() and len(rows) % 2 == 0
    assert "block 1, generation 1:" in err and "turns of 0.1 s" in doc["method"]["text"]
    assert wait_no_children() == []


def test_an_aa_interval_holds_1_and_builtin_variants_count_syscalls(bpf, tmp_path):
    """--aa on a built-in server with the counting probes: the interval holds 1, the copy is named with a prime,
    syscalls per message are counted on both sides, --fail-if is judged, and `netprof report` reads the directory."""
    out = tmp_path / "aa"
    doc, _ = _ab("selector", "--aa", "--out", str(out), "--max-time", "6", "--fail-if", "slower:50%")
    m = _msgs(doc)
    print(f"A/A: {m['ratio']:.3f} [{m['ratio_lo']:.3f}, {m['ratio_hi']:.3f}]")
    # Not the 95% interval (that fails 5% of A/A runs by construction when the method is right) but p > 0.001:
    # one failure in a thousand by chance; a real bias (an order effect, one server favoured) over this many
    # pairs would show. The 95% error rate itself is measured in bench/ab_acceptance.py (20 A/A runs).
    assert m["p"] > 0.001, m
    names = [v["label"] for v in doc["ab"]["variants"]]
    starts = doc["ab"]["server_starts"]
    assert names == ["selector", "selector" + ab.PRIME] and doc["ab"]["aa"]
    assert starts[names[0]] == starts[names[1]] >= 1
    metrics = doc["comparisons"][0]["cells"][0]["metrics"]
    # counted on both sides: one receive a message, within a quarter (a 0.15-s probed sub-window of a 0.5-s cell,
    # whose edges a stolen host reads late: 1.12 on an hour of 20-32% steal, 2026-12-02; tests/test_probes_e2e.py
    # holds the count to ±0.02 over 1-s windows)
    assert metrics["syscalls_per_msg.recvfrom"]["mean_base"] == pytest.approx(1.0, abs=0.25)
    assert doc["fail_if"] == {"checks": ["slower:50%"], "breaches": []}
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["backend"]) == {"selector"} and set(rows["server_kind"]) == {"builtin"}
    rep = run_netprof("report", str(out), "-q", timeout=120)
    assert rep.returncode == 0, rep.stderr[-2000:]


def test_under_a_rate_the_slower_variant_is_judged_on_latency(echo, tmp_path):
    """--rate: both variants get the same schedule (400 requests/s over 10 connections), so throughput is the
    rate for both and the verdict comes from latency p99 (the stopping metric under --rate): 1 ms of spin per
    message (the server 40% busy) adds at least 1 ms to every round trip. The echo's own p99 at a low rate is
    this host's wake-up jitter (2.8 ms here, where its median is ~0.1 ms), so p99 moves by less than p50.
    A rate is measured in cells (the method a rate, --fresh and ZeroMQ take): its pairs, canary, results directory,
    pages and pairs plot are checked here too (the default method, turns, above)."""
    out = tmp_path / "ab"
    doc, err = _ab("--cmd", echo(0), "--name", "fast", "--cmd", echo(1_000_000), "--name", "slow", "--no-probes",
                   "-c", "10", "--rate", "400", "--max-connections", "20", "--window", "1", "--precision", "20%",
                   "--max-time", "11.5", "--out", str(out))
    info, cell = doc["ab"], doc["comparisons"][0]["cells"][0]
    assert info["rate"] == 400 and info["arrivals"] == "constant" and info["metric"] == "lat_us.p99"
    assert info["short_of_rate"] == {}  # both kept up
    p99, msgs = cell["metrics"]["lat_us.p99"], cell["metrics"]["msgs_per_sec"]
    print(f"slow/fast p99 {p99['ratio']:.2f} [{p99['ratio_lo']:.2f}, {p99['ratio_hi']:.2f}]; "
          f"p50 lo {cell['metrics']['lat_us.p50']['ratio_lo']:.2f}; msgs/s {msgs['ratio']:.3f}; "
          f"{info['comparisons'][0]['kept']} pairs")
    # p99 from the 4 slowest of each 1-s window's 400 requests, on top of the host's jitter: its interval is wide
    # (here [2.08, 8.68], [1.86, 14.74], [0.99, 17.55] in three runs; ratios 4.2-5.2), so the test reads its
    # direction and the verdict's consistency with it, and the size of the change on the median. --max-time 11.5
    # gives four pairs (with two, the t interval of one degree of freedom put even the median's lower end below 2)
    assert p99["verdict"] in ("higher", "no significant change"), p99
    # Its direction, where the host's own jitter leaves the 1 ms to be seen: fast's p99 was 6.4 ms once beside
    # bench/bystander.py (slow's 5.4: the 4 slowest requests of a window are the host's stalls on both sides)
    if p99["mean_base"] < 3000:
        assert p99["ratio"] > 1.2, p99
    assert cell["metrics"]["lat_us.p50"]["ratio_lo"] > 2, cell["metrics"]["lat_us.p50"]
    assert cell["verdict"] == {"higher": "slower"}.get(p99["verdict"], p99["verdict"])
    assert cell["label"].endswith("at 400/s")
    assert 0.97 <= msgs["ratio"] <= 1.03, msgs  # the schedule's, whichever server
    assert cell["judged_on"] == "lat_us.p99"
    assert "open loop at 400 requests/s (constant arrivals), judged on latency p99" in doc["method"]["text"]
    rows = pd.read_parquet(out / "results.parquet")
    # each 0.5-s window at the schedule's rate within a tenth (200 requests: a stall of the host moves a few across
    # its edges, 379 and 431 once on an hour of 20-32% steal); the pairs' ratio above within 3%
    assert set(rows["rate"]) == {400} and (rows["msgs_per_sec"].between(360, 440)).all(), rows["msgs_per_sec"]
    assert set(rows["max_connections"]) == {20}  # --max-connections reached every variant's cells
    # the cells method: alternating pairs on warm servers, each pair's canary, within --max-time
    assert info["method"] == "cells" and info["measured"] == "warm" and info["server_starts"] == {"fast": 1, "slow": 1}
    assert info["stop"]["reason"] in ("max-time", "precision") and info["elapsed_s"] <= 11.5 + 3
    comp = info["comparisons"][0]
    assert comp["kept"] + comp["dropped"] == comp["pairs"] >= 3
    assert [p["order"] for p in comp["pairs_detail"][:4]] == ["AB", "BA", "AB", "BA"][:len(comp["pairs_detail"])]
    assert all(p["canary_ns"]["base"] for p in comp["pairs_detail"]) and info["canary_samples"] > 100  # ~100 a second
    assert doc["base"]["name"] == "fast" and doc["comparisons"][0]["new"]["name"] == "slow"
    # the results directory: rows tagged by variant (what `netprof report` reads), ab.json, compare's pages
    assert set(rows["tag"]) == {"fast", "slow"} and set(rows["server_kind"]) == {"cmd"}
    assert len(rows) == 2 * comp["pairs"] and (rows["status"] == "ok").all()
    assert json.loads((out / "ab.json").read_text())["ab"]["comparisons"][0]["pairs"] == comp["pairs"]
    assert "| msgs/s |" in (out / "compare.md").read_text() and (out / "compare.html").exists()
    # the pairs over time, beside the pages: one point per pair (kept or dropped), the estimate, the canary
    svg = ET.parse(out / "ab_pairs_1.svg").getroot()
    texts = " ".join(t for el in svg.iter() if el.tag.endswith("text") for t in el.itertext())
    assert "Each pair's lat_us.p99: slow against fast" in texts and f"estimate {p99['ratio']:.4g}" in texts, texts
    assert "(ab_pairs_1.svg)" in (out / "compare.md").read_text()
    assert 'src="ab_pairs_1.svg"' in (out / "compare.html").read_text()
    assert "pair 1:" in err  # off a terminal, one progress line per pair on stderr
    assert "lat_us.p99" in err and wait_no_children() == []


def test_under_a_rate_the_verdict_is_the_stopping_metrics():
    plan_ = ab.plan(RunConfig(backends=[], connections=[10], extra_dims={"rate": [1000]}), ["selector", "selector"], [])
    closed = ab.plan(RunConfig(backends=[], connections=[10]), ["selector", "selector"], [])
    assert plan_.metric == "lat_us.p99" and plan_.rate == 1000 and closed.metric == "msgs_per_sec" and not closed.rate
    up = {"verdict": "higher", "better": False}
    metrics = {"lat_us.p99": up, "msgs_per_sec": {"verdict": "no significant change", "better": None}}
    assert ab._verdict(metrics, plan_) == "slower" and ab._verdict(metrics, closed) == "no significant change"
    assert ab._verdict({"lat_us.p99": {"verdict": "lower", "better": True}}, plan_) == "faster"
    assert ab._verdict({}, plan_) == "not measured"


def test_turns_are_the_default_where_the_loader_can_serve_them():
    assert ab.choose_method("", rate=False, fresh=False, zmq=False) == "turns"
    for kw in ({"rate": True}, {"fresh": True}, {"zmq": True}, {"mixed": True}):
        assert ab.choose_method("", **{"rate": False, "fresh": False, "zmq": False, **kw}) == "cells", kw
        with pytest.raises(InputError, match="--method turns does not go with"):
            ab.choose_method("turns", **{"rate": False, "fresh": False, "zmq": False, **kw})
    assert ab.default_window({}, "turns") == ab.BLOCK_S


def test_the_default_window_holds_enough_requests_for_a_p99():
    assert ab.default_window({}) == 0.3
    assert ab.default_window({"rate": [1000]}) == 2.0  # 2,000 requests: a p99 of 20
    assert ab.default_window({"rate": [50_000]}) == 0.3


def test_flamegraph_samples_each_variant_and_draws_the_difference(bpf, turns_ab):
    """--flamegraph: after the pairs, a sampling round per variant on its warm server; the spin variant's
    extra user CPU is a notable change, so the differential on-CPU flamegraph is drawn (compare's, from the
    two sampled cells) and the pages link it. (The ab in turns above, made with --flamegraph where BPF is.)"""
    out, doc, err = turns_ab
    flames = doc["ab"]["flamegraphs"]
    assert set(flames) == {"fast", "slow"}, flames
    for label, rel in flames.items():
        assert rel.startswith("variants/"), (label, rel)  # a directory, not a note of why not
        assert (out / rel / "oncpu.folded").stat().st_size > 0
    diff = doc["comparisons"][0]["cells"][0]["flamegraph_diff"]
    assert diff and "svg" in diff["oncpu"], diff
    ET.parse(out / diff["oncpu"]["svg"])  # a well-formed SVG
    assert diff["oncpu"]["svg"] in (out / "compare.md").read_text()
    assert "flamegraph: sampling slow" in err


@pytest.mark.parametrize("args, says", [
    (["selector"], "at least two variants"),
    (["selector", "nosuch"], "unknown backend 'nosuch'"),
    (["selector", "--cmd", "true {port}", "--env", "C:X=1"], "there is no variant C"),
    (["selector", "selector", "--precision", "abc"], "--precision 'abc'"),
    (["selector", "selector", "--rate", "1k,2k"], "give one --rate"),
    (["selector", "selector", "--rate", "fast"], "--rate 'fast' is not a rate"),
    (["selector", "selector", "--arrivals", "poisson"], "add --rate R"),
    (["selector", "selector", "--max-connections", "50"], "--max-connections caps the connections an open-loop"),
    (["selector", "selector", "--rate", "1k", "-c", "100", "--max-connections", "50"], "is below -c 100"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    res = netprof_cli("ab", *args)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("names, cmds, kw, says", [
    (["selector", "asyncio_sock"], [], {"aa": True}, "--aa runs one variant against itself"),
    (["selector", "selector"], [], {"metric": "bogus"}, "--metric 'bogus'"),
    (["selector", "selector"], [], {"precision": 0.8}, "--precision 0.8 is out of range"),
    (["selector", "selector"], [], {"window": 0.01}, "--window 0.01 is out of range"),
    (["selector", "selector"], [], {"env_items": ["X=1"]}, "--env sets the environment of a --cmd server"),
    (["selector"], ["true {port}"], {"env_items": ["A:X=1"]}, "variant A is a built-in backend"),
    (["selector", "selector"], [], {"python": "3.11,3.12,3.13"}, "3 interpreters for 2 variants"),
    (["selector"], ["true {port}"], {"python": ",3.12"}, "--python for variant B"),
    (["selector", "selector"], [], {"fail_if": "faster:5%"}, "--fail-if 'faster:5%'"),
    (["selector"], ["true"], {}, "has no {port}"),
    (["selector"], ["true {port}"], {"cmd_names": ["a", "b"]}, "more --name than --cmd"),
    (["selector", "selector"], [], {"method": "bogus"}, "--method 'bogus' is not one of turns, cells"),
    (["selector", "selector"], [], {"method": "turns", "fresh": True}, "--method turns does not go with --fresh"),
    (["selector", "selector"], [], {"window": 0.25}, "--window 0.25: with turns it is a whole number of 0.1 s"),
    (["selector", "selector", "selector"], [], {"window": 0.3}, "more than one round of the 3 variants"),
])
def test_bad_variants_and_settings_are_refused_before_anything_starts(names, cmds, kw, says):
    with pytest.raises(InputError) as e:
        ab.plan(RunConfig(backends=[], connections=[10]), names, cmds, **kw)
    assert says in str(e.value)


def test_variant_syntax_without_starting_anything():
    kinds = ["builtin", "cmd", "cmd"]
    assert ab._per_variant_pythons("3.12", kinds) == ["3.12", "", ""]
    assert ab._per_variant_pythons("3.12,,", kinds) == ["3.12", "", ""]
    assert ab._per_variant_env(["X=1", "C:Y=2", "B:Z=a:b=c"], kinds) == [{}, {"X": "1", "Z": "a:b=c"},
                                                                          {"X": "1", "Y": "2"}]
    assert ab._labels(["a", "b", "a", "a"]) == ["a", "b", "a" + ab.PRIME, "a" + ab.PRIME * 2]
    assert ab.parse_precision("0.5%") == pytest.approx(0.005) and ab.parse_precision("0.02") == 0.02
    p = ab.plan(RunConfig(backends=[], connections=[10]), ["selector"], [], aa=True, window=0.5, max_time=20)
    assert [v.label for v in p.variants] == ["selector", "selector" + ab.PRIME]
    # turns: --window is the block's; the variants' cells (probed after the blocks) keep the short window
    assert p.method == "turns" and p.window == 0.5
    assert all(v.cfg.extra_dims == {"tag": [v.label], "io_uring": ["on"]} and v.cfg.duration == ab.WINDOW_S
               for v in p.variants)
    cells = ab.plan(RunConfig(backends=[], connections=[10]), ["selector"], [], aa=True, window=0.5, method="cells")
    assert cells.method == "cells" and all(v.cfg.duration == 0.5 for v in cells.variants)
    with pytest.raises(InputError, match="one value of -c"):
        ab.plan(RunConfig(backends=[], connections=[10, 100]), ["selector", "selector"], [])



def test_pairs_plot_needs_two_pairs_and_draws_counts_as_differences():
    """ab_plot.draw on a record as ab.py writes it: fewer than two pairs with the metric draw nothing; a count
    (not log-judged) is plotted as NEW − BASE, and a pair without canary samples still has its point."""
    from netprof.profiler.report import ab_plot

    def pair(t, d, dropped=False):
        return {"pair": t, "t_s": t, "order": "AB", "dropped": dropped, "canary_ns": {"base": 0, "new": 0},
                "d": {"syscalls_per_msg_total": d}}

    one = {"pairs_detail": [pair(1, 0.5)]}
    assert ab_plot.draw(one, None, "syscalls_per_msg_total", False, "A", "B") is None
    rec = {"pairs_detail": [pair(1, 0.5), pair(2, 0.7, dropped=True), pair(3, 0.6)]}
    svg = ab_plot.draw(rec, {"delta": 0.55}, "syscalls_per_msg_total", False, "A", "B")
    texts = " ".join(t for el in ET.fromstring(svg).iter() if el.tag.endswith("text") for t in el.itertext())
    assert "syscalls_per_msg_total, B − A" in texts and "estimate 0.55" in texts and "dropped" in texts, texts


def test_turns_plot_shows_each_generations_rounds_and_no_empty_canary_panel():
    """Turns have no canary: beneath the generations the plot shows each round's NEW/BASE (from the rounds ab.py
    pairs up out of turns.parquet's rows), and a record with neither gets one panel, not an empty canary one."""
    from netprof.profiler.report import ab_plot

    rows = [{"generation": g, "block": b, "round": r, "t_s": round(0.2 * (10 * b + r), 3), "variant": v, "messages": m}
            for g, b in ((1, 1), (2, 2)) for r in range(3)
            for v, m in (("A", 1000), ("B", 0 if (b, r) == (2, 2) else 940))]
    got = ab._round_ratios(rows, "A", "B")
    assert got == {1: [[2.0, 0.94], [2.2, 0.94], [2.4, 0.94]], 2: [[4.0, 0.94], [4.2, 0.94]]}  # no ratio of 0

    def gen(g, d, rounds):
        return {"pair": g, "t_s": 2.0 * g, "order": f"generation {g}", "dropped": False,
                "canary_ns": {"base": 0.0, "new": 0.0}, "d": {"msgs_per_sec": d}, "rounds": rounds}

    def texts(svg):
        return " ".join(t for el in ET.fromstring(svg).iter() if el.tag.endswith("text") for t in el.itertext())

    rec = {"pairs_detail": [gen(1, -0.06, got[1]), gen(2, -0.06, got[2])]}
    with_rounds = texts(ab_plot.draw(rec, {"ratio": 0.94}, "msgs_per_sec", True, "A", "B"))
    assert "each round's" in with_rounds and "canary" not in with_rounds, with_rounds
    bare = {"pairs_detail": [gen(1, -0.06, []), gen(2, -0.06, [])]}
    alone = texts(ab_plot.draw(bare, {"ratio": 0.94}, "msgs_per_sec", True, "A", "B"))
    assert "canary" not in alone and "each round's" not in alone and "estimate 0.94" in alone, alone


def test_one_server_with_io_uring_and_without_is_two_variants():
    """--io-uring on,off with one SERVER: the same server twice, the second with io_uring_setup denied (its label
    says so); a list of the wrong length is one line."""
    template = RunConfig(backends=[], connections=[100])
    p = ab.plan(template, ["uvloop_sock"], [], io_uring="on,off")
    assert [(v.server, v.label, v.cfg.extra_dims["io_uring"]) for v in p.variants] == [
        ("uvloop_sock", "uvloop_sock", ["on"]), ("uvloop_sock", "uvloop_sock-nouring", ["off"])]
    assert [v.cfg.extra_dims["io_uring"] for v in ab.plan(template, ["selector", "uvloop_sock"], [],
                                                          io_uring="off").variants] == [["off"], ["off"]]
    with pytest.raises(InputError, match="--io-uring gives 2 values for 3 variants"):
        ab.plan(template, ["selector", "uvloop_sock", "asyncio_sock"], [], io_uring="on,off")
