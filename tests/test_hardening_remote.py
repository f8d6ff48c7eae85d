"""What another host, and ssh, can do to the controller (issue 52, findings 2, 4 and 5).

The far side is a stand-in: an `ssh` first on PATH that ignores its arguments and runs a program of the test's
on the session's stdio, as sshd would run `netprof agent` there. The hostile ones speak the agent protocol
(docs/agent-protocol.md) with terminal escapes in every text they send; one execs the real agent with the
SSH_CONNECTION sshd would have set. netprof runs as plain root (no SUDO_*: root's own shell, doas), so ssh,
and the stand-in, run as root too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

import netprof
from helpers import netprof_cli, netprof_cmd, run_netprof
from netprof.profiler.core import safetext
from netprof.profiler.core.errors import InputError
from netprof.profiler.run.link import sshlink

# What a hostile far side writes: OSC 0 (the window title, ended by BEL), OSC 52 (a clipboard write), CSI 2J
# (clear the screen) and home, the same as 8-bit C1 controls (CSI U+009B, OSC U+009D … ST U+009C), a DCS,
# a CR that would overwrite the line shown, and a backspace.
ESCAPES = ("\x1b]0;pwned title\x07", "\x1b]52;c;aWQgPiAvdG1wL3B3bmVk\x07", "\x1b[2J\x1b[H", "\x9b2J",
           "\x9d0;c1 title\x9c", "\x90qdcs\x9c", "all cells passed\r", "\x08\x08")
EVIL = "".join(ESCAPES)


def _control_chars(data: bytes) -> list[str]:
    """The control characters in what netprof printed (decoded as a terminal would: UTF-8, and a lone byte
    0x80-0x9f kept as that C1 code point), newline and tab aside."""
    text = data.decode("utf-8", "surrogateescape")
    found = []
    for ch in text:
        cp = ord(ch) - 0xDC00 if 0xDC80 <= ord(ch) <= 0xDCFF else ord(ch)
        if (cp < 0x20 and ch not in "\n\t") or 0x7F <= cp <= 0x9F:
            found.append(f"U+{cp:04X}")
    return found


def _plain_root_env(**extra: str) -> dict[str, str]:
    """The environment of root's own shell: no SUDO_* (ssh then runs as root)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")} | extra


def _stand_in_ssh(tmp_path: Path, script: str) -> dict[str, str]:
    """`ssh` in a directory of its own that runs `script` (shell, after `#!/bin/sh`) whatever it is asked;
    the CLI's environment with that directory first on PATH. netprof gives ssh only PATH, HOME and the locale,
    so what the far side needs (this interpreter, netprof's sources) is written into the script."""
    bindir = tmp_path / "standin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text("#!/bin/sh\n" + script + "\n")
    ssh.chmod(0o755)
    return _plain_root_env(PATH=f"{bindir}:{os.environ['PATH']}")


def _hostile_agent(tmp_path: Path, *body: str) -> dict[str, str]:
    """A stand-in far side that runs `body` (Python, each part dedented; `send(obj)`, `requests()` and EVIL
    given) on its stdio."""
    code = tmp_path / "hostile_agent.py"
    code.write_text(textwrap.dedent("""\
        import json, sys, time
        EVIL = {evil!r}
        def send(obj):
            sys.stdout.write(json.dumps(obj) + "\\n")
            sys.stdout.flush()
        def requests():
            for line in sys.stdin:
                yield json.loads(line)
        """).format(evil=EVIL) + "\n".join(textwrap.dedent(part) for part in body))
    return _stand_in_ssh(tmp_path, f"exec {shlex.quote(sys.executable)} {shlex.quote(str(code))}")


# A hello that passes every check (the controller's own version and protocol echoed), the host name hostile,
# then clocks for as long as asked.
HELLO = """
def hello_and_clocks(host=EVIL, version=None, ssh_connection="127.0.0.1 40000 127.0.0.1 22"):
    for req in requests():
        if req["cmd"] == "hello":
            send({"event": "hello", "protocol": req["protocol"], "version": version or req["version"],
                  "host": host, "ssh_connection": ssh_connection, "bpf": None})
        elif req["cmd"] == "clock":
            send({"event": "clock", "t": time.monotonic()})
        else:
            return req
"""


