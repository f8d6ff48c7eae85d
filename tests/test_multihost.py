"""--loader-hosts over real OpenSSH, in the lab (scripts/lab.sh: network-namespace hosts with a real sshd
each): the server and its probes here, the loader on a lab host, driven through `netprof agent`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from helpers import another_sessions, default_sigint, machine_lock, netprof_cmd, require, require_bpf, run_netprof

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "scripts" / "lab.sh"


def _lab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LAB), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lab():
    """Three lab hosts (lab1 the server's by the lab's convention, lab2 and lab3 for loaders); the ssh
    config's path; taken down at the end. A lab already up is someone's: the test refuses to touch it."""
    require(os.geteuid() == 0, "root (the lab creates network namespaces)")
    require(os.path.exists("/usr/sbin/sshd"), "Debian's openssh-server (/usr/sbin/sshd)")
    with machine_lock("lab"):  # the machine's one lab: tests/test_lab.py's, in another session, wait for it
        up = _lab("up", "3")
        assert up.returncode == 0, up.stderr + up.stdout  # "exists": `scripts/lab.sh down` first
        try:
            yield up.stdout.strip().splitlines()[-1]
        finally:
            down = _lab("down")
            assert down.returncode == 0, down.stderr


def _far_side_processes() -> list[str]:
    """Agents and loaders still running anywhere on the machine (the lab hosts share its process table), but for
    another test session's (its loaders are its own to check)."""
    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if another_sessions(p):
            continue
        if any(m in cmd for m in ("netprof.profiler agent", "netprof.profiler run", "netprof-loader",
                                  "netprof.backends")) or cmd.startswith("ssh ") and " lab" in cmd:
            left.append(f"{p.pid}: {cmd[:120]}")
    return left


