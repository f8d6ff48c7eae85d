"""Hostile control clients: garbage, huge lines, half lines, abrupt disconnects. Afterwards the
loader must still answer and run a valid request."""

from __future__ import annotations

import json
import random
import socket
import time

import pytest

from netprof.profiler.loader_client import Loader, RunRequest
from netprof.profiler.procs import ProcessGroup
from test_loader import start_echo


@pytest.fixture
def env():
    with ProcessGroup() as g:
        yield g, Loader.start(g)


def connect(ldr: Loader) -> socket.socket:
    s = socket.create_connection((ldr.host, ldr.port), timeout=5)
    return s


def read_events(s: socket.socket, n: int) -> list[dict]:
    f = s.makefile("rb")
    try:
        return [json.loads(f.readline()) for _ in range(n)]
    finally:
        f.close()


def assert_healthy(ldr: Loader, port: int) -> None:
    assert ldr.ping()["event"] == "pong"
    s = ldr.run(RunRequest(target=f"127.0.0.1:{port}", connections=5, duration=0.3, warmup=0))
    assert s["messages"] > 0 and sum(s["per_conn_messages"]) == s["messages"]
    assert ldr.proc.alive()


BAD_LINES = [
    b"{",
    b"null",
    b"[]",
    b'"run"',
    b"{}",
    b'{"cmd":"run"}',
    b'{"cmd":"ping","extra":true}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":"10"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10.5}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":true}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"msize":0}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"duration":-1}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"duration":1e400}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"sources":["::1"]}',
    b'{"cmd":"run","target":"127.0.0.1:99999","connections":10}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"think":"fixed:-5"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"cmd":"ping","x":1}',
    b"\xff\xfe\x00garbage",
    b'{"cmd":"ping"} trailing',
]


def test_bad_lines_each_get_one_bad_request_reply(env):
    group, ldr = env
    with connect(ldr) as s:
        s.sendall(b"".join(line + b"\n" for line in BAD_LINES) + b'{"cmd":"ping"}\n')
        events = read_events(s, len(BAD_LINES) + 1)
    for line, evt in zip(BAD_LINES, events):
        assert evt["event"] == "error" and evt["error"] == "bad_request", (line, evt)
        assert evt["message"] and "\n" not in evt["message"]
    assert events[-1] == {"event": "pong", "version": 1}  # the same connection still works


def test_random_garbage_huge_lines_half_lines_and_disconnects(env):
    group, ldr = env
    _, port = start_echo(group)
    rng = random.Random(7)
    deadline = time.monotonic() + 20  # bounded however slow the machine is

    # Random bytes, some with newlines: every complete line gets an error, nothing crashes.
    for _ in range(30):
        with connect(ldr) as s:
            s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000))))
    # A line over 64 KiB without a newline: one error, then the loader hangs up.
    with connect(ldr) as s:
        try:
            s.sendall(b"{" + b"x" * (100 * 1024))
        except OSError:
            pass
        evt = json.loads(s.makefile("rb").readline())
        assert evt["error"] == "bad_request" and "too long" in evt["message"]
        assert s.recv(1) == b""
    # The same, newline-terminated.
    with connect(ldr) as s:
        try:
            s.sendall(b'{"cmd":"ping","pad":"' + b"y" * (70 * 1024) + b'"}\n')
        except OSError:
            pass
        assert "too long" in json.loads(s.makefile("rb").readline())["message"]
    # Half lines, then gone; abrupt connects/closes; RST instead of FIN.
    for i in range(50):
        s = connect(ldr)
        if i % 3 == 0:
            s.sendall(b'{"cmd":"run","target":"127.0.0.1:')
        elif i % 3 == 1:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        s.close()
    # An idle client holding a half line does not block others.
    idle = connect(ldr)
    idle.sendall(b'{"cmd": "pi')
    try:
        assert_healthy(ldr, port)
    finally:
        idle.close()
    assert time.monotonic() < deadline


def test_request_then_disconnect_at_every_stage(env):
    group, ldr = env
    _, port = start_echo(group)
    req = json.dumps(RunRequest(target=f"127.0.0.1:{port}", connections=20, duration=30, warmup=0.5).to_json())
    for events_to_read in range(0, 4):  # gone before accepted, after accepted, connected, measure_start
        with connect(ldr) as s:
            s.sendall(req.encode() + b"\n")
            if events_to_read:
                read_events(s, events_to_read)
        t0 = time.monotonic()
        assert ldr.ping(timeout=5)["event"] == "pong"
        assert time.monotonic() - t0 < 3
    assert_healthy(ldr, port)


def test_many_clients_and_a_client_that_never_reads(env):
    group, ldr = env
    _, port = start_echo(group)
    socks = [connect(ldr) for _ in range(80)]  # beyond the loader's client cap
    try:
        # A client that floods pings and never reads its replies.
        flood = socks[0]
        flood.setblocking(False)
        try:
            for _ in range(2000):
                flood.send(b'{"cmd":"ping"}\n' * 100)
        except BlockingIOError:
            pass
    finally:
        for s in socks:
            s.close()
    assert_healthy(ldr, port)