def _args(tmp_path: Path, *more: str) -> list[str]:
    return ["run", "selector", "-c", "1", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes", "--no-report",
            *more, "-o", str(tmp_path / "r")]


# ------------------------------------------------------------------------------------------------
# Finding 2: a remote host writes to the controller's terminal.

def test_clean_text_drops_c0_c1_and_del_keeps_lines_where_meant():
    every = "".join(map(chr, range(0x00, 0xA0)))
    kept = safetext.clean_text(every)
    assert kept == "\t\n" + "".join(map(chr, range(0x20, 0x7F)))
    assert safetext.clean_text(f"a\n\tb{EVIL}c", lines=False) == ("a b]0;pwned title]52;c;aWQgPiAvdG1wL3B3bmVk[2J[H"
                                                                   "2J0;c1 titleqdcsall cells passedc")
    assert safetext.clean({"k\x1b": ["v\x9b", 1, None]}) == {"k": ["v", 1, None]}


@pytest.mark.e2e  # a stand-in agent process
def test_a_hostile_server_hosts_escapes_reach_neither_stdout_nor_stderr(tmp_path):
    """--server-host: the agent's hello, its run's output lines (stdout and stderr) and its results directory
    named "/" are full of escapes; netprof shows the lines without them, and rewrites no "/" of theirs."""
    env = _hostile_agent(tmp_path, HELLO, """
        req = hello_and_clocks()
        assert req["cmd"] == "run", req
        send({"event": "started", "out": "/"})
        send({"event": "out", "text": "report: " + EVIL + " /usr/share/doc/x and a/b"})
        send({"event": "err", "text": "warning " + EVIL})
        send({"event": "out", "text": json.dumps({"report": "/tmp/x/report.html", "note": EVIL})})
        send({"event": "exit", "code": 0})
        """)
    res = netprof_cli(*_args(tmp_path, "--server-host", "evil"), env=env, text=False)
    assert _control_chars(res.stdout) == [] and _control_chars(res.stderr) == [], (res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode()
    assert "report: ]0;pwned title" in out  # the line is shown, only its control characters are gone
    assert " /usr/share/doc/x and a/b" in out and '"/tmp/x/report.html"' in out  # a "/" of theirs stays


@pytest.mark.parametrize("mode", ["ssh_stderr", "error_event", "hello_version"])
def test_a_hostile_far_sides_words_in_a_refusal_are_one_clean_line(tmp_path, mode):
    """What ssh writes on its stderr before it fails, an agent's error event and a hello's fields end up in
    the one line of a refusal (exit 2): without their control characters, still one line."""
    body = {
        "ssh_stderr": "import sys; sys.stderr.write('ssh: connect: ' + EVIL + '\\n' + EVIL + '\\n'); sys.exit(255)",
        "error_event": "hello_and_clocks()\nsend({'event': 'error', 'message': 'no\\n' + EVIL})\n",
        "hello_version": "hello_and_clocks(version='9' + EVIL)\n",
    }[mode]
    env = _hostile_agent(tmp_path, HELLO, body)
    res = netprof_cli(*_args(tmp_path, "--server-host", "evil"), env=env, text=False)
    assert res.returncode == 2, res.stderr
    assert _control_chars(res.stdout) == [] and _control_chars(res.stderr) == [], res.stderr
    assert len(res.stderr.decode().strip().splitlines()) == 1, res.stderr
    assert b"pwned title" in res.stderr  # the far side's words are there, as text


@pytest.mark.parametrize("theirs,text,ours", [
    ("/tmp/a/out", "report: /tmp/a/out/report.html", "report: /R/report.html"),
    ("/tmp/a/out", '{"out": "/tmp/a/out", "x": "/tmp/a/out/x.svg"}', '{"out": "/R", "x": "/R/x.svg"}'),
    ("/tmp/a/out", "results in /tmp/a/out.", "results in /R."),
    ("/tmp/a/out", "/tmp/a/outer /tmp/a/out.bak x/tmp/a/out", "/tmp/a/outer /tmp/a/out.bak x/tmp/a/out"),
    ("/", "a/b /usr/share / //", "a/b /usr/share / //"),
    ("tmp/a", "tmp/a /tmp/a", "tmp/a /tmp/a"),
    ("/tmp/a/../b", "/tmp/a/../b/c", "/tmp/a/../b/c"),
    ("/tmp/a b", "/tmp/a b/c", "/tmp/a b/c"),
])
def test_only_whole_absolute_paths_of_the_server_hosts_results_are_rewritten(theirs, text, ours):
    assert sshlink.rewrite_path(text, theirs, "/R") == ours


# ------------------------------------------------------------------------------------------------
# Finding 4: a loader host chooses where the root backend listens.

def _agent_saying(tmp_path: Path, ssh_connection: str) -> dict[str, str]:
    """A stand-in ssh that runs the real agent (these sources) with the SSH_CONNECTION sshd would have set."""
    sources = os.path.dirname(os.path.dirname(os.path.abspath(netprof.__file__)))
    return _stand_in_ssh(tmp_path, f"SSH_CONNECTION={shlex.quote(ssh_connection)} PYTHONPATH={shlex.quote(sources)} "
                                   f"exec {shlex.quote(sys.executable)} -m netprof.profiler agent")


def _hello(ours: str, theirs: str = "127.0.0.1") -> dict:
    return {"event": "hello", "ssh_connection": f"{ours} 40000 {theirs} 22"}


def _local_addresses() -> list[str]:
    return [a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)]


