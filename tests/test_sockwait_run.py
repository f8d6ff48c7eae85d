"""`netprof run --sockwait` end to end (issue 22): real backends, the real loader, the counting and
socket-wait probes, rows, per-connection files, rules and the report section.

Each run is short (-d 2, one round). The numbers are checked against what the workload fixes
(`--work sleep:1000` is a 1 ms handler; ten connections on one loop queue behind nine of them) and
against the loader's own round trip over the same window.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

import pandas as pd
import pytest

from helpers import (
    STEAL_REMEASURE,
    other_cpus,
    require_bpf,
    run_netprof,
    run_steal,
    starvation_disturbed,
    stretch,
    wait_no_children,
)
from netprof.profiler.model import results


def sockwait_run(tmp_path, *args: str, name: str = "run", timeout: float = 300) -> tuple[dict, object]:
    require_bpf()
    out = tmp_path / name
    res = run_netprof(
        "run",
        *args,
        "-d",
        "1",
        "-r",
        "1",
        "--warmup",
        "0.3",
        "--sockwait",
        "--wait",
        "--json",
        "--out",
        str(out),
        timeout=timeout,
    )
    assert res.returncode in (0, 1), res.stderr[-2000:]  # 1: a failed cell; its row says why
    return json.loads(res.stdout), out


def rows_by_backend(summary: dict) -> dict[str, dict]:
    rows = {r["backend"]: r for r in summary["runs"]}
    for r in rows.values():
        assert r["status"] == "ok", r
        assert r["probes"] == ["counting", "sockwait"] and r["sockwait"]["attached"] is True
    return rows


def test_head_of_line_on_one_loop_not_with_threads_and_no_state_between_cells(tmp_path):
    """selector and thread, each message handled for 1 ms (`--work sleep:1000`), 10 connections:
    on selector's single loop a message waits for the nine other handlers (median ≥ 5 ms), with
    threads it does not (< 1 ms); the handler takes ≈ 1 ms in both. The two cells follow each other
    with the same probe set: the second one's figures hold only its own ten connections."""
    summary, out = sockwait_run(tmp_path, "selector", "thread", "-c", "10", "--work", "sleep:1000")
    rows = rows_by_backend(summary)
    sel, thr = rows["selector"]["sockwait"], rows["thread"]["sockwait"]
    assert sel["wait_p50_us"] >= 5000, sel
    assert thr["wait_p50_us"] < 1000, thr
    for name, s in (("selector", sel), ("thread", thr)):
        assert 800 <= s["handler_p50_us"] <= 2000, (name, s)
        assert s["exact"] and s["overflow_evicted"] == s["overflow_fifo_merged"] == s["overflow_insert_failed"] == 0
        assert s["unmeasured_unknown"] == 0, (name, s)  # attached before the loader connected
        # the kernel's part fits in the loader's round trip of the same window (means: exact sums)
        assert s["wait_mean_us"] + s["handler_mean_us"] <= s["rtt_mean_us"] * 1.05, (name, s)
        assert s["server_mean_us"] <= s["rtt_mean_us"] * 1.05, (name, s)
        # every message of the loader's window was read and answered once: counted over that window in the kernel
        # (the gate: the loader's count, its length), to the requests in flight at an edge
        assert s["edges"] == "exact" and s["max_exact"], (name, s)
        assert s["window_s"] == pytest.approx(rows[name]["probed"]["duration_s"], rel=1e-3), (name, s)
        assert s["handler_count"] == pytest.approx(s["messages"], abs=2 * 10), (name, s)
        assert s["sockets"] == 10, (name, s)
    # per connection: ten each, the second cell's only its own (nothing left from the first)
    conns = results.load_sockwait_conns(out)
    assert conns is not None
    for backend in ("selector", "thread"):
        c = conns[conns["backend"] == backend]
        assert len(c) == 10 and c["dport"].nunique() == 10, c
        # gated: nothing is counted after the window, so the connections' answers are the histogram's, however
        # far apart the two were read
        assert c["answers"].sum() == rows[backend]["sockwait"]["handler_count"]
        assert (c["wait_us"].notna()).all()
    sel_waits = conns[conns["backend"] == "selector"]["wait_mean_us"]
    assert (sel_waits >= 4000).all(), list(sel_waits)
    # the rule names the single-loop cell, not the threaded one
    hol = [a for a in summary["anomalies"] if a["id"] == "head_of_line"]
    assert [a["backend"] for a in hol] == ["selector"], hol
    # the report's section, with the cost statement
    md = (out / "report.md").read_text()
    assert "## Where the round trip went" in md
    assert "Socket-wait probes attached for the whole cell; their cost is included in the headline" in md
    # measured by this run, or by an earlier one in this boot (kept in netprof's cache): the report says which
    cost = json.loads((out / "meta.json").read_text())["sockwait_cost_per_message"]
    said = ("Measured on this host during the run" if cost["source"] == "measured"
            else "earlier in this boot (cached)")
    assert said in md, cost
    assert 'id="sockwait"' in (out / "report.html").read_text()
    assert (out / "plots" / "sockwait_round_trip.png").exists()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["sockwait"] is True
    # Measured, not judged by sign: that is this host's noise as much as the probes' cost (once -305 ns
    # here; bench/probe_overhead.py --micro-sock measures it). Its size is judged: a Python echo of one
    # byte costs µs of CPU per message, and no added figure can exceed a whole bare echo (a figure per
    # run instead of per message, or in µs instead of ns, would).
    cost = meta["sockwait_cost_per_message"]
    assert "error" not in cost and (cost["messages"], cost["repeats"]) == (20_000, 3), cost
    assert 1_000 < cost["bare_ns"] < 1_000_000, cost
    for added in ("added_watched_ns", "added_bystander_ns"):
        assert math.isfinite(cost[added]) and abs(cost[added]) < cost["bare_ns"], cost
    # stored rows keep the group: `netprof report DIR` rebuilds the same rows
    flat = pd.read_parquet(out / "results.parquet")
    assert flat["sockwait.wait_p50_us"].notna().all()
    assert not wait_no_children()


