"""Profiling servers netprof did not write (issue 17): `--cmd` and `--attach`, on real uvicorn,
gunicorn+gevent and aiohttp processes, over the loader's HTTP/1.1 protocol; and the bad inputs.

Independent truth: the per-request syscall pattern of a keep-alive HTTP server (about one receive and
one send per request, whatever the event loop adds), the status counts the loader parsed, and that
the probes followed gunicorn's two forked workers (without them the counts would be ~0 per request).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import netprof
from helpers import netprof_cli, require_bpf, run_netprof, wait_no_children
from netprof.profiler.core import proc_label
from netprof.profiler.run import servers
from netprof.profiler.watch import target as watch_target

pytestmark = [pytest.mark.slow]
PY = sys.executable
RECV = ("recvfrom", "read", "recvmsg", "readv")
SEND = ("sendto", "write", "sendmsg", "writev")

ASGI_APP = '''
async def app(scope, receive, send):
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")]})
    await send({"type": "http.response.body", "body": b"Hello, World!"})
'''
WSGI_APP = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "13")])
    return [b"Hello, World!"]
'''
AIOHTTP_SERVER = '''
import sys
from aiohttp import web

async def hello(request):
    return web.Response(text="Hello, World!")

app = web.Application()
app.router.add_get("/plaintext", hello)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *a: print("listening", flush=True))
'''


# An echo server that takes one connection every 25 ms, as a loop that accepts one per turn does under load (libuv:
# uvloop, uvicorn): the loader's connections wait in its listen queue until then.
SLOW_ACCEPT_SERVER = '''
import socket, sys, threading, time

def echo(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)

with socket.create_server(("127.0.0.1", int(sys.argv[1])), backlog=1024) as listener:
    print("listening", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()
        time.sleep(0.025)
'''


def app_dir(tmp_path: Path, name: str, text: str) -> Path:
    d = tmp_path / "app"
    d.mkdir(exist_ok=True)
    (d / f"{name}.py").write_text(text)
    return d


def run(tmp_path, *args: str, timeout: float = 300, report: bool = False
        ) -> tuple[subprocess.CompletedProcess, dict | None]:
    p = run_netprof("run", *args, "-r", "1", "--warmup", "0.5", "--wait", "--json", "--out", str(tmp_path / "out"),
                    *(() if report else ("--no-report",)), timeout=timeout)
    try:
        return p, json.loads(p.stdout)
    except ValueError:
        return p, None


def per_request(row: dict, names: tuple[str, ...]) -> float:
    return sum(v for k, v in (row.get("syscalls_per_msg") or {}).items() if k in names)


def test_cmd_uvicorn_asgi_http(tmp_path):
    require_bpf()
    d = app_dir(tmp_path, "asgi", ASGI_APP)
    p, summary = run(tmp_path, "--cmd", f"{PY} -m uvicorn asgi:app --app-dir {d} --port {{port}} --loop asyncio "
                     "--http h11 --no-access-log --log-level warning", "--name", "uvicorn_h11",
                     "--protocol", "http", "--request", "GET /plaintext", "-c", "10", "-d", "1", report=True)
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = summary["runs"]
    assert (row["backend"], row["server_kind"], row["protocol"], row["status"]) == ("uvicorn_h11", "cmd", "http", "ok")
    assert row["messages"] > 100
    assert 0.8 <= per_request(row, RECV) <= 3 and 0.8 <= per_request(row, SEND) <= 3, row["syscalls_per_msg"]
    assert (tmp_path / "out" / "report.html").exists()
    report = (tmp_path / "out" / "report.md").read_text()
    built = f"netprof {netprof.__version__} ({netprof.__source__})"
    assert f"| interpreter(s) | the --cmd server's own ({built} on Python" in report
    assert not wait_no_children()


def test_cmd_gunicorn_two_gevent_workers_are_followed(tmp_path):
    require_bpf()
    d = app_dir(tmp_path, "wsgi", WSGI_APP)
    p, summary = run(tmp_path, "--cmd", f"{PY} -m gunicorn -k gevent -w 2 -b 127.0.0.1:{{port}} --chdir {d} "
                     "--log-level warning wsgi:app", "--name", "gunicorn_gevent", "--protocol", "http",
                     "-c", "20", "-d", "1")
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = summary["runs"]
    assert row["status"] == "ok" and row["messages"] > 100
    # The workers do the serving: counts near one receive and one send per request prove the probes
    # follow the forked tree (the master alone makes ~0 per request).
    assert 0.8 <= per_request(row, RECV) <= 3 and 0.8 <= per_request(row, SEND) <= 3, row["syscalls_per_msg"]
    assert not wait_no_children()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_attach_to_a_running_aiohttp_server(tmp_path):
    require_bpf()
    port = free_port()
    script = tmp_path / "srv.py"
    script.write_text(AIOHTTP_SERVER)
    srv = subprocess.Popen([PY, str(script), str(port)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert srv.stdout.readline().startswith("listening")
        # no --target: the one loopback port the process listens on
        p, summary = run(tmp_path, "--attach", str(srv.pid), "--protocol", "http",
                         "--request", "GET /plaintext", "-c", "10", "-d", "1")
        assert p.returncode == 0, p.stderr[-2000:]
        (row,) = summary["runs"]
        assert (row["server_kind"], row["status"]) == ("attach", "ok") and row["messages"] > 100
        assert row["backend"] == "srv.py", "no --name: labelled by the script its interpreter runs"
        assert row["accept_queue_at_start"] == 0, "aiohttp accepted every connection in the warm-up"
        assert 0.8 <= per_request(row, RECV) <= 3 and 0.8 <= per_request(row, SEND) <= 3, row["syscalls_per_msg"]
        assert srv.poll() is None, "netprof must not stop a server it attached to"
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def test_warmup_after_served_begins_the_load_once_the_server_has_every_connection(tmp_path):
    """--warmup-after served (PROTOCOL.md, "Warm-up after"): the loader's warm-up begins once every connection has had
    its first request answered. Independent truth: the server's listen queue, read from /proc/PID/net/tcp when the
    window opens (accept_queue_at_start), against the same server without it; and the server's own pace: 100
    connections accepted 25 ms apart take 2.475 s, all inside the loader's setup. (Without it the window opens 0.5 s
    after the connections: only a host that stalls the loader for 2 s in between could see them all accepted.)"""
    script = tmp_path / "slow_accept.py"
    script.write_text(SLOW_ACCEPT_SERVER)
    rows = {}
    for after in ("connected", "served"):
        p, summary = run(tmp_path / after, "--cmd", f"{PY} {script} {{port}}", "--ready-regex", "listening",
                         "-c", "100", "-d", "0.5", "--no-probes", "--warmup-after", after)
        assert p.returncode == 0, p.stderr[-2000:]
        (rows[after],) = summary["runs"]
        assert rows[after]["status"] == "ok" and rows[after]["warmup_after"] == after
    connected, served = rows["connected"], rows["served"]
    assert connected["accept_queue_at_start"] > 0 and connected.get("served_first") is None  # the control
    assert served["accept_queue_at_start"] == 0, served
    assert served["served_first"]["served"] == 100 and served["served_first"]["unserved"] == 0
    assert served["setup_s"] >= 2.4 and served["served_first"]["s"] <= served["setup_s"]
    assert served["per_conn"]["idle"] == 0 and served["messages"] > 100
    assert not wait_no_children()


@pytest.mark.parametrize("cmd, label", [
    ("python -m uvicorn app:app --port {port}", "uvicorn"),
    ("python3.13t -u -X dev -m granian --interface asgi app:app", "granian"),
    ("python -uOm aiohttp.web -P {port} app:make", "aiohttp.web"),
    ("python old/app.py --port {port}", "old_app.py"),
    ("./venv/bin/python -W ignore ./app.py {port}", "app.py"),
    ("/usr/bin/python3 -- /srv/new/app.py {port}", "app.py"),
    ("pypy3 -c 'import app' {port}", "pypy3"),
    ("gunicorn -k gevent -b 127.0.0.1:{port} app:app", "gunicorn"),
    ("'/opt/my server/bin/serve' {port}", "serve"),
    ("gunicorn: master [wsgi:app]", "gunicorn"),  # --attach: the title a server gave itself (setproctitle)
    ("uv run uvicorn app:app --port {port}", "uvicorn"),  # what only starts the server is not its name
    ("env FOO=1 python -m granian app:app", "granian"),
    ("sh -c 'exec python -m uvicorn app:app --port {port}'", "uvicorn"),
    ("sh -c 'cd srv && exec uvicorn app:app'", "sh"),  # a script: the shell's
    ("python -m netprof.backends http_asyncio --host 127.0.0.1 --port 0", "http_asyncio"),  # a built-in, attached
    ("python -m netprof.backends --help", "netprof.backends"),
])
def test_a_server_without_name_is_labelled_by_what_it_runs(cmd, label):
    """Two servers of one interpreter are told apart without --name (and not refused as sharing one)."""
    assert proc_label.label(shlex.split(cmd)) == label


def test_a_module_not_found_by_a_command_run_as_root_names_pythonsafepath_and_the_fix():
    """Run as root, a --cmd gets PYTHONSAFEPATH=1 (root imports nothing from a directory another user may write):
    `python srv.py` importing `app` beside it fails, and the failure says why and how to give the path."""
    tail = "File \"/srv/srv.py\", line 2 | from app import app | ModuleNotFoundError: No module named 'app'"
    assert "--env PYTHONPATH=DIR" in servers._safe_path_hint(tail, None, ())
    assert servers._safe_path_hint(tail, 1000, ()) == ""  # as the sudo caller: no PYTHONSAFEPATH, another cause
    assert servers._safe_path_hint(tail, None, (("PYTHONPATH", "/srv"),)) == ""  # given: another cause
    assert servers._safe_path_hint("SyntaxError: invalid syntax", None, ()) == ""


# Input netprof can judge before it starts anything: one line, exit 2, no run (the fast tier runs these).
@pytest.mark.parametrize("args, needle", [
    (["--cmd", "true {port}", "--ready-timeout", "0"], "--ready-timeout 0: give seconds between 0.1 and 3600"),
    (["--cmd", f"{PY} -m http.server --bind 127.0.0.1 1"], "has no {port}"),
    (["--attach", "99999999", "--target", "127.0.0.1:9"], "no such process"),
    (["selector", "--protocol", "http"], "needs your own server"),
    (["--cmd", "true {port}", "--protocol", "gopher"], "--protocol 'gopher' is not known"),
])
def test_bad_own_server_input_is_one_line_exit_2(tmp_path, args, needle):
    p = netprof_cli("run", *args, "-c", "2", "-d", "0.5", "--no-probes", "--out", str(tmp_path / "out"))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "out").exists(), "nothing may start on bad input"


# A process listening on `sys.argv[1:]` (ports), or on none.
LISTENER = """
import socket, sys, time
held = []
for port in sys.argv[1:]:
    s = socket.create_server(("127.0.0.1", int(port)))
    held.append(s)
