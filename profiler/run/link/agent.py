"""`netprof agent`: netprof's far side on another host, started by the controller over ssh (sshlink.py).

It speaks JSON lines on its stdin and stdout, the ssh session's private byte stream, so nothing listens on
the far host and OpenSSH does the authentication. docs/agent-protocol.md is the contract; this module is
the agent's side of it, sshlink.py the controller's, and tests/test_agent.py checks one against the other.

    → {"cmd": "hello", "protocol": 1, "version": "0.9.0"}
    ← {"event": "hello", "protocol": 1, "version": "0.9.0", "host": "lab2", "ssh_connection": "…", "bpf": null}
    → {"cmd": "clock"}
    ← {"event": "clock", "t": 1234.5678}                  (CLOCK_MONOTONIC, s: the controller's offset)
    → {"cmd": "loader", "cpus": "1", "threads": 1}
    ← {"event": "loader", "pid": 4242}
    … from here on the stream is the loader's own control channel (cpp_server/PROTOCOL.md), relayed
      byte for byte, until either side closes it.
    → {"cmd": "run", "args": ["selector", "-c", "100", "--loader-hosts", "lab2", …],   (--server-host)
       "secrets": {"headers": ["Authorization: …"], "body": null, "env": ["TOKEN=…"]}}
    ← {"event": "started", "out": "/tmp/…/out"}, then {"event": "out" | "err", "text": "…"} as the run
      prints, {"event": "file", "path": "report.html", "append": false, "data": "<base64>"} for each
      file of its results, {"event": "exit", "code": 0}

The agent and its loader end with the session: stdin's EOF (the controller closed it, or ssh went away)
closes the loader's channel, which makes the loader exit; the loader also dies with the agent
(PR_SET_PDEATHSIG), and a killed controller's ssh client takes the session down with it.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import time

import netprof
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run.loader_client import Loader

PROTOCOL = 1
# A request is a few hundred bytes, a run's with its secrets at most a body and a header file (1 MiB each,
# results.MAX_NAMED_FILE, JSON-escaped: up to 6 bytes a byte): anything longer is not the controller.
MAX_REQUEST_LINE = 16 * 1024 * 1024


def hello() -> dict:
    from netprof.probes.base import prerequisites  # deferred: only the hello reports it

    return {"event": "hello", "protocol": PROTOCOL, "version": netprof.__version__,
            "host": socket.gethostname(), "ssh_connection": os.environ.get("SSH_CONNECTION", ""),
            "bpf": prerequisites()}


class _Stdio:
    """Lines from fd 0 (kept in a buffer: what follows the `loader` request belongs to the loader), replies
    to fd 1."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in, self.fd_out = fd_in, fd_out
        self.buf = bytearray()

    def line(self) -> bytes | None:
        while (nl := self.buf.find(b"\n")) < 0:
            if len(self.buf) > MAX_REQUEST_LINE:
                raise ValueError("request line too long")
            chunk = os.read(self.fd_in, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line = bytes(self.buf[:nl])
        del self.buf[: nl + 1]
        return line

    def reply(self, obj: dict) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        while data:
            data = data[os.write(self.fd_out, data):]


def _relay(io: _Stdio, channel: socket.socket) -> None:
    """Bytes both ways between the session and the loader's channel until either closes."""
    if io.buf:
        channel.sendall(bytes(io.buf))
        io.buf.clear()
    while True:
        ready, _, _ = select.select([io.fd_in, channel], [], [])
        if io.fd_in in ready:
            chunk = os.read(io.fd_in, 1 << 16)
            if not chunk:
                return  # the controller is gone: closing the channel ends the loader
            channel.sendall(chunk)
        if channel in ready:
            chunk = channel.recv(1 << 20)
            if not chunk:
                return  # the loader exited
            while chunk:
                chunk = chunk[os.write(io.fd_out, chunk):]


FILE_CHUNK = 256 * 1024  # bytes of a result file per `file` event (base64 in the line)
STOP_GRACE_S = 15.0  # a remote run told to stop (SIGTERM, like Ctrl-C) keeps its finished cells meanwhile


def _secret_args(work: str, secrets: dict) -> list[str]:
    """The run's headers, body and --cmd environment (the controller's `secrets`), as files in the agent's private
    directory (0700, each file 0600) named by --header-file, --body-file and --env-file: a value on the command
    line would be readable by every user of this host in /proc/PID/cmdline."""
    args = []
    for key, option in (("headers", "--header-file"), ("env", "--env-file")):
        if secrets.get(key):
            args += [option, _private_file(work, key, "".join(f"{v}\n" for v in secrets[key]))]
    if secrets.get("body") is not None:
        args += ["--body-file", _private_file(work, "body", secrets["body"])]
    return args


def _private_file(work: str, name: str, text: str) -> str:
    path = os.path.join(work, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _check_secrets(secrets: object) -> str | None:
    """Why a run request's `secrets` is not what the controller sends, or None."""
    if not isinstance(secrets, dict) or set(secrets) - {"headers", "body", "env"}:
        return "run: secrets is an object of headers, body and env"
    for key in ("headers", "env"):
        items = secrets.get(key) or []
        if not isinstance(items, list) or not all(isinstance(v, str) and "\n" not in v for v in items):
            return f"run: secrets.{key} is a list of one-line strings"
    if not isinstance(secrets.get("body"), (str, type(None))):
        return "run: secrets.body is a string or null"
    return None


def _run_here(io: _Stdio, args: list[str], secrets: dict) -> int:
    """`netprof run ARGS -o TMP` on this host (the server host of `--server-host`): its stdout and stderr
    lines as `out`/`err` events while it runs, then every file of its results directory as `file` events,
    then `exit` with its exit code. The session's EOF stops it (SIGTERM: it ends like Ctrl-C); the agent
    removes its temporary directory at the end."""
    import base64
    import shutil
    import signal
    import subprocess
    import tempfile

    from netprof.profiler.core import procs

    work = tempfile.mkdtemp(prefix="netprof-agent-")
    out = os.path.join(work, "out")
    try:
        args = [*args, *_secret_args(work, secrets)]
        child = subprocess.Popen([sys.executable, "-m", "netprof.profiler", "run", *args, "-o", out],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 cwd="/", start_new_session=True, preexec_fn=procs.die_with(os.getpid()))
        io.reply({"event": "started", "out": out})  # the controller shows its own directory for this path
        pipes = {child.stdout.fileno(): "out", child.stderr.fileno(): "err"}  # type: ignore[union-attr]
        partial = {fd: b"" for fd in pipes}
        stop_by = None  # when the controller went away: the run's deadline to end as on Ctrl-C
        while pipes:
            wait = None if stop_by is None else max(0.0, stop_by - time.monotonic())
            ready, _, _ = select.select([*pipes, *([] if stop_by else [io.fd_in])], [], [], wait)
            if stop_by is not None and time.monotonic() >= stop_by:
                child.kill()  # it did not end in time: its own children die with it (PR_SET_PDEATHSIG)
                break
            if io.fd_in in ready and not os.read(io.fd_in, 65536):
                stop_by = time.monotonic() + STOP_GRACE_S  # the controller is gone (Ctrl-C, SIGKILL, lost link)
                child.send_signal(signal.SIGTERM)
            for fd in [f for f in ready if f in pipes]:
                chunk = os.read(fd, 65536)
                lines = (partial[fd] + chunk).split(b"\n")
                partial[fd] = lines.pop() if chunk else b""
                if not chunk and lines == [b""]:
                    lines = []
                for line in lines:
                    if stop_by is None:
                        io.reply({"event": pipes[fd], "text": line.decode(errors="replace")})
                if not chunk:
                    del pipes[fd]
        try:
            code = child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # its output closed, yet it lives on: not for long
            child.kill()
            code = child.wait()
        if stop_by is not None:
            return 0  # nobody to send the results to
        for base, _dirs, files in os.walk(out):
            for name in sorted(files):
                path = os.path.join(base, name)
                rel = os.path.relpath(path, out)
                with open(path, "rb") as f:
                    data = f.read()
                for i in range(0, max(len(data), 1), FILE_CHUNK):
                    io.reply({"event": "file", "path": rel, "append": i > 0,
                              "data": base64.b64encode(data[i:i + FILE_CHUNK]).decode()})
        io.reply({"event": "exit", "code": code})
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


# Test hook: an agent that acts as a host whose CLOCK_MONOTONIC is this many seconds ahead of the real one
# (its clock replies, the loader's times it relays, a start_at it relays back): the lab's hosts share one
# clock, and tests/test_multihost.py needs one that does not. Unset (or 0): nothing is touched.
CLOCK_SHIFT_ENV = "NETPROF_AGENT_CLOCK_SHIFT_S"


def _shift(line: bytes, by: float, keys: tuple[str, ...]) -> bytes:
    """A JSON line with its times (`keys`, in it and in its stats and phases) moved by `by` seconds."""
    if not line.strip():
        return line
    obj = json.loads(line)

    def move(o: dict) -> None:
        for k in keys:
            if isinstance(o.get(k), (int, float)) and o[k]:
                o[k] += by
        for inner in (o.get("stats"), *((o.get("phases") or {}).values())):
            if isinstance(inner, dict):
                move(inner)

    move(obj)
    return json.dumps(obj, separators=(",", ":")).encode()


def _relay_shifted(io: _Stdio, channel: socket.socket, shift: float) -> None:
    """_relay line by line, with the times moved as CLOCK_SHIFT_ENV says."""
    ups, downs = bytearray(io.buf), bytearray()
    io.buf.clear()
    while True:
        while (nl := ups.find(b"\n")) >= 0:  # controller → loader: its start_at into the real clock
            channel.sendall(_shift(bytes(ups[:nl]), -shift, ("start_at",)) + b"\n")
            del ups[: nl + 1]
        while (nl := downs.find(b"\n")) >= 0:  # loader → controller: its times into the shifted clock
            data = _shift(bytes(downs[:nl]), shift, ("t", "t_start", "t_stop")) + b"\n"
            while data:
                data = data[os.write(io.fd_out, data):]
            del downs[: nl + 1]
        ready, _, _ = select.select([io.fd_in, channel], [], [])
        if io.fd_in in ready:
            chunk = os.read(io.fd_in, 1 << 16)
            if not chunk:
                return
            ups += chunk
        if channel in ready:
            chunk = channel.recv(1 << 20)
            if not chunk:
                return
            downs += chunk


def _error(message: str) -> dict:
    return {"event": "error", "error": "bad_request", "message": message}


def serve(fd_in: int = 0, fd_out: int = 1) -> int:
    """Answer requests until EOF, or until a `loader` request turns the session into its relay."""
    io = _Stdio(fd_in, fd_out)
    shift = float(os.environ.get(CLOCK_SHIFT_ENV) or 0)
    while True:
        try:
            raw = io.line()
        except ValueError as e:
            io.reply(_error(str(e)))
            return 2
        if raw is None:
            return 0
        if not raw.strip():
            continue
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError:
            io.reply(_error(f"not a JSON object: {raw[:200]!r}"))
            continue
        cmd = req.get("cmd")
        if cmd == "hello":
            io.reply(hello())
        elif cmd == "clock":
            io.reply({"event": "clock", "t": time.monotonic() + shift})
        elif cmd == "loader":
            cpus, threads = req.get("cpus"), req.get("threads", 1)
            if not (cpus is None or isinstance(cpus, str)) or not isinstance(threads, int) or not 1 <= threads <= 64:
                io.reply(_error("loader: cpus is a list like \"1\" or \"1,2\" and threads 1 … 64"))
                continue
            with ProcessGroup() as group:
                try:
                    loader = Loader.start(group, cpus=cpus or None, threads=threads)
                except Exception as e:  # noqa: BLE001 (one line back to the controller)
                    io.reply({"event": "error", "error": "loader", "message": str(e)})
                    return 1
                io.reply({"event": "loader", "pid": loader.pid})
                if shift:
                    _relay_shifted(io, loader.channel, shift)
                else:
                    _relay(io, loader.channel)
            return 0
        elif cmd == "run":
            args = req.get("args")
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                io.reply(_error("run: args is a list of strings (netprof run's arguments)"))
                continue
            secrets = req.get("secrets") or {}
            if why := _check_secrets(secrets):
                io.reply(_error(why))
                continue
            return _run_here(io, args, secrets)
        else:
            io.reply(_error(f"unknown cmd {cmd!r}"))


def main() -> int:
    # stdout carries the protocol: nothing else may print there (a stray print would break the stream).
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(0, out)
