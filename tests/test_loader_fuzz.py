"""Hostile input on the control channel: garbage, huge lines, half lines, floods. The channel is private
to netprof (a socketpair), but the loader must still survive whatever arrives on it: every complete bad
line gets one bad_request, an over-long line is skipped to its newline, and afterwards the loader still
answers and runs a valid request on the same channel."""

from __future__ import annotations

import json
import random
import time

import pytest
from test_loader import start_echo

from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run.loader_client import Loader, RunRequest

pytestmark = pytest.mark.concurrent  # the loader's answers to malformed input


@pytest.fixture
def env():
    with ProcessGroup() as g:
        yield g, Loader.start(g)


def read_until_pong(ldr: Loader, timeout: float = 10) -> list[dict]:
    """Every event up to and including the next pong."""
    events = []
    deadline = time.monotonic() + timeout
    while True:
        evt = ldr.read_event(max(0.0, deadline - time.monotonic()))
        assert evt is not None, "the loader closed the channel"
        events.append(evt)
        if evt["event"] == "pong":
            return events


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
    b'{"cmd":"abort","extra":true}',
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
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"probe_share":2}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":1000000,"pipeline":1024}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"smtp"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"http","headers":[1]}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"http","headers":["X: a\\r\\nY: b"]}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"http","request":"GET  /"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"http","line":"x"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"line"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"protocol":"line","line":"a\\nb"}',
    b'{"cmd":"run","target":"127.0.0.1:1","connections":10,"body":"x"}',
    b"\xff\xfe\x00garbage",
    b'{"cmd":"ping"} trailing',
]


def test_bad_lines_each_get_one_bad_request_reply(env):
    group, ldr = env
    ldr.send_raw(b"".join(line + b"\n" for line in BAD_LINES) + b'{"cmd":"ping"}\n')
    events = read_until_pong(ldr)
    assert len(events) == len(BAD_LINES) + 1
    for line, evt in zip(BAD_LINES, events):
        assert evt["event"] == "error" and evt["error"] == "bad_request", (line, evt)
        assert evt["message"] and "\n" not in evt["message"]
    assert events[-1] == {"event": "pong", "version": 1}  # the same channel still works


def test_random_garbage_huge_lines_and_half_lines(env):
    group, ldr = env
    _, port = start_echo(group)
    rng = random.Random(7)
    deadline = time.monotonic() + 20  # bounded however slow the machine is

    # Random bytes, some with newlines: every complete line gets an error, nothing crashes.
    for _ in range(30):
        ldr.send_raw(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000))) + b'\n{"cmd":"ping"}\n')
        events = read_until_pong(ldr)
        assert all(e["event"] == "error" and e["error"] == "bad_request" for e in events[:-1]), events
    # A line over 64 KiB without a newline yet: one error at once, then the rest of it up to its
    # newline is skipped and the channel goes on.
    ldr.send_raw(b"{" + b"x" * (100 * 1024))
    evt = ldr.read_event(5)
    assert evt["error"] == "bad_request" and "too long" in evt["message"]
    ldr.send_raw(b"y" * (200 * 1024) + b'"}\n{"cmd":"ping"}\n')
    assert read_until_pong(ldr) == [{"event": "pong", "version": 1}]
    # The same, newline-terminated in one piece.
    ldr.send_raw(b'{"cmd":"ping","pad":"' + b"y" * (70 * 1024) + b'"}\n{"cmd":"ping"}\n')
    events = read_until_pong(ldr)
    assert len(events) == 2 and "too long" in events[0]["message"]
    # Blank lines and CRLF are fine; a half line waits for its end.
    ldr.send_raw(b'\n  \r\n{"cmd":"ping"}\r\n{"cmd": "pi')
    assert read_until_pong(ldr) == [{"event": "pong", "version": 1}]
    ldr.send_raw(b'ng"}\n')
    assert read_until_pong(ldr) == [{"event": "pong", "version": 1}]
    assert_healthy(ldr, port)
    assert time.monotonic() < deadline


def test_a_flood_of_requests_before_reading_replies(env):
    """Pings until the channel is full both ways, before reading a single pong: the loader waits on
    the full channel, then answers every one, in order, once we read."""
    group, ldr = env
    _, port = start_echo(group)
    line = b'{"cmd":"ping"}\n'
    chunk = line * 1000
    total = 0
    ldr.channel.setblocking(False)
    try:
        while total < 200 * len(chunk):
            total += ldr.channel.send(chunk[total % len(line):])  # resumes mid-line after a partial send
    except BlockingIOError:
        pass
    finally:
        ldr.channel.setblocking(True)
    if total % len(line):
        ldr.send_raw(line[total % len(line):])  # finish the line the loader has half of
    lines = -(-total // len(line))
    assert lines > 1000  # the channel really filled up
    for _ in range(lines):
        assert ldr.read_event(10) == {"event": "pong", "version": 1}
    assert_healthy(ldr, port)


def test_run_request_queued_behind_others_and_mid_run_input(env):
    group, ldr = env
    _, port = start_echo(group)
    req = json.dumps(RunRequest(target=f"127.0.0.1:{port}", connections=3, duration=0.5, warmup=0).to_json())
    # A run, then pings sent while it runs: answered in order, after the result.
    ldr.send_raw(req.encode() + b"\n")
    assert ldr.read_event(5)["event"] == "accepted"
    ldr.send_raw(b'{"cmd":"ping"}\n{"cmd":"bogus"}\n{"cmd":"ping"}\n')
    events = read_until_pong(ldr)
    assert [e["event"] for e in events] == ["connected", "measure_start", "measure_stop", "result", "pong"]
    assert not events[3]["stats"]["aborted"]
    assert [e["event"] for e in read_until_pong(ldr)] == ["error", "pong"]
    assert_healthy(ldr, port)