def test_starved_connections_are_the_ones_whose_data_waits(tmp_path):
    """asyncio_sock, message framing, 8 in flight, 100 connections: a connection whose `sock_recv`
    finds data keeps the loop, so the others' data waits. Checked against the loader's own per-connection
    Issue 22's figure — the least-served tenth's own wait (p90 of its reads per connection, then the median
    over the tenth; never-read connections at the age of their unread data) ≥ 100× the most-served tenth's,
    and the wait_starvation rule on it — holds where the carriers keep the loop for the whole window; it is
    checked in the first run that shows that, of three at most, and in every run the rule fires exactly where
    the figure says so."""
    # 50 µs of handler CPU per message keeps the backend the slower side, the effect's condition (as in
    # conftest's starvation run and test_sockwait.py): a carrier keeps the loop only while the loader refills
    # its queue before it drains, and a loader stalled by the host (a hypervisor's steal) lets it drain: then
    # the loop passes from carrier to carrier and every connection waits in turn. With 20 µs four runs in a
    # row of a busy hour came out so (×1.3-3.5, Jain 0.63-0.88). With 50 µs, on an ordinary hour beside
    # bench/bystander.py: ×984 and ×831 (most-served tenth ~510 µs: its own 8 queued messages), and once ×4
    # (Jain 0.54; most-served tenth 82 ms: the carriers took turns). The whole 1-s window probed
    # (--probe-share 1): a connection starves for about a second at a time.
    tries = []
    for i in range(3):
        summary, out = sockwait_run(tmp_path, "asyncio_sock", "-c", "100", "--pipeline", "8", "--framing",
                                    "message", "--work", "spin:50", "--probe-share", "1", name=f"run{i}")
        row = rows_by_backend(summary)["asyncio_sock"]
        s = row["sockwait"]
        # How many connections read or answered inside the window is the host's speed under the starvation
        # itself (28 of 100 on a quiet host, 6 in a CI run of 2026-11-29): at least two (the carriers and a
        # starved one); every one of the loader's 100 is known, the never-read at the age of their data.
        assert s["sockets"] >= 2 and s["unmeasured_unknown"] == 0, s
        conns = results.load_sockwait_conns(out)
        assert conns is not None and len(conns) == 100, None if conns is None else len(conns)
        tries.append({"conn_wait_ratio": s.get("conn_wait_ratio"), "jain": row["per_conn"].get("jain"),
                      "most_us": s.get("conn_wait_most_us"), "steal": run_steal(out),
                      "other_cpus": round(other_cpus(out, row), 2),
                      "backend_busy": round((row["cpu"]["user_s"] + row["cpu"]["sys_s"]) / row["duration_s"], 2),
                      # the times its loop slept (voluntary switches, the counting set's): every queue had drained
                      "loop_slept": round((row["ctx"]["voluntary_per_msg"] or 0) * row["messages"])})
        fired = {a["id"] for a in summary["anomalies"] if a.get("backend") == "asyncio_sock"}
        assert ("wait_starvation" in fired) == (s["conn_wait_ratio"] >= 100), (fired, tries)
        # the loader's own counts: starved whatever the regime of the backend's loop (Jain 0.54-0.69 with the
        # carriers taking turns), and the least-served tenth waited longer than the most-served (×1.9-4.5 taking
        # turns); a try the hypervisor stole from (over STEAL_REMEASURE) is measured again instead: at 40% steal
        # the loader itself served the connections evenly (Jain 0.86, ×1.27; fresh-clone run beside
        # bench/bystander.py, 2026-12-04). Every try the host did not steal from must show it.
        tries[-1]["starved"] = "starvation" in fired and row["per_conn"]["jain"] < 0.8 and s["conn_wait_ratio"] > 1.2
        assert tries[-1]["starved"] or tries[-1]["steal"] > STEAL_REMEASURE, (fired, tries)
        # a run whose loop never slept, that the hypervisor did not slow and beside which nothing else ran must show
        # the carriers keeping the loop (helpers.starvation_disturbed says why each of those breaks them)
        if s["conn_wait_ratio"] >= 100 or not starvation_disturbed(tries[-1]):
            break
    # On a slow hour of this host every try may be one where the carriers took turns (three of three at a
    # steal of 26-32%, 2026-12-02): the figure then says so (above), and its ×100 is not the host's to give.
    if not any(t["starved"] for t in tries):  # every try stolen from (asserted above)
        warnings.warn(f"the hypervisor stole from every try, and none showed the starvation: {tries}", stacklevel=1)
    if all(starvation_disturbed(t) for t in tries) and s["conn_wait_ratio"] < 100:
        warnings.warn(f"the carriers took turns in every try (the loop slept, the host stole or another process "
                      f"ran): {tries}", stacklevel=1)
    else:
        assert s["conn_wait_ratio"] >= 100, json.dumps(tries)  # a string: pytest cuts a list's repr short
        # the carriers' own wait is their 8 queued messages' handlers (~510 µs), longer by what the hypervisor
        # stole from the backend's CPU meanwhile (at most twice the host's share: 2.8 ms at a third of it once)
        late = stretch(tries[-1]["steal"])
        assert s["conn_wait_most_us"] < 1000 * late and 1000 < s["conn_wait_least_us"], (s, tries)
    # the per-connection file holds the same split
    # (a socket counts when it read or answered: one answered with no read in the window, its request read
    # just before the window, under the strong starvation the work gives)
    idle = conns["reads"].eq(0) & conns["answers"].eq(0)
    assert len(conns) == s["sockets"] + int(idle.sum())
    assert not wait_no_children()


