"""The children netprof starts for the user (issue 31, items 4, 6, 7, 8 and 1's stderr part): a `--cmd`
run through sudo gets the invoking user's environment (and `--env`), not root's; `--ready-regex` gives
a quiet server its whole `--ready-timeout` and waits for the port after the match; a child's stderr is
a capped pipe, never a file in a directory someone else controls; `--attach` re-checks per cell that
the same process (its start time) still listens.

Every test starts real processes: a second local user (`local_user`) and netprof itself as root with
the environment `sudo -E` would leave it."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from helpers import netprof_cmd, wait_no_children
from netprof.profiler.core import procs
from netprof.profiler.core.errors import InputError
from netprof.profiler.run import servers

pytestmark = pytest.mark.concurrent  # children's environment, output and exits; runs pass --wait

# The PATH the user had when typing `sudo -E netprof ...` (the last entry exists nowhere: a marker).
CALLER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/np-caller-marker/bin"
# --no-report: these check the child and the JSON summary, not the pages (~0.9 s of CPU each, issue 49)
SHORT = ("-c", "2", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes", "--wait", "--json", "--no-report")

# The user's app: imports a module beside it (a script's directory is on its own sys.path unless
# PYTHONSAFEPATH), records its environment, then echoes on --port.
APP = textwrap.dedent('''
    import json, os, socketserver, sys
    try:
        import helper
        imported = helper.VALUE
    except ImportError:
        imported = None
    port = int(sys.argv[sys.argv.index("--port") + 1])
    dump = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"env-{os.getuid()}.json")
    with open(dump, "w") as f:
        json.dump({"env": dict(os.environ), "uid": os.getuid(), "helper": imported}, f)

    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            while data := self.request.recv(65536):
                self.request.sendall(data)

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    socketserver.ThreadingTCPServer(("127.0.0.1", port), Echo).serve_forever()
''')

# An echo server on argv[1] with knobs: seconds before the ready line, seconds between it and
# listening, bytes of stderr first; on a "close" line on stdin it stops listening (keeps its process).
SERVER = textwrap.dedent('''
    import os, socket, sys, threading, time
    port, before, after, noise = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    chunk = b"e" * 65535 + b"\\n"
    for _ in range(noise // len(chunk)):
        os.write(2, chunk)
    os.write(2, b"the last stderr line\\n")
    time.sleep(before)
    print("server READY", flush=True)
    time.sleep(after)
    lsock = socket.create_server(("127.0.0.1", port))
    print("listening", flush=True)

    def echo(c):
        while data := c.recv(65536):
            c.sendall(data)

    def accept():
        try:
            while True:
                threading.Thread(target=echo, args=(lsock.accept()[0],), daemon=True).start()
        except OSError:
            pass  # closed

    threading.Thread(target=accept, daemon=True).start()
    for line in sys.stdin:
        if line.strip() == "close":
            lsock.close()
            print("closed", flush=True)
    time.sleep(3600)
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sudo_caller_env(user) -> dict[str, str]:
    """What `sudo -E netprof` leaves: the caller's variables (PATH among them), HOME and SUDO_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_") and k != "PYTHONSAFEPATH"}
    return env | user.sudo_env() | {"PATH": CALLER_PATH}


def _own(path: Path, user, mode: int = 0o644) -> Path:
    os.chown(path, user.uid, user.gid)
    os.chmod(path, mode)
    return path


def _user_app(user) -> Path:
    home = Path(user.home)
    (home / "helper.py").write_text("VALUE = 'beside app.py'\n")
    (home / "app.py").write_text(APP)
    for name in ("helper.py", "app.py"):
        _own(home / name, user)
    return home


def _netprof(tmp_path: Path, *args: str, env: dict[str, str] | None = None, cwd: str | None = None,
             timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict | None]:
    p = subprocess.run(netprof_cmd("run", *args, *SHORT, "--out", str(tmp_path / "out")), capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=cwd)
    try:
        return p, json.loads(p.stdout)
    except ValueError:
        return p, None


def _one_row(p: subprocess.CompletedProcess, summary: dict | None) -> dict:
    assert summary is not None, (p.returncode, p.stderr[-2000:])
    (row,) = summary["runs"]
    return row


# ------------------------------------------------------------------------------------------------
# Item 4: the --cmd child's environment


