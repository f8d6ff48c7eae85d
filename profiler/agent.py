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
from netprof.profiler.loader_client import Loader
from netprof.profiler.procs import ProcessGroup

PROTOCOL = 1
MAX_REQUEST_LINE = 64 * 1024  # a request is a few hundred bytes; anything longer is not the controller


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


def _error(message: str) -> dict:
    return {"event": "error", "error": "bad_request", "message": message}


def serve(fd_in: int = 0, fd_out: int = 1) -> int:
    """Answer requests until EOF, or until a `loader` request turns the session into its relay."""
    io = _Stdio(fd_in, fd_out)
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
            io.reply({"event": "clock", "t": time.monotonic()})
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
                _relay(io, loader.channel)
            return 0
        else:
            io.reply(_error(f"unknown cmd {cmd!r}"))


def main() -> int:
    # stdout carries the protocol: nothing else may print there (a stray print would break the stream).
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(0, out)
