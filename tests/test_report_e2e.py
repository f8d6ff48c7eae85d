"""The anomaly report on real runs: real backends, the real loader, real probes (short cells).

- the test-only `unfair` backend starves its connections → the starvation rule fires;
- an ordinary selector run → none of the rules that describe a defect fires;
- asyncio_sock / uvloop_sock with 1, 4, 8 messages in flight → the register-per-read cost is reported for
  the backend that pays it, and any starvation found comes with the eager-read story when epoll_ctl says so.
"""

from __future__ import annotations

import json

import pytest

from conftest import require_bpf, run_netprof

pytestmark = [pytest.mark.bpf, pytest.mark.slow]

# Rules that report a defect of the backend (cpu_split is informational; loader_bottleneck and
# latency_tail describe the machine and the instrument, which a noisy 2-core box may legitimately show).
DEFECT_RULES = {"starvation", "readiness_churn", "mmap_churn", "lock_contention", "throughput_collapse", "failed_cells"}


def run_json(tmp_path, *args: str, timeout: float = 600) -> dict:
    require_bpf()
    out = tmp_path / "run"
    p = run_netprof("run", *args, "-d", "2", "-r", "1", "--json", "--out", str(out), timeout=timeout)
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


def test_ordinary_run_raises_no_false_alarm(tmp_path):
    summary = run_json(tmp_path, "selector", "-c", "10,100")
    assert len(summary["runs"]) == 2 and all(r["status"] == "ok" for r in summary["runs"])
    false = [a["title"] for a in summary["anomalies"] if a["id"] in DEFECT_RULES]
    assert not false, false


def test_sock_backends_with_pipelining(tmp_path):
    summary = run_json(tmp_path, "asyncio_sock", "uvloop_sock", "-c", "100", "--pipeline", "1,4,8")
    assert len(summary["runs"]) == 6
    by_id = {}
    for a in summary["anomalies"]:
        by_id.setdefault(a["id"], []).append(a)
    # uvloop's sock_recv always registers the reader: about two epoll_ctl per message (seed: uvloop_sock)
    assert any(a["backend"] == "uvloop_sock" for a in by_id.get("readiness_churn", [])), list(by_id)
    for a in by_id.get("starvation", []):
        if a["evidence"].get("epoll_ctl per message the register-per-read model implies"):
            assert "sock_recv" in a["explanation"] and "without yielding" in a["explanation"]
            if a["pipeline"] > 1:
                assert "already waiting" in a["explanation"]
    md = (tmp_path / "run" / "report.md").read_text()
    assert "×4" in md and "×8" in md  # pipeline columns in the tables