def test_cmd_child_run_through_sudo_gets_the_users_environment(tmp_path, local_user):
    """`sudo -E netprof run --cmd 'python3 app.py --port {port}' --env FOO=bar` from the user's home:
    the child runs as the user with the user's HOME/USER/LOGNAME/SHELL (from the password database,
    not the HOME sudo left), the caller's PATH, no SUDO_*, no forced PYTHONSAFEPATH (so app.py imports
    helper.py beside it), and FOO=bar."""
    home = _user_app(local_user)
    # A HOME other than the user's: the child's must come from the password database, not from here.
    # XDG_CONFIG_HOME: the caller's own, which netprof (root) drops for itself but the user's child keeps.
    env = _sudo_caller_env(local_user) | {"HOME": "/nonexistent-home-from-the-caller",
                                          "XDG_CONFIG_HOME": f"{local_user.home}/.config"}
    env.pop("MPLCONFIGDIR", None)
    p, summary = _netprof(tmp_path, "--cmd", "python3 app.py --port {port}", "--name", "app", "--env", "FOO=bar",
                          env=env, cwd=str(home))
    assert p.returncode == 0, p.stderr[-2000:]
    assert _one_row(p, summary)["status"] == "ok"
    dump = json.loads((home / f"env-{local_user.uid}.json").read_text())
    child = dump["env"]
    assert dump["uid"] == local_user.uid
    assert (child["HOME"], child["USER"], child["LOGNAME"], child["SHELL"]) == (
        local_user.home, local_user.name, local_user.name, "/bin/sh")
    assert child["PATH"] == CALLER_PATH
    assert not [k for k in child if k.startswith("SUDO_")], child
    assert "PYTHONSAFEPATH" not in child
    assert child["FOO"] == "bar"
    assert child["XDG_CONFIG_HOME"] == f"{local_user.home}/.config"
    assert "MPLCONFIGDIR" not in child, "the user's child got root's matplotlib directory"
    assert dump["helper"] == "beside app.py"
    assert not wait_no_children()


def test_cmd_child_as_root_keeps_the_house_rule(tmp_path, local_user):
    """--as-root: the same app in the user's home runs as root with PYTHONSAFEPATH=1, so the helper.py
    the user put beside it is not imported by root; --env still applies."""
    home = _user_app(local_user)
    p, summary = _netprof(tmp_path, "--cmd", f"{sys.executable} app.py --port {{port}}", "--as-root",
                          "--env", "FOO=bar", env=_sudo_caller_env(local_user), cwd=str(home))
    assert p.returncode == 0, p.stderr[-2000:]
    dump = json.loads((home / "env-0.json").read_text())
    assert dump["uid"] == 0 and dump["env"]["PYTHONSAFEPATH"] == "1" and dump["env"]["FOO"] == "bar"
    assert dump["helper"] is None, "root imported a module from the user's directory"
    assert not [k for k in dump["env"] if k.startswith("SUDO_")]


def test_program_not_on_the_childs_path_is_one_line_naming_env_path(tmp_path, local_user):
    """The user's ~/bin/serve is not on the PATH the child gets: exit 2 before any cell runs (the
    command cannot start in any cell, so it is bad input, not a failed cell), one line suggesting a
    full path or --env PATH=; with --env PATH=~/bin:... the same command runs."""
    home = _user_app(local_user)
    bindir = home / "bin"
    bindir.mkdir()
    _own(bindir, local_user, 0o755)
    (bindir / "serve").write_text(f'#!/bin/sh\nexec python3 "{home}/app.py" "$@"\n')
    _own(bindir / "serve", local_user, 0o755)
    env = _sudo_caller_env(local_user)
    p, _ = _netprof(tmp_path, "--cmd", "serve --port {port}", env=env, cwd=str(home))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "--env PATH=" in lines[0] and "secure_path" in lines[0] and "full path" in lines[0], lines[0]
    p, summary = _netprof(tmp_path, "--cmd", "serve --port {port}", "--env", f"PATH={bindir}:/usr/bin:/bin",
                          "--force", env=env, cwd=str(home))
    assert p.returncode == 0, p.stderr[-2000:]
    assert _one_row(p, summary)["status"] == "ok"


@pytest.mark.parametrize("value", ["FOO", "1FOO=x", "FO-O=x", "=x"])
def test_bad_env_is_one_line_exit_2(tmp_path, value):
    p, _ = _netprof(tmp_path, "--cmd", "true {port}", "--env", value, timeout=60)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "--env" in lines[0] and "NAME=VALUE" in lines[0], p.stderr
    with pytest.raises(InputError):
        servers.parse_env([value])


