"""`netprof run` end to end: real backends, the real loader, real probes; results on disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pandas as pd
import psutil
import pytest

import netprof
from helpers import default_sigint, netprof_children, netprof_cmd, require_bpf, run_netprof, wait_no_children


def test_run_json_summary_rows_and_files(standard_run, tmp_path):
    """The issue's acceptance run: 2 backends × 2 connection counts × 2 rounds = 8 rows (conftest's
    shared run: `netprof run selector asyncio_sock -c 10,100 -r 2 --json ...`)."""
    require_bpf()
    out, summary, left = standard_run  # its stdout parsed as JSON: the summary and nothing else
    assert set(summary) >= {"runs", "anomalies", "artifacts"}
    runs = summary["runs"]
    assert len(runs) == 8
    for r in runs:
        assert r["status"] == "ok", r
        assert r["messages"] > 0
        assert r["messages"] == pytest.approx(r["msgs_per_sec"] * r["duration_s"], rel=0.01)
        for key in ("backend", "connections", "pipeline", "round", "lat_us", "per_conn", "cpu",
                    "syscalls_per_msg", "ctx_switches_per_msg", "probes"):
            assert key in r, key
        assert set(r["lat_us"]) >= {"p50", "p95", "p99", "p999", "max"}
        assert set(r["per_conn"]) >= {"min", "p5", "p50", "p95", "max", "jain", "active_share"}
        assert set(r["cpu"]) >= {"user_s", "sys_s", "user_frac"}
        assert r["probes"] == ["counting"]
        assert r["syscalls_per_msg"].get("recvfrom", 0) > 0.5
    parquet = pd.read_parquet(out / "results.parquet")
    csv = pd.read_csv(out / "results.csv")
    assert len(parquet) == len(csv) == 8
    assert list(parquet["messages"]) == list(csv["messages"]) == [r["messages"] for r in runs]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["kernel"] and meta["python"]["version"] and "uvloop" in meta["packages"]
    assert meta["netprof_source"] == netprof.__source__ != "unknown"  # the build, named (make setup builds from git)
    assert f"netprof {meta['netprof_version']} ({meta['netprof_source']}) on Python" in (out / "report.md").read_text()
    # `netprof report DIR` rebuilds the report from the stored rows without re-running (on a copy: the
    # shared run's files stay as the run wrote them)
    mine = tmp_path / "run"
    shutil.copytree(out, mine)
    (mine / "report.md").unlink()
    rep = run_netprof("report", str(mine), "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert (mine / "report.md").exists()
    assert json.loads(rep.stdout)["runs"] == runs
    assert not left


def _find_backend(timeout: float = 240.0) -> psutil.Process:  # --wait: behind other tests' runs
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in netprof_children():
            if "netprof.backends" in " ".join(p.cmdline()):
                return p
        time.sleep(0.1)
    raise AssertionError("backend never started")


# Exit codes, rows and files, no figure judged: beside other tests in the first pass (--wait: behind other runs).
@pytest.mark.concurrent
def test_killed_backend_is_a_failed_row_and_the_run_goes_on(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(netprof_cmd("run", "selector", "-c", "10", "-d", "2", "-r", "2", "--warmup", "0.3",
                                        "--no-probes", "--no-report", "--wait", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    backend = _find_backend()
    time.sleep(1.0)  # mid-run: after warm-up, inside the window
    backend.kill()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 2
    first, second = df.iloc[0], df.iloc[1]
    assert first["status"] == "failed" and "code -9" in first["error"], first["error"]
    assert second["status"] == "ok"
    assert not wait_no_children()


# Exit codes, rows and files, no figure judged: beside other tests in the first pass (--wait: behind other runs).
@pytest.mark.concurrent
def test_sigint_keeps_finished_cells_and_leaves_nothing(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(netprof_cmd("run", "selector", "-c", "10", "-d", "1", "-r", "6", "--warmup", "0.2",
                                        "--no-probes", "--wait", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 240  # --wait: behind other tests' runs
    while time.monotonic() < deadline:
        if (out / "results.parquet").exists() and len(pd.read_parquet(out / "results.parquet")) >= 1:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    df = pd.read_parquet(out / "results.parquet")
    assert 1 <= len(df) < 6
    assert (df["status"] == "ok").all()
    assert not wait_no_children()


# Exit codes, rows and files, no figure judged: beside other tests in the first pass (--wait: behind other runs).
@pytest.mark.concurrent
def test_pin_both_runs_every_cell_pinned_and_unpinned(tmp_path):
    """--pin both: each cell twice, its backend on --backend-cpu and then free (checked on the live
    processes' CPU affinity), rows and labels say which; --pin nonsense is one line, exit 2."""
    out = tmp_path / "run"
    proc = subprocess.Popen(netprof_cmd("run", "thread", "--pin", "both", "-c", "10", "-d", "1", "-r", "1",
                                        "--warmup", "0.3", "--no-probes", "--wait", "--json", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    affinities, deadline = set(), time.monotonic() + 240  # --wait: behind other tests' runs
    while proc.poll() is None and time.monotonic() < deadline:
        for p in netprof_children():
            try:
                if "netprof.backends" in " ".join(p.cmdline()):
                    affinities.add(tuple(p.cpu_affinity()))
            except psutil.Error:
                pass
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-2000:]
    rows = json.loads(stdout)["runs"]
    assert sorted(r["pinned"] for r in rows) == [False, True]
    assert all(r["status"] == "ok" for r in rows)
    every_cpu = tuple(sorted(os.sched_getaffinity(0)))  # an unpinned backend inherits netprof's
    assert affinities == {(0,), every_cpu}, affinities
    assert "not pinned" in (out / "report.md").read_text()
    bad = run_netprof("run", "thread", "--pin", "sometimes", "-c", "10", "--wait", timeout=60)
    assert bad.returncode == 2 and "--pin 'sometimes'" in bad.stderr and "Traceback" not in bad.stderr
    assert not wait_no_children()