def test_without_sockwait_rows_say_so_and_the_report_has_no_section(tmp_path):
    out = tmp_path / "plain"
    res = run_netprof(
        "run",
        "selector",
        "-c",
        "10",
        "-d",
        "0.3",
        "-r",
        "1",
        "--warmup",
        "0",
        "--no-probes",
        "--wait",
        "--json",
        "--out",
        str(out),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads(res.stdout)["runs"]
    assert row["sockwait"] == {"attached": False} and row["probes"] == []
    assert "Where the round trip went" not in (out / "report.md").read_text()
    assert not (out / results.SOCKWAIT_CONN_PARQUET).exists()


def test_follows_forked_workers_and_own_commands(tmp_path):
    """prefork (two forked worker processes sharing the listener) and the user's own command (--cmd,
    the same selector loop started by the user's command line): the set follows the process tree,
    so every message of the window is timed (without the workers the counts would be 0)."""
    cmd = f"{sys.executable} -m netprof.backends selector --host 127.0.0.1 --port {{port}}"
    summary, out = sockwait_run(
        tmp_path, "prefork", "--workers", "2", "--cmd", cmd, "--name", "own_selector", "-c", "10"
    )
    rows = rows_by_backend(summary)
    assert set(rows) == {"prefork", "own_selector"}
    conns = results.load_sockwait_conns(out)
    assert conns is not None
    for name, row in rows.items():
        s = row["sockwait"]
        assert s["sockets"] == 10, (name, s)
        assert s["handler_count"] == pytest.approx(s["messages"], rel=0.1, abs=20), (name, s)
        assert s["wait_count"] == pytest.approx(s["messages"], rel=0.1, abs=20), (name, s)
        assert s["wait_mean_us"] + s["handler_mean_us"] <= s["rtt_mean_us"] * 1.05, (name, s)
        assert (conns[conns["backend"] == name]["tgid"] > 0).all()
    assert not wait_no_children()


def test_refuses_clearly_without_what_the_set_needs(monkeypatch):
    """A kernel without what the set reads (here: no BTF to find the socket fields) is one line that
    says what is missing, before any process starts (the CLI turns it into exit 2)."""
    require_bpf()
    from netprof.probes import ProbeError
    from netprof.probes.base import NO_PROBES
    from netprof.probes.sockwait import sockwait

    def no_btf(path: str = sockwait.BTF_PATH) -> dict:
        raise ProbeError(
            f"the socket-wait probes need the kernel's BTF ({path}): No such file or directory ({NO_PROBES})"
        )

    monkeypatch.setattr(sockwait, "_checked", {})
    monkeypatch.setattr(sockwait, "kernel_offsets", no_btf)
    why = sockwait.check_available()
    assert why is not None and why.startswith("the socket-wait probes need the kernel's BTF")
    assert "--no-probes" not in why  # that would not help: the CLI says "run without --sockwait"