# ------------------------------------------------------------------------------------------------
# Item 6: --ready-regex


@pytest.mark.parametrize("before, after", [(1.0, 0.0), (0.0, 0.5)],
                         ids=["quiet-1s-before-ready", "ready-before-listen"])
def test_ready_regex_waits_for_the_line_and_then_the_port(tmp_path, local_user, before, after):
    """The user's server (run through sudo, as the user) quiet for 1 s before its ready line, and one
    that prints it 0.5 s before it listens: both get --ready-timeout (here 10 s) and their cell succeeds
    (a quiet server failed at once: a 0.2 s read timeout was taken for a failure)."""
    script = Path(local_user.home) / "srv.py"
    script.write_text(SERVER)
    _own(script, local_user)
    p, summary = _netprof(tmp_path, "--cmd", f"{sys.executable} srv.py {{port}} {before} {after} 0",
                          "--ready-regex", "READY$", "--ready-timeout", "10", env=_sudo_caller_env(local_user),
                          cwd=local_user.home)
    row = _one_row(p, summary)
    assert p.returncode == 0 and row["status"] == "ok", row["error"]


def test_readline_buffer_is_bounded():
    """A child writing 8 MiB with no newline before its ready line: netprof never buffers more than
    LINE_CAP of it (the line comes cut), and the ready line still arrives."""
    code = "import os; os.write(1, b'x' * (8 << 20)); os.write(1, b'READY\\n'); import time; time.sleep(30)"
    proc = procs.spawn("longline", [sys.executable, "-c", code])
    try:
        longest = 0
        while True:
            line = proc.readline(30)
            assert line is not None
            longest = max(longest, len(line), len(proc._buf))
            if line.endswith("READY"):
                break
        assert longest <= procs.LINE_CAP
    finally:
        proc.discard()


# ------------------------------------------------------------------------------------------------
# Item 7 and 1 (stderr part): a child's stderr is a capped pipe


def _stderr_files(pid: int) -> list[str]:
    tmp = tempfile.gettempdir()
    return [n for n in os.listdir(tmp) if n.startswith(f"netprof-{pid}-") and n.endswith(".stderr")]


def test_fifty_megabytes_of_stderr_take_no_disk_and_little_memory(local_user):
    """The user's hostile server (run as that user, as --cmd runs it under sudo) writes 50 MB to stderr
    before it serves: it is not stalled (netprof drains the pipe), no file grows on disk, netprof's
    memory grows by far less than 50 MB, and the tail is there."""
    script = Path(local_user.home) / "srv.py"
    script.write_text(SERVER)
    _own(script, local_user)
    port = _free_port()
    me = psutil.Process()
    rss_before = me.memory_info().rss
    proc = procs.spawn("noisy", [sys.executable, str(script), str(port), "0", "0", str(50 << 20)],
                       user=local_user.uid, group=local_user.gid)
    try:
        assert proc.wait_line("listening", 60)
        assert not _stderr_files(os.getpid())
        # stdout and stderr are two pipes: "listening" can arrive before the drain has read the end of 50 MB of
        # stderr (fresh-clone run of 2026-12-02, four tests at a time beside the bystander): wait for the tail
        deadline = time.monotonic() + 20
        while "the last stderr line" not in proc.stderr_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "the last stderr line" in proc.stderr_tail()
        grown = me.memory_info().rss - rss_before
        assert grown < 16 << 20, f"netprof grew {grown >> 10} KiB reading 50 MB of stderr"
        assert proc.stderr_bytes() <= procs.STDERR_CAP
    finally:
        rc, tail = proc.discard()
    assert "the last stderr line" in tail