def _gone_soon() -> list[str]:
    deadline = time.monotonic() + 10
    while (left := _far_side_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_loader_on_a_lab_host_counts_one_recv_per_message(lab, tmp_path):
    require_bpf()
    out = tmp_path / "r"
    # counted over the whole window (--probe-share 1): a sub-window's edges are read when netprof hears a remote
    # loader's marks, late (see the --server-host test below). The loader's window is on our clock through the offset
    # measured over ssh (within a fraction of a ms here), so its messages are carried over to the span the counters
    # were read over (cell.CLOCK_TRUSTED_SHARE): without it a fresh-clone run beside the bystander counted 0.918
    # recvfrom and 0.917 sendto per message (2026-12-02)
    res = run_netprof("run", "selector", "-c", "100", "-d", "1", "-r", "1", "--warmup", "0.3", "--probe-share", "1",
                      "--json", "--no-report", "--loader-hosts", "lab2", "--ssh-config", lab, "-o", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads(res.stdout)["runs"][0]
    assert row["status"] == "ok" and row["loader_host"] == "lab2"
    assert row["connected"] == 100 if "connected" in row else row["per_conn"]["idle"] == 0
    assert row["counted"]["span_s"] is not None, row["counted"]
    assert abs(row["syscalls_per_msg"]["recvfrom"] - 1.0) <= 0.05, (row["syscalls_per_msg"], row["counted"])
    link = json.loads((out / "meta.json").read_text())["link"]
    assert link["mode"] == "ssh" and link["server_addr"] == "10.213.0.254"
    (loader,) = link["loaders"]
    assert loader["addr"] == "10.213.0.2" and abs(loader["clock_offset_s"]) <= loader["clock_error_s"] + 1e-3
    assert not _gone_soon()


def test_two_loader_hosts_share_the_connections_and_their_results_merge(lab, tmp_path):
    """The server and its probes on lab1 (--server-host), -c 100 from lab2 and lab3 (50 each): every connection
    connected and served, each host's count merged into the row, and the merged count is the server's own (its
    recvfrom calls, counted by lab1's probes, one per message). The run is lab1's (its backend, its probes,
    lab1's address as the loaders see it); the output, the report and the results directory come back here.
    No throughput ratio against a one-host run: the lab's three namespaces share this host's two CPUs, whose
    speed moved 6× between 1-s runs a minute apart (235k and 39k msgs/s from lab2 alone, 2026-12-02), so such a
    band judged the host; the server's count judges the merge."""
    require_bpf()
    out = tmp_path / "two"
    # counted over the whole 1-s window (--probe-share 1): the counters are read when lab1's netprof hears the
    # loaders' marks over the lab's links, late and not equally at both ends (the messages are carried over to the
    # span read through the clock offsets lab1 measured, where their error and the loaders' skew are within 1% of the
    # window: cell.CLOCK_TRUSTED_SHARE), and over a 0.15-s probed sub-window that put recvfrom at 0.93 per message
    # on a busy host
    res = run_netprof("run", "selector", "-c", "100", "-d", "1", "-r", "1", "--warmup", "0.3", "--probe-share", "1",
                      "--json", "--server-host", "lab1", "--loader-hosts", "lab2,lab3", "--ssh-config", lab,
                      "-o", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    two = doc["runs"][0]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["link"]["server_addr"] == "10.213.0.1"  # lab1, as lab2 and lab3 reach it
    assert (out / "report.html").is_file() and (out / "results.parquet").is_file()
    assert doc["artifacts"]["report_html"] == str(out / "report.html")  # our paths, not lab1's
    assert two["status"] == "ok" and two["connected"] == 100 and two["loader_host"] == "lab2,lab3"
    loaders = two["loaders"]
    assert loaders["hosts"] == "lab2,lab3" and loaders["connections"] == "50,50"
    per_conn = pd.read_parquet(out / "per_conn.parquet")
    assert sorted(per_conn["conn"]) == list(range(100)) and (per_conn["messages"] > 0).all()
    assert two["per_conn"]["idle"] == 0
    # each host's messages add up to the row's, and per connection too; both hosts carried their half
    each = [int(m) for m in str(loaders["messages"]).split(",")]
    assert sum(each) == two["messages"] == per_conn["messages"].sum(), (each, two["messages"])
    assert all(0.25 <= m / two["messages"] <= 0.75 for m in each), each
    # the server's own count of the merged messages: one recvfrom each (lab1's probes)
    assert abs(two["syscalls_per_msg"]["recvfrom"] - 1.0) <= 0.05, (two["syscalls_per_msg"], two.get("counted"))
    assert loaders["window_skew_s"] < 0.02, loaders
    assert not _gone_soon()


def _killed_mid_run(tmp_path, *args: str, gone_within_s: float, sig: int = signal.SIGKILL) -> list[str]:
    """`netprof run selector … ARGS` (a 30-s cell), sent `sig` once its loader runs on a lab host; what is
    still running on the lab hosts after `gone_within_s`."""
    proc = subprocess.Popen(netprof_cmd("run", "selector", "-c", "10", "-d", "30", "-r", "1", "--no-probes", *args,
                                        "-o", str(tmp_path / "r")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("netprof-loader" in p for p in _far_side_processes()):
            time.sleep(0.1)
        assert any("netprof-loader" in p for p in _far_side_processes()), "the loader never started"
        time.sleep(1.0)  # the run is under way
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # where the controller is, for the next reader of a failure (CI's stop 84)
            where = subprocess.run([str(Path(sys.executable).with_name("py-spy")), "dump", "--pid", str(proc.pid)],
                                   capture_output=True, text=True, timeout=60).stdout
            proc.kill()
            pytest.fail(f"the controller still ran 30 s after {signal.Signals(sig).name}:\n{where}\n"
                        f"its stderr: {proc.communicate()[1][-3000:]}")
        deadline = time.monotonic() + gone_within_s
        while (left := _far_side_processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_a_killed_or_interrupted_controller_leaves_nothing_on_the_lab_host(lab, tmp_path, sig):
    left = _killed_mid_run(tmp_path, "--loader-hosts", "lab2", "--ssh-config", lab, gone_within_s=10, sig=sig)
    assert not left, left


def test_a_lost_ssh_connection_ends_the_far_side_and_the_cell_fails(lab, tmp_path):
    """The ssh client to lab2 dies mid-run (the connection is lost; the controller lives): lab2's agent and
    loader end, and the controller's cell fails with the loader gone instead of hanging."""
    out = tmp_path / "r"
    proc = subprocess.Popen(netprof_cmd("run", "selector", "-c", "10", "-d", "30", "-r", "1", "--no-probes",
                                        "--loader-hosts", "lab2", "--ssh-config", lab, "-o", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("netprof-loader" in p for p in _far_side_processes()):
            time.sleep(0.1)
        time.sleep(1.0)
        clients = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[0] == "ssh"
                   and "lab2" in p.info["cmdline"]]
        assert clients, _far_side_processes()
        for c in clients:
            c.kill()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (1, 3), err  # the cell failed (FF), or the run ended on its loader
        assert "Traceback" not in err
    finally:
        proc.kill()
        proc.wait()
    assert not _gone_soon()


def test_unknown_host_and_refused_key_are_one_line_each(lab, tmp_path):
    res = run_netprof("run", "selector", "-c", "10", "-d", "1", "-r", "1", "--no-probes",
                      "--loader-hosts", "lab9", "--ssh-config", lab, "-o", str(tmp_path / "a"))
    assert res.returncode == 2 and "lab9" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    bad = tmp_path / "ssh_config"
    key = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    bad.write_text(Path(lab).read_text().replace("IdentityFile ", f"IdentityFile {key}\n  #"))
    res = run_netprof("run", "selector", "-c", "10", "-d", "1", "-r", "1", "--no-probes",
                      "--loader-hosts", "lab2", "--ssh-config", str(bad), "-o", str(tmp_path / "b"))
    assert res.returncode == 2 and "lab2" in res.stderr and "Permission denied" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not _gone_soon()


def test_an_agent_of_another_version_is_refused(lab, tmp_path):
    """The far side runs the real agent under another version number (what an older install answers)."""
    older = tmp_path / "old-netprof"
    older.write_text("#!/bin/sh\nexec %s -c 'import netprof, sys; netprof.__version__ = \"0.0.1\"; "
                     "from netprof.profiler.run.link import agent; sys.exit(agent.main())'\n"
                     % (ROOT / ".venv/bin/python"))
    older.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    res = run_netprof("run", "selector", "-c", "10", "-d", "1", "-r", "1", "--no-probes",
                      "--loader-hosts", "lab2", "--ssh-config", lab, "--remote-netprof", str(older),
                      "-o", str(tmp_path / "r"))
    assert res.returncode == 2 and "0.0.1" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not _gone_soon()


def test_sigkill_of_the_controller_ends_the_server_hosts_run(lab, tmp_path):
    """The server host's run ends as on Ctrl-C (its cell, its clean-up) once its agent's session ends."""
    left = _killed_mid_run(tmp_path, "--server-host", "lab1", "--loader-hosts", "lab2", "--ssh-config", lab,
                           gone_within_s=30)
    assert not left, left


def test_a_loader_host_whose_clock_is_100_s_ahead_still_starts_its_window_with_the_others(lab, tmp_path):
    """The lab's hosts share one clock, so lab2's agent plays a host whose CLOCK_MONOTONIC is 100 s ahead
    (agent.CLOCK_SHIFT_ENV: its clock replies and the loader's times it relays). The controller must measure
    that offset, ask lab2's loader to start its window at the common instant on lab2's clock, and read its
    times back on its own: the windows then begin together. A controller that ignored the offset would ask
    for a start 100 s away (the cell would stall) or read a 100 s skew."""
    shifted = tmp_path / "shifted-agent"
    shifted.write_text("#!/bin/sh\nif [ \"$(hostname)\" = lab2 ]; then export NETPROF_AGENT_CLOCK_SHIFT_S=100; fi\n"
                       f"exec {ROOT / '.venv/bin/python'} -m netprof.profiler agent\n")
    shifted.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    out = tmp_path / "r"
    res = run_netprof("run", "selector", "-c", "20", "-d", "0.5", "-r", "1", "--warmup", "0.3", "--no-probes",
                      "--no-report", "--json", "--loader-hosts", "lab2,lab3", "--ssh-config", lab,
                      "--remote-netprof", str(shifted), "-o", str(out), timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads(res.stdout)["runs"][0]
    offsets = {x["host"]: x for x in json.loads((out / "meta.json").read_text())["link"]["loaders"]}
    assert abs(offsets["lab2"]["clock_offset_s"] - 100) <= offsets["lab2"]["clock_error_s"] + 1e-3
    assert abs(offsets["lab3"]["clock_offset_s"]) <= offsets["lab3"]["clock_error_s"] + 1e-3
    assert row["status"] == "ok" and row["connected"] == 20
    assert row["loaders"]["window_skew_s"] < 0.02, row["loaders"]


def test_a_server_host_that_cannot_run_probes_is_one_line(lab, tmp_path):
    """lab1's agent runs as `nobody` (a host where netprof cannot load BPF): one line naming the host and
    the way out, exit 2; with --no-probes the same host is fine to ask."""
    unprivileged = tmp_path / "nobody-agent"
    unprivileged.write_text("#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups "
                            f"{ROOT / '.venv/bin/python'} -m netprof.profiler agent\n")
    unprivileged.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    res = run_netprof("run", "selector", "-c", "10", "-d", "1", "-r", "1", "--server-host", "lab1",
                      "--ssh-config", lab, "--remote-netprof", str(unprivileged), "-o", str(tmp_path / "r"))
    assert res.returncode == 2 and "lab1 cannot run the probes" in res.stderr and "--no-probes" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not _gone_soon()


def test_your_own_server_listens_where_the_loader_hosts_reach_it(lab, tmp_path):
    """--cmd with {host} and {port} (uvicorn here) and --loader-hosts lab2: the command is given the address
    lab2 reaches this host by, and the HTTP load from lab2 is served."""
    require_bpf()
    app = tmp_path / "app"
    app.mkdir()
    (app / "asgi.py").write_text(
        "async def app(scope, receive, send):\n"
        "    await send({'type': 'http.response.start', 'status': 200,\n"
        "                'headers': [(b'content-type', b'text/plain'), (b'content-length', b'13')]})\n"
        "    await send({'type': 'http.response.body', 'body': b'Hello, World!'})\n")
    res = run_netprof("run", "--cmd", f"{ROOT / '.venv/bin/python'} -m uvicorn asgi:app --app-dir {app} "
                      "--host {host} --port {port} --loop asyncio --http h11 --no-access-log --log-level warning",
                      "--name", "uvicorn_h11", "--protocol", "http", "--request", "GET /", "-c", "10", "-d", "0.5",
                      "-r", "1", "--warmup", "0.3", "--json", "--loader-hosts", "lab2", "--ssh-config", lab,
                      "-o", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr[-2000:]
    (row,) = json.loads(res.stdout)["runs"]
    assert row["status"] == "ok" and row["server_kind"] == "cmd" and row["messages"] > 100
    assert row["loader_host"] == "lab2" and row["connected"] == 10
    assert json.loads((tmp_path / "r" / "meta.json").read_text())["link"]["server_addr"] == "10.213.0.254"
    assert not _gone_soon()
