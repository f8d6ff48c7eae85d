"""netprof agent (profiler/run/link/agent.py) against its controller (profiler/run/link/sshlink.py): the protocol of
docs/agent-protocol.md, each side tested against the other. Here the agent runs as a local child on a
socketpair (what ssh would carry); tests/test_multihost.py runs it over real ssh in the lab."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import netprof
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run.link import agent, sshlink
from netprof.profiler.run.loader_client import Loader, _LineReader

FAKE_SSH = "10.213.0.254 40000 10.213.0.2 22"  # what sshd would set: client addr/port, server addr/port


@pytest.fixture
def session():
    """A local agent on one end of a socketpair, as `ssh HOST netprof agent` is; (our end, reader, proc)."""
    ours, theirs = socket.socketpair()
    env = {**os.environ, "SSH_CONNECTION": FAKE_SSH}
    proc = subprocess.Popen([sys.executable, "-m", "netprof.profiler", "agent"], stdin=theirs, stdout=theirs,
                            env=env, cwd="/")
    theirs.close()
    try:
        yield ours, _LineReader(ours), proc
    finally:
        ours.close()
        try:
            proc.wait(timeout=10)
        finally:
            proc.kill()


def _ask(ours, reader, obj, timeout=20.0):
    ours.sendall((json.dumps(obj) + "\n").encode())
    return reader.read(time.monotonic() + timeout)


@pytest.mark.e2e  # an agent process (and a loader)
def test_hello_names_version_protocol_and_the_ssh_addresses(session):
    ours, reader, proc = session
    got = _ask(ours, reader, {"cmd": "hello", "protocol": agent.PROTOCOL, "version": netprof.__version__})
    assert got["event"] == "hello" and got["protocol"] == agent.PROTOCOL and got["version"] == netprof.__version__
    assert got["ssh_connection"] == FAKE_SSH and "bpf" in got
    remote = sshlink.RemoteLoader("h", None, got, sshlink.Clock(0, 0))  # type: ignore[arg-type]
    assert (remote.controller_addr, remote.own_addr) == ("10.213.0.254", "10.213.0.2")


@pytest.mark.e2e  # an agent process (and a loader)
def test_clock_offset_of_the_same_machine_is_within_its_error(session):
    ours, reader, proc = session
    clock = sshlink.measure_clock(lambda o: ours.sendall((json.dumps(o) + "\n").encode()),
                                  lambda: reader.read(time.monotonic() + 20))
    assert abs(clock.offset_s) <= clock.error_s + 1e-3  # one CLOCK_MONOTONIC: no offset beyond the round trip
    assert 0 < clock.error_s < 0.5


@pytest.mark.e2e  # an agent process (and a loader)
def test_bad_requests_are_answered_and_the_session_goes_on(session):
    ours, reader, proc = session
    assert _ask(ours, reader, {"cmd": "nope"})["error"] == "bad_request"
    ours.sendall(b"not json\n")
    assert reader.read(time.monotonic() + 20)["error"] == "bad_request"
    assert _ask(ours, reader, {"cmd": "loader", "threads": 0})["error"] == "bad_request"
    assert _ask(ours, reader, {"cmd": "clock"})["event"] == "clock"


@pytest.mark.e2e  # an agent process (and a loader)
def test_loader_request_turns_the_session_into_the_loaders_channel(session):
    """After `loader`, the stream is the loader's own protocol (ping/pong, a real run against a local echo
    server); closing our end ends agent and loader."""
    ours, reader, proc = session
    started = _ask(ours, reader, {"cmd": "loader", "cpus": None, "threads": 1})
    assert started["event"] == "loader" and started["pid"] > 0
    with ProcessGroup() as group:
        loader = Loader(group.spawn("stand-in", ["sleep", "30"]), ours, reader=reader)
        assert loader.ping(timeout=10)["event"] == "pong"
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        import threading

        from netprof.profiler.run.loader_client import RunRequest

        def echo():
            conn, _ = srv.accept()
            with conn:
                try:
                    while data := conn.recv(65536):
                        conn.sendall(data)
                except OSError:
                    pass  # the loader resets its connections at the end of the run

        threading.Thread(target=echo, daemon=True).start()
        stats = loader.run(RunRequest(target=f"127.0.0.1:{srv.getsockname()[1]}", connections=1, duration=0.3,
                                      warmup=0.05), timeout=20)
        srv.close()
        assert stats["messages"] > 100 and stats["per_conn_messages"] == [stats["messages"]]
    ours.shutdown(socket.SHUT_RDWR)
    assert proc.wait(timeout=10) == 0
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{started['pid']}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{started['pid']}")  # the loader went with the session


@pytest.mark.parametrize("text", ["-oProxyCommand=x", "a b", "h;rm", "$(x)", "lab1,lab1"])
def test_loader_hosts_refuses_what_is_not_a_host_name(text):
    with pytest.raises(InputError):
        sshlink.parse_hosts(text)


def test_the_remote_command_is_fixed_and_quoted():
    argv = sshlink.ssh_argv("lab2", "/x/cfg", "/opt/net prof/bin/netprof")
    assert argv[argv.index("--") + 1:] == ["lab2", "'/opt/net prof/bin/netprof' agent"]
    assert "BatchMode=yes" in argv and argv[argv.index("-F") + 1] == "/x/cfg"


@pytest.mark.parametrize("args,says", [
    (["--loader-hosts", "lab2,lab3", "-c", "1"], "fewer than the 2 loader hosts"),
    (["--ssh-config", "/etc/hostname"], "are for --loader-hosts"),
    (["--loader-hosts", "lab2", "--remote", "netns"], "use one of them"),
    (["--loader-hosts", "-oProxyCommand=touch /tmp/x"], "is not a host name"),
    (["--loader-hosts", "lab2", "--ssh-config", "/nonexistent/cfg"], "no such file"),
    (["--loader-hosts", "lab2", "--cmd", "python3 -m http.server {port}"], "give --cmd with {host} and {port}"),
])
def test_loader_hosts_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    from helpers import netprof_cli

    backend = [] if "--cmd" in args else ["selector"]
    res = netprof_cli("run", *backend, "-c", "10", "-d", "1", "-r", "1", *args, "-o", str(tmp_path / "r"))
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_server_host_forwards_every_option_but_where_results_land_here_and_secrets():
    from netprof.profiler.cli import forwarded_args

    argv = ["selector", "-c", "100", "--server-host", "lab1", "-o", "/x", "--loader-hosts", "lab2", "--out=/y",
            "--server-host=lab1", "-oZ", "--yes", "--json", "--cmd", "python app.py --port {port}",
            "--header", "Authorization: Bearer s", "--header=X-Key: k", "--header-file", "/h", "--body", "b",
            "--body-file=/b", "--env", "TOKEN=t", "--env-file", "/e", "--protocol", "http"]
    # the values that may be secrets go through the agent's channel (sshlink.run_on_server_host's `secrets`)
    assert forwarded_args(argv) == ["selector", "-c", "100", "--loader-hosts", "lab2", "--json", "--cmd",
                                    "python app.py --port {port}", "--protocol", "http"]


@pytest.mark.parametrize("secrets, says", [
    ([], "secrets is an object of headers, body and env"),
    ({"headers": ["A: b"], "cookies": []}, "secrets is an object of headers, body and env"),
    ({"headers": "A: b"}, "secrets.headers is a list of one-line strings"),
    ({"env": ["A=1\nB=2"]}, "secrets.env is a list of one-line strings"),
    ({"body": 3}, "secrets.body is a string or null"),
])
def test_a_run_requests_secrets_are_checked(secrets, says):
    assert agent._check_secrets(secrets) == f"run: {says}"


def test_secrets_become_private_files_named_by_their_options(tmp_path):
    work = tmp_path / "w"
    work.mkdir(mode=0o700)
    args = agent._secret_args(str(work), {"headers": ["Authorization: Bearer s3cret", "X-A: 1"], "body": "",
                                          "env": ["TOKEN=t0k"]})
    assert args == ["--header-file", str(work / "headers"), "--env-file", str(work / "env"),
                    "--body-file", str(work / "body")]
    assert (work / "headers").read_text() == "Authorization: Bearer s3cret\nX-A: 1\n"
    assert (work / "env").read_text() == "TOKEN=t0k\n" and (work / "body").read_text() == ""
    assert {oct(p.stat().st_mode & 0o777) for p in work.iterdir()} == {"0o600"}
    assert agent._secret_args(str(tmp_path), {}) == []