def test_stderr_tail_is_not_read_through_a_link_in_a_users_tmpdir(tmp_path, local_user, monkeypatch):
    """TMPDIR owned by the user (sudo -E keeps it): while a child runs, the user replaces whatever
    netprof-*.stderr is there with a link to a root-only file. Its content must not reach
    stderr_tail() (the report): there is no stderr file to swap at all."""
    tmpdir = Path(local_user.home) / "tmp"
    assert local_user.run(["mkdir", str(tmpdir)]).returncode == 0
    secret = tmp_path / "root-secret"
    secret.write_text("ROOT-ONLY-SECRET\n")
    secret.chmod(0o600)
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))  # what TMPDIR=~/tmp makes gettempdir() say
    proc = procs.spawn("victim", [sys.executable, "-c", "import sys, time; print('up', flush=True); "
                                  "sys.stderr.write('child says hi\\n'); time.sleep(30)"])
    try:
        assert proc.readline(30) == "up"
        swap = local_user.run(["sh", "-c", f'n=0; for f in {tmpdir}/netprof-*.stderr; do [ -e "$f" ] || continue; '
                               f'rm -f "$f" && ln -s {secret} "$f" && n=$((n+1)); done; echo $n'])
        assert swap.returncode == 0, swap.stderr
        assert swap.stdout.strip() == "0", "a stderr file was there for the user to swap"
        assert not os.listdir(tmpdir)
        deadline = time.monotonic() + 10
        while "child says hi" not in proc.stderr_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "child says hi" in proc.stderr_tail() and "ROOT-ONLY-SECRET" not in proc.stderr_tail()
    finally:
        proc.discard()


def test_a_child_blocked_on_stderr_never_stalls_and_its_reader_ends():
    """A child writing stderr forever (it would fill a pipe nobody read): it is stopped at once, and
    the reader thread ends with the pipe."""
    proc = procs.spawn("flood", [sys.executable, "-c", "import os\nwhile True: os.write(2, b'z' * 65536)"],
                       capture_stdout=False)
    time.sleep(0.5)
    t0 = time.monotonic()
    rc, tail = proc.discard()
    assert time.monotonic() - t0 < 5 and rc == -signal.SIGTERM and tail.startswith("z")
    proc._stderr.thread.join(5)
    assert not proc._stderr.thread.is_alive()


# ------------------------------------------------------------------------------------------------
# Item 8: --attach re-checks per cell that the same process still listens


def _server(user, port: int) -> subprocess.Popen:
    """The user's own server (a process of theirs, which they can stop and replace at will)."""
    script = Path(user.home) / "srv.py"
    script.write_text(SERVER)
    _own(script, user)
    srv = subprocess.Popen([sys.executable, str(script), str(port), "0", "0", "0"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, user=user.uid, group=user.gid, extra_groups=[],
                           cwd=user.home)
    assert srv.stdout.readline().strip() == "server READY"
    assert srv.stdout.readline().strip() == "listening"
    return srv


def _stop(srv: subprocess.Popen) -> None:
    srv.kill()
    srv.wait(10)


def test_attach_recheck_sees_a_replaced_process(local_user):
    """The attached server is killed and another one listens on its port: the cell's re-check fails
    (its pid is gone). Real PID reuse (the same pid, another process) cannot be staged cheaply here:
    the spec is given a start time other than the process's, which is what a reused pid shows."""
    port = _free_port()
    first = _server(local_user, port)
    try:
        spec = servers.attached(first.pid, f"127.0.0.1:{port}")
        assert spec.start_time > 0
        assert servers.attach(spec).pid == first.pid
        with pytest.raises(procs.ProcessError, match=r"the process was replaced \(PID reused\)"):
            servers.attach(dataclasses.replace(spec, start_time=spec.start_time - 1000))
    finally:
        _stop(first)
    second = _server(local_user, port)
    try:
        with pytest.raises(procs.ProcessError, match=f"--attach {first.pid}: the process is gone"):
            servers.attach(spec)
    finally:
        _stop(second)


def test_attach_cell_fails_when_the_process_no_longer_listens(local_user):
    """The attached server closes its listening socket but its process lives on: the re-check each
    cell makes (cell.start_server → servers.attach) fails with one line saying so."""
    port = _free_port()
    srv = _server(local_user, port)
    try:
        spec = servers.attached(srv.pid, f"127.0.0.1:{port}")
        srv.stdin.write("close\n")
        srv.stdin.flush()
        assert srv.stdout.readline().strip() == "closed"
        with pytest.raises(procs.ProcessError, match=f"--attach {srv.pid}: no longer listens on port {port}"):
            servers.attach(spec)
    finally:
        _stop(srv)


def test_env_parsing_keeps_values_whole():
    assert servers.parse_env(["A=1", "B_2=x=y", "C=", "A=2"]) == {"A": "2", "B_2": "x=y", "C": ""}