@pytest.mark.parametrize("ours,says", [
    ("0.0.0.0", "the unspecified address"), ("::", "the unspecified address"),
    ("::ffff:0.0.0.0", "the unspecified address"),
    ("203.0.113.7", "no address of this host's interfaces"), ("2001:db8::7", "no address of this host's interfaces"),
    ("lab1", "does not hold IP addresses"),
])
def test_an_address_a_loader_host_names_is_refused_unless_it_is_one_of_ours(ours, says):
    with pytest.raises(InputError, match=says):
        sshlink.check_addresses(_hello(ours), "h")


def test_an_address_of_this_hosts_interfaces_is_accepted():
    local = _local_addresses()
    assert "127.0.0.1" in local
    for addr in [*local, "::ffff:127.0.0.1"]:
        sshlink.check_addresses(_hello(addr), "h")
    with pytest.raises(InputError, match="not hold IP addresses"):
        sshlink.check_addresses(_hello("127.0.0.1", "0.0.0.0;x"), "h")


@pytest.mark.e2e  # an agent process
@pytest.mark.parametrize("ours,says", [("0.0.0.0", "the unspecified address"),
                                       ("203.0.113.7", "no address of this host's interfaces")])
def test_an_agent_naming_an_address_not_ours_is_refused_before_any_server_listens(tmp_path, ours, says):
    env = _agent_saying(tmp_path, f"{ours} 40000 127.0.0.1 22")
    res = netprof_cli(*_args(tmp_path, "--loader-hosts", "far", "--wait"), env=env)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.e2e  # a run: its loader through the agent
