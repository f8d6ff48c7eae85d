"""The anomaly report on real runs: real backends, the real loader, real probes (short cells).

- the test-only `unfair` backend starves its connections → the starvation rule fires;
- an ordinary selector run → none of the rules that describe a defect fires;
- asyncio_sock / uvloop_sock with 1, 4, 8 messages in flight → the register-per-read cost is reported for
  the backend that pays it, and any starvation found comes with the eager-read story when epoll_ctl says so.
"""

from __future__ import annotations

import json
import statistics

import pytest

from helpers import require_bpf, run_netprof

pytestmark = [pytest.mark.bpf, pytest.mark.slow]

# Rules that report a defect of the backend (cpu_split is informational; loader_bottleneck and
# latency_tail describe the machine and the instrument, which a noisy 2-core box may legitimately show).
DEFECT_RULES = {"starvation", "readiness_churn", "mmap_churn", "lock_contention", "throughput_collapse", "failed_cells"}


def run_json(tmp_path, *args: str, timeout: float = 600) -> dict:
    require_bpf()
    out = tmp_path / "run"
    p = run_netprof("run", *args, "-d", "1", "-r", "1", "--json", "--out", str(out), timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    assert (out / "report.md").exists() and (out / "report.html").exists()
    return summary


def test_unfair_backend_is_reported_as_starving(tmp_path):
    summary = run_json(tmp_path, "unfair", "-c", "50")
    starved = [a for a in summary["anomalies"] if a["id"] == "starvation"]
    assert starved, [a["id"] for a in summary["anomalies"]]
    a = starved[0]
    assert (a["backend"], a["connections"], a["severity"]) == ("unfair", 50, "critical")
    assert a["evidence"]["Jain index (1 = fair)"] < 0.5
    assert summary["anomalies"][0]["severity"] == "critical"
    md = (tmp_path / "run" / "report.md").read_text()
    assert "Connection starvation: unfair" in md


def test_ordinary_run_raises_no_false_alarm(standard_run):
    # conftest's shared run: selector (and asyncio_sock, whose read pattern is a real finding) at 10
    # and 100 connections, 2 rounds, probes on
    require_bpf()
    out, summary, _ = standard_run
    rows = [r for r in summary["runs"] if r["backend"] == "selector"]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["probes"] == ["counting"] for r in rows), rows
    assert (out / "report.md").exists() and (out / "report.html").exists()
    false = [a["title"] for a in summary["anomalies"] if a["id"] in DEFECT_RULES and a.get("backend") == "selector"]
    assert not false, false


def test_sock_recv_starvation_reproduced_with_message_framing(message_run):
    """network_ping_test's effect: asyncio_sock reading one message per sock_recv with 8 in flight
    starves most connections (measured here: Jain 0.3-0.5); the same cell with stream framing (one
    64 KiB read drains the queue) and uvloop_sock (its sock_recv always waits on the loop) stay fair.
    Margins: starved below Jain 0.8, fair above 0.9 -- the effect is far larger than the noise.
    20 µs of handler CPU per message keeps the backend the slower side, the condition of the effect: a
    connection keeps the loop only while its queue never drains, and on this host the loader's CPU slows
    in regimes of seconds (bench/host_regimes.py; fresh-clone CI without work: Jain 0.84 and 0.89)."""
    out, summary, _ = message_run  # conftest's shared run: these cells, 5 rounds of 0.4 s
    assert len(summary["runs"]) == 20 and all(r["status"] == "ok" for r in summary["runs"]), summary["runs"]
    rounds: dict = {}
    for r in summary["runs"]:
        rounds.setdefault((r["backend"], r["framing"]), []).append(r)

    def jain(key) -> float:  # the cell's median round
        return statistics.median(r["per_conn"]["jain"] for r in rounds[key])

    # The monopolies break when the loader is descheduled (a busy machine): Jain then varies 0.3-0.8
    # from run to run; the active share stays near 0.9 here, so only Jain is asserted.
    starved = jain(("asyncio_sock", "message"))
    assert starved < 0.8, [r["per_conn"] for r in rounds[("asyncio_sock", "message")]]
    # uvloop's sock_recv always waits on the loop: no connection can keep it, whatever the host does
    for key in (("uvloop_sock", "message"), ("uvloop_sock", "stream")):
        assert jain(key) > 0.9, (key, [r["per_conn"] for r in rounds[key]])
    # asyncio_sock with stream framing drains a connection's queue in one read, so its data is rarely there
    # when it reads again; rarely, not never: on a busy hour the loader can refill one connection's queue as
    # fast as it is read, and that one keeps the loop for a while (5× the median's messages in 2 of 3 rounds
    # once: Jain 0.83 and 0.86). Fair as the starvation rule judges (0.8), and clearly fairer than message framing.
    stream = jain(("asyncio_sock", "stream"))
    assert stream > max(0.8, starved + 0.1), (stream, [r["per_conn"] for r in rounds[("asyncio_sock", "stream")]])
    # one read per message: the framing reached the backend
    # (a round whose counters were read over less than half its probed sub-window has no figure to judge: the
    # host stalled netprof 360 ms past the sub-window's start once, leaving 9 ms of it counted; three of five
    # rounds at least must have one)
    judged = [r for r in rounds[("asyncio_sock", "message")]
              if (r["counted"]["span_s"] or 0) >= 0.5 * r["probed"]["duration_s"]]
    assert len(judged) >= 3, [(r["counted"], r["probed"]) for r in rounds[("asyncio_sock", "message")]]
    for starved in judged:
        assert 0.9 < starved["syscalls_per_msg"]["recvfrom"] < 1.3, (starved["syscalls_per_msg"], starved["counted"])
    fired = [(a["backend"], a["framing"]) for a in summary["anomalies"] if a["id"] == "starvation"]
    assert fired == [("asyncio_sock", "message")], fired
    a = next(a for a in summary["anomalies"] if a["id"] == "starvation")
    assert "sock_recv" in a["explanation"] and "without yielding" in a["explanation"]
    assert "already waiting" in a["explanation"] and "one message" in a["explanation"]
    assert a["evidence"]["Jain index of the same cell with stream framing"] > 0.8
    md = (out / "report.md").read_text()
    assert "Fairness broke in 1 cell" in md and "returned without yielding" in md
    # uvloop's sock_recv always registers the reader: several epoll_ctl per message (network_ping_test: uvloop_sock)
    churn = [a["backend"] for a in summary["anomalies"] if a["id"] == "readiness_churn"]
    assert "uvloop_sock" in churn, churn