print("listening", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("ports, parent, needle", [
    (0, False, "that process listens on no loopback TCP port itself; give --target HOST:PORT"),
    (2, False, "listens on 127.0.0.1:{0} and 127.0.0.1:{1}: give --target HOST:PORT, the one to load"),
    # its own sockets only: this test's process, whose child listens (every process descends from pid 1)
    (1, True, "that process listens on no loopback TCP port itself; give --target HOST:PORT"),
])
def test_attach_without_target_needs_one_listening_port(tmp_path, ports, parent, needle):
    """--attach without --target loads where the process listens on loopback; with no such port, or two, it asks
    which (one line, exit 2, nothing started)."""
    chosen = sorted(free_port() for _ in range(ports))
    script = tmp_path / "listen.py"
    script.write_text(LISTENER)
    proc = subprocess.Popen([PY, str(script), *map(str, chosen)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout.readline().startswith("listening")
        p = netprof_cli("run", "--attach", str(os.getpid() if parent else proc.pid), "-c", "2", "-d", "0.5",
                        "--no-probes", "--out", str(tmp_path / "out"))
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and needle.format(*chosen) in lines[0], p.stderr
        assert not (tmp_path / "out").exists(), "nothing may start on bad input"
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_accept_queue_counts_connections_the_server_has_not_accepted(tmp_path):
    """servers.accept_queue reads a listening socket's accept queue from /proc/PID/net/tcp: a listener that never
    accepts holds every connection the clients made (they are connected on their side); none for another port or a
    process that is gone. The row's accept_queue_at_start is this read when the window opens; netprof watch's
    accept_queue (each window, the gauge netprof_accept_queue) sums it over the ports the tree listens on."""
    port = free_port()
    script = tmp_path / "listen.py"
    script.write_text(LISTENER)
    proc = subprocess.Popen([PY, str(script), str(port)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    clients = []
    try:
        assert proc.stdout.readline().startswith("listening")
        assert servers.accept_queue(proc.pid, [port]) == 0
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(5)]
        assert servers.accept_queue(proc.pid, [port]) == 5
        assert servers.accept_queue(proc.pid, [free_port()]) is None
        # netprof watch's gauge: over the ports the tree listens on (the probes' `ports`), None when none is read
        t = watch_target.by_pid(proc.pid)
        assert watch_target.accept_queue(t, frozenset({port})) == 5
        assert watch_target.accept_queue(t, frozenset()) is None
    finally:
        for c in clients:
            c.close()
        proc.terminate()
        proc.wait(timeout=10)
    assert servers.accept_queue(proc.pid, [port]) is None


# A server that exits or never listens is known only once it was started: like a backend that dies, a
# failed (FF) row naming the cause, the run goes on to its other cells, exit 1.
@pytest.mark.concurrent  # a failed row and its cause; waits out timers, measures nothing (its run passes --wait)
@pytest.mark.parametrize("args, needle", [
    (["--cmd", "true {port}"], "exited with code 0 before it was ready"),
    (["--cmd", f"{PY} -c 'import time; time.sleep(60)' {{port}}", "--ready-timeout", "1"],
     "within 1 s: does it listen"),
])
def test_own_server_that_does_not_start_is_a_failed_row(tmp_path, args, needle):
    p, summary = run(tmp_path, *args, "-c", "2", "-d", "0.5", "--no-probes", timeout=120)
    assert p.returncode == 1, p.stderr
    assert summary is not None, p.stdout[-2000:]
    (row,) = summary["runs"]
    assert row["status"] == "failed" and needle in row["error"], row["error"]
    assert "Traceback" not in p.stderr
    assert not wait_no_children()


# Another local user (nobody) who watches /proc for a --cmd's command line and binds its port first: it prints
# "connections bytes" each time it accepts one, until killed.
THIEF = r"""
import os, socket, sys, time
marker = sys.argv[1]
os.setgid(65534); os.setuid(65534)
deadline, port = time.monotonic() + 60, None
while port is None and time.monotonic() < deadline:
    for pid in os.listdir("/proc"):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in a for a in args) and args[-2:] and args[-2].isdigit():
            port = int(args[-2])
            break
    time.sleep(0.005)
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen(128)
s.settimeout(0.2)
conns, got = 0, 0
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    conns += 1
    c.settimeout(0.2)
    try:
        got += len(c.recv(65536))
    except OSError:
        pass
    print(conns, got, flush=True)
"""


@pytest.mark.concurrent  # a failed row and its cause; waits out timers, measures nothing (its run passes --wait)
def test_cmd_whose_port_another_user_binds_first_receives_nothing(tmp_path):
    """Issue 52, finding 1: the {port} of a --cmd is on its command line, which every local user can read; a user
    who binds it before the server (a Python server takes a moment to start) used to count as the server being
    ready and got the loader's requests, headers and secrets included. Ready now means the command's own
    processes listen there: the cell fails, naming the other process, and nothing reaches it."""
    marker = f"npthief{tmp_path.name}"
    thief = subprocess.Popen([PY, "-I", "-c", THIEF, marker], stdout=subprocess.PIPE, text=True)
    try:
        # $0 is the marker, $1 the port: the server binds it only after a second and a half
        p, summary = run(tmp_path, "--cmd", f"sh -c 'sleep 1.5; exec {PY} -m http.server --bind 127.0.0.1 $1' "
                         f"{marker} {{port}}", "--protocol", "http", "--header", "Authorization: Bearer s3cret",
                         "-c", "2", "-d", "0.5", "--ready-timeout", "10", "--no-probes", timeout=120)
    finally:
        thief.kill()
        stolen = thief.communicate()[0]
    assert p.returncode == 1, p.stderr
    (row,) = summary["runs"]
    assert "is held by another process" in row["error"] and "uid 65534" in row["error"], row["error"]
    assert stolen == "", f"the other user accepted connections (connections, bytes): {stolen}"
    assert not wait_no_children()


@pytest.mark.concurrent  # a failed row and its cause; waits out timers, measures nothing (its run passes --wait)
def test_cmd_on_another_port_is_an_ff_cell_with_the_cause(tmp_path):
    other = free_port()  # the command listens here, not on the {port} netprof gave it ($0 of sh -c)
    p, summary = run(tmp_path, "--cmd", f"sh -c 'exec {PY} -m http.server --bind 127.0.0.1 {other}' {{port}}",
                     "-c", "2", "-d", "0.5", "--ready-timeout", "3", "--no-probes", timeout=120)
    assert p.returncode == 1, p.stderr
    (row,) = summary["runs"]
    assert "did not become ready on port" in row["error"], row["error"]
    assert not wait_no_children()