@pytest.mark.concurrent  # its run's answers only: beside other tests (--wait: queued on the run lock)
def test_an_agent_naming_an_address_of_ours_gets_its_run(tmp_path):
    env = _agent_saying(tmp_path, "127.0.0.1 40000 127.0.0.1 22")
    res = run_netprof(*_args(tmp_path, "--loader-hosts", "far", "--wait", "--json"), env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["link"]["server_addr"] == "127.0.0.1", meta["link"]
    assert json.loads(res.stdout)["runs"][0]["messages"] > 0


# ------------------------------------------------------------------------------------------------
# Finding 5: an --ssh-config someone else can write runs code as root.

def _recording_ssh(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A stand-in ssh that writes its arguments to a file and fails as ssh does for a host it cannot reach."""
    argv = tmp_path / "ssh-argv"
    env = _stand_in_ssh(tmp_path, f'printf "%s\\n" "$@" > {shlex.quote(str(argv))}\n'
                                  'echo "ssh: Could not resolve hostname nowhere.invalid" >&2\nexit 255')
    return env, argv


def _config(path: Path, text: str = "Host *\n  ProxyCommand id > /tmp/pwned-by-ssh-config\n",
            mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("option", ["--loader-hosts", "--server-host"])
@pytest.mark.parametrize("plant,says", [
    ("world_writable", "is writable by group or others (mode 666)"),
    ("other_users", "is owned by uid 65534"),
    ("dir_writable", "is writable by group or others (mode 777)"),
])
def test_an_ssh_config_others_can_write_is_refused_under_plain_root(tmp_path, option, plant, says):
    env, argv = _recording_ssh(tmp_path)
    d = tmp_path / "cfgdir"
    d.mkdir(mode=0o777 if plant == "dir_writable" else 0o700)
    d.chmod(0o777 if plant == "dir_writable" else 0o700)
    cfg = _config(d / "config", mode=0o666 if plant == "world_writable" else 0o600)
    if plant == "other_users":
        os.chown(cfg, 65534, 65534)  # nobody: another non-root user
    res = netprof_cli(*_args(tmp_path, option, "nowhere.invalid", "--ssh-config", str(cfg), "--wait"), env=env)
    assert res.returncode == 2 and says in res.stderr and "chmod go-w" in res.stderr, res.stderr
    assert "as root" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not argv.exists()  # ssh never ran


@pytest.mark.e2e  # --loader-hosts: a run that gets as far as its ssh (a stand-in)
@pytest.mark.parametrize("option", ["--loader-hosts", "--server-host"])
def test_a_trusted_ssh_config_given_relative_reaches_ssh_absolute(tmp_path, option):
    """Root's own config, named relative to the caller's directory: accepted, and ssh (which runs in /) gets
    its absolute path; what fails after is ssh, not the trust check."""
    env, argv = _recording_ssh(tmp_path)
    _config(tmp_path / "my config")
    res = netprof_cli(*_args(tmp_path, option, "nowhere.invalid", "--ssh-config", "my config", "--wait"), env=env,
                      cwd=tmp_path)
    assert res.returncode == 2 and "ssh or the agent failed" in res.stderr, res.stderr
    assert "not trusted" not in res.stderr
    args = argv.read_text().splitlines()
    assert args[args.index("-F") + 1] == str(tmp_path / "my config")


def test_every_file_an_ssh_config_includes_is_trusted_as_it_is(tmp_path, monkeypatch):
    """Include lines, as ssh reads them (`Include=`, quotes, several patterns, a comment after, relative to
    ~/.ssh, `~`, globs, nested), each name the file that is not trusted."""
    for name in ("SUDO_UID", "SUDO_GID", "SUDO_USER"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    (home / ".ssh" / "conf.d").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    good = _config(home / ".ssh" / "good", "Host a\n  User x\n")
    _config(home / ".ssh" / "conf.d" / "10.conf", "Port 22\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky and world-writable, like /tmp
    main = _config(tmp_path / "main", f'Host a\n  Include good "conf.d/*.conf" # {shared}/x\n'
                                      f'Match all\n  include={good}\nInclude ~/.ssh/good\n')
    assert sshlink.check_ssh_config(str(main)) == str(main)

    bad = _config(home / ".ssh" / "conf.d" / "20.conf", "Port 22\n", mode=0o666)
    with pytest.raises(InputError, match=r"its Include conf\.d/\*\.conf \(line 2\) is not trusted: .*20\.conf is "
                                         r"writable by group or others"):
        sshlink.check_ssh_config(str(main))
    bad.chmod(0o600)

    _config(good, f"Include {shared}/x.conf\n")  # nested, and a file not there yet in a directory all can write
    with pytest.raises(InputError, match=rf"its Include good \(line 2\), its Include {shared}/x.conf \(line 1\) is "
                                         "not trusted: .*shared is writable by group or others"):
        sshlink.check_ssh_config(str(main))
    _config(shared / "x.conf", "Port 22\n")  # there, root's and not writable by others: the sticky bit keeps it
    assert sshlink.check_ssh_config(str(main)) == str(main)
    _config(good, f"Include {shared}/*.conf\n")  # a pattern: anyone could add a match
    with pytest.raises(InputError, match="shared is writable by group or others"):
        sshlink.check_ssh_config(str(main))

    _config(good, "Include good ~npnosuchuser/x\n")  # a loop ends (ssh fails on it at its own depth); ~nobody
    assert sshlink.check_ssh_config(str(main)) == str(main)
    _config(good, 'Include "unbalanced\n')
    with pytest.raises(InputError, match="cannot be read"):
        sshlink.check_ssh_config(str(main))


# ------------------------------------------------------------------------------------------------
# Finding 3: a remote host exhausts the controller's memory.

# A far side that answers `run` with N_FILES files of FILE_MIB MiB each, sent as the agent sends files (pieces of
# 256 KiB in base64, `append` after the first), then exit 0.
FILES = """
import base64
N_FILES, FILE_MIB = {n}, {mib}
req = hello_and_clocks()
assert req["cmd"] == "run", req
send({{"event": "started", "out": "/srv/r"}})
piece = base64.b64encode(b"x" * (256 * 1024)).decode()
for i in range(N_FILES):
    for k in range(FILE_MIB * 4):
        send({{"event": "file", "path": f"d{{i % 4}}/f{{i}}.bin", "append": k > 0, "data": piece}})
send({{"event": "exit", "code": 0}})
"""

# The controller as a child of a small parent that prints its peak RSS (KiB) once it has exited.
PEAK_RSS = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
            "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _server_host_peak(tmp_path: Path, n: int, mib: int) -> tuple[int, int, Path]:
    """(exit code, peak RSS in MiB, results directory) of `--server-host` against a far side sending n × mib MiB."""
    work = tmp_path / f"{n}x{mib}"
    work.mkdir()
    env = _hostile_agent(work, HELLO, FILES.format(n=n, mib=mib))
    argv = netprof_cmd(*_args(work, "--server-host", "evil", "--wait"))
    res = subprocess.run([sys.executable, "-c", PEAK_RSS, *argv],
                         env=env, capture_output=True, text=True, timeout=300)
    code, kib = res.stdout.split()[-2:]
    return int(code), int(kib) // 1024, work / "r"


@pytest.mark.e2e  # stand-in agent processes
@pytest.mark.concurrent  # a peak RSS and files, nothing timed: beside other tests (its runs queue on the run lock)
def test_a_server_hosts_192_mib_of_result_files_are_streamed_to_disk_not_held(tmp_path):
    """Issue 52, finding 3: 192 MiB of result files once took the root controller's RSS to 565 MiB (held in memory,
    re-copied on each piece). Now each piece goes to disk as it comes: the peak stays within 64 MiB of the same
    run's with 1 MiB of files (the controller's own size, measured here rather than assumed)."""
    code, small, _ = _server_host_peak(tmp_path, 1, 1)
    assert code == 0
    code, big, out = _server_host_peak(tmp_path, 48, 4)
    assert code == 0
    sizes = sorted(p.stat().st_size for p in out.rglob("*.bin"))
    assert len(sizes) == 48 and set(sizes) == {4 << 20}, sizes[:5]
    assert big < small + 64, f"peak RSS {big} MiB with 192 MiB of files, {small} MiB with 1 MiB"


def test_result_files_refuse_past_each_cap_and_name_it(tmp_path):
    from netprof.profiler.core.procs import ProcessError

    def sink(**caps):
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        return sshlink.ResultFiles(out, **caps), out

    files, out = sink(max_file=10)
    files.add("a.bin", b"x" * 6, append=False)
    with pytest.raises(ProcessError, match=r"result file 'a.bin' of more than 10 bytes \(MAX_RESULT_FILE\)"):
        files.add("a.bin", b"x" * 6, append=True)
    files.discard()
    assert list(out.iterdir()) == []  # the incomplete file is gone, its temp file too
    files, out = sink(max_total=10)
    files.add("a.bin", b"x" * 6, append=False)
    with pytest.raises(ProcessError, match=r"more than 10 bytes of result files \(MAX_RESULT_TOTAL\)"):
        files.add("b/c.bin", b"x" * 6, append=False)
    assert (out / "a.bin").read_bytes() == b"x" * 6  # complete before the next began: kept
    files, out = sink(max_files=2)
    files.add("a", b"1", append=False)
    files.add("b", b"2", append=False)
    with pytest.raises(ProcessError, match=r"more than 2 result files \(MAX_RESULT_FILES\)"):
        files.add("c", b"3", append=False)
    files, out = sink()
    with pytest.raises(ProcessError, match=r"9 directories deep: netprof writes at most 8 \(MAX_RESULT_DEPTH\)"):
        files.add("/".join("d" * 9) + "/f", b"", append=False)
    files.add("x", b"1", append=False)
    files.add("y", b"1", append=False)
    with pytest.raises(ProcessError, match="piece of result file 'x' out of turn"):
        files.add("x", b"2", append=True)
    with pytest.raises(ProcessError, match="result file 'x' twice"):
        files.add("x", b"2", append=False)
    files.commit()
    assert (out / "x").read_bytes() == b"1" and (out / "y").read_bytes() == b"1"


def test_another_hosts_line_is_capped_and_a_loaders_result_by_its_connections():
    from netprof.profiler.run import loader_client

    ours, theirs = socket.socketpair()
    with ours, theirs:
        reader = loader_client._LineReader(ours, untrusted=True)
        line = b'{"event": "out", "text": "' + b"x" * (loader_client.UNTRUSTED_LINE + 1)

        def write() -> None:
            with contextlib.suppress(OSError):  # the reader stops reading at the cap
                theirs.sendall(line)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        with pytest.raises(ValueError, match=r"longer than 4,194,304 bytes \(the cap on what another host"):
            reader.read(time.monotonic() + 30)
        ours.shutdown(socket.SHUT_RDWR)  # the writer's sendall ends
        writer.join(timeout=10)
    assert loader_client._LineReader(ours).max_line == loader_client.MAX_REPLY_LINE  # our own loader's
    # a result of 100,000 connections (one count each, in the window and three phases): within its cap
    assert loader_client.result_line_cap(100_000) == 4 * 1024 * 1024 + 96 * 100_000


# ------------------------------------------------------------------------------------------------
# Finding 6: secrets on the remote command line.

@pytest.mark.e2e  # a run through the real agent, its --cmd server and loader
def test_server_host_secrets_never_reach_a_command_line_there(tmp_path):
    """--server-host with --header-file, --header, --env and --env-file: the values went onto the remote `netprof
    run` command line (readable by every user there) and --header-file was forwarded as a path of the other host.
    Now the controller reads them and sends them through the agent's channel, which writes them to private
    files: no process's command line holds a secret while the run goes on (the far side is this host, so its
    `ps` is ours), and the remote run had them (its meta.json, redacted, names them)."""
    secret, token = "Bearer hdr5ecret", "env5ecret"
    headers = tmp_path / "headers"
    headers.write_text(f"Authorization: {secret}\n")
    headers.chmod(0o600)
    env_file = tmp_path / "env"
    env_file.write_text(f"API_TOKEN={token}\n")
    env_file.chmod(0o600)
    env = _agent_saying(tmp_path, "127.0.0.1 40000 127.0.0.1 22")
    server = f"{sys.executable} -m http.server --bind 127.0.0.1 {{port}}"
    args = ["run", "--cmd", server, "--protocol", "http", "--header-file", str(headers), "--header",
            "X-Key: k3ysecret", "--env", "DB_PASSWORD=pw5ecret", "--env-file", str(env_file), "-c", "2", "-d", "1",
            "-r", "1", "--warmup", "0.3", "--no-probes", "--no-report", "--wait", "--server-host", "far",
            "-o", str(tmp_path / "r")]
    proc = subprocess.Popen(netprof_cmd(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, str] = {}
    while proc.poll() is None:
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if "netprof" in cmd or "http.server" in cmd:
                seen[p.pid] = cmd
        time.sleep(0.05)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    # (not the controller: its own command line holds --env-file too)
    remote = [c for pid, c in seen.items() if pid != proc.pid and " agent" not in c and "--env-file" in c]
    assert remote, f"the remote run was never seen: {list(seen.values())}"  # its secrets came as files
    # (the controller's own command line holds what was given there, --header and --env: the user's choice, here)
    theirs = [c for pid, c in seen.items() if pid != proc.pid]
    for word in ("hdr5ecret", "k3ysecret", "pw5ecret", "env5ecret"):
        assert not [c for c in theirs if word in c], word
    config = json.loads((tmp_path / "r" / "meta.json").read_text())["config"]
    assert config["headers"] == ["X-Key: <redacted, 9 chars>", "Authorization: Bearer <redacted, 9 chars>"], config
    assert sorted(config["env"]) == ["API_TOKEN=<redacted, 9 chars>", "DB_PASSWORD=<redacted, 8 chars>"], config
