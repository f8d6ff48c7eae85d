"""`--msize` and `--framing` reach every backend (issue 15, backend half).

Message framing (the default): a backend echoes only whole messages; nothing while a message is
incomplete, however the client splits it, and merged messages come back byte-exact. `--msize`
sets the message size. Stream framing echoes what came, at once. `--work` runs once per message
under message framing and once per recv under stream framing.
"""

from __future__ import annotations

import itertools
import random
import select
import socket
import time

import pytest
from test_backends import RUNNABLE, recv_exact, send_messages

from helpers import Backend
from netprof.backends import registry

ALL_TCP = RUNNABLE + ["unfair"]
MSIZE = 64
QUIET = 0.03  # how long "nothing is echoed" is watched after a partial piece


def assert_quiet(sock: socket.socket, what: str) -> None:
    readable, _, _ = select.select([sock], [], [], QUIET)
    if readable:
        got = sock.recv(65536)
        pytest.fail(f"{what}: {len(got)} bytes echoed before the message was complete")


def send_in_pieces(sock: socket.socket, stream: bytes, piece: int, msize: int = MSIZE) -> None:
    """Send `stream` (whole messages) in `piece`-byte sends, a tiny pause between them. After
    each, exactly the messages completed so far must have come back; after the first and the last
    partial piece of each message, nothing more may arrive."""

    def check(sent):
        have = sent % msize
        if have and (have <= piece or have + piece >= msize):  # first or last partial piece
            assert_quiet(sock, f"{piece}-byte pieces, {have} of {msize} bytes sent")
        time.sleep(0.0005)

    send_messages(sock, stream, itertools.repeat(piece), msize, check)


@pytest.mark.parametrize("name", ALL_TCP)
def test_message_framing_echoes_whole_messages_only(name):
    rng = random.Random(name)
    with Backend(name, "--msize", str(MSIZE), "--framing", "message") as b:
        b.wait_ready()
        with b.connect() as s:
            for piece in (1, 7, 64):
                send_in_pieces(s, rng.randbytes(3 * MSIZE), piece)
            # Several messages merged in one send, then a trailing half message, then its rest.
            merged = rng.randbytes(4 * MSIZE + MSIZE // 2)
            s.sendall(merged)
            assert recv_exact(s, 4 * MSIZE) == merged[:4 * MSIZE], "merged messages differ"
            assert_quiet(s, "a trailing half message after four merged ones")
            rest = rng.randbytes(MSIZE // 2)
            s.sendall(rest)
            assert recv_exact(s, MSIZE) == merged[4 * MSIZE:] + rest, "completed trailing message differs"
        assert b.stop() == 0, b.err()
        b.assert_nothing_left()


@pytest.mark.parametrize("name", ALL_TCP)
def test_msize_reaches_the_backend(name):
    with Backend(name, "--msize", "1000") as b:  # message framing is the default
        b.wait_ready()
        with b.connect() as s:
            msg = random.Random(name).randbytes(1000)
            s.sendall(msg[:64])  # a whole message at the default --msize, not at 1000
            assert_quiet(s, "64 of 1000 bytes")
            s.sendall(msg[64:])
            assert recv_exact(s, 1000) == msg
        assert b.stop() == 0, b.err()


@pytest.mark.parametrize("name", ALL_TCP)
def test_stream_framing_echoes_what_came(name):
    with Backend(name, "--framing", "stream") as b:
        b.wait_ready()
        with b.connect() as s:
            s.settimeout(5)
            s.sendall(b"7 bytes")
            assert recv_exact(s, 7) == b"7 bytes"  # a partial message, echoed at once
        assert b.stop() == 0, b.err()


@pytest.mark.parametrize("name", [n for n in registry.names() if registry.get(n).transport == "zmq"])
def test_zeromq_backends_accept_the_options_and_echo_frames_as_before(name):
    zmq = pytest.importorskip("zmq")
    assert registry.get(name).reads == "frames"
    ctx = zmq.Context()
    try:
        with Backend(name, "--msize", "1000", "--framing", "message") as b:
            port = b.wait_ready()
            d = ctx.socket(zmq.DEALER)
            d.linger, d.rcvtimeo = 0, 5000
            d.connect(f"tcp://127.0.0.1:{port}")
            d.send(b"7 bytes")  # a ZeroMQ message is whole, whatever --msize says
            assert d.recv() == b"7 bytes"
            d.close()
            assert b.stop() == 0, b.err()
    finally:
        ctx.destroy(linger=0)


# --------------------------------------------------------------------------------------------
# Work model: per message under message framing, per recv under stream framing

WORK_US = 25_000
MESSAGES = 8  # merged in one send: message framing works 8 x 25 ms, stream framing once


def merged_echo_seconds(s: socket.socket) -> float:
    msgs = b"".join(bytes([i]) * MSIZE for i in range(MESSAGES))  # one send
    start = time.monotonic()
    s.sendall(msgs)
    assert recv_exact(s, len(msgs)) == msgs
    return time.monotonic() - start


@pytest.mark.parametrize("framing", ["message", "stream"])
@pytest.mark.parametrize("name", ["selector", "asyncio_proto", "select_prethread", "cpp_epoll", "cpp_uring", "twisted",
                                  "tornado"])
def test_work_runs_per_message_or_per_recv(name, framing):
    with Backend(name, "--work", f"sleep:{WORK_US}", "--framing", framing) as b:
        b.wait_ready()
        with b.connect() as s:
            # Noise only adds time: the best of three rounds, or for stream framing of up to ten until one is under
            # its bound (a pause of this test on a busy host only adds time too; no round of a backend that sleeps
            # per message can be under it: blocking sleeps never end early).
            rounds = [merged_echo_seconds(s) for _ in range(3)]
            while framing == "stream" and min(rounds) >= 0.6 * MESSAGES * WORK_US / 1e6 and len(rounds) < 10:
                rounds.append(merged_echo_seconds(s))
            took = min(rounds)
    all_work = MESSAGES * WORK_US / 1e6
    if framing == "message":  # one sleep per message; blocking sleeps never end early
        assert took >= 0.95 * all_work, f"{MESSAGES} merged messages echoed in {took * 1e3:.0f} ms"
    else:  # one send arrives in one recv: one sleep
        assert took < 0.6 * all_work, f"{MESSAGES} merged messages echoed in {took * 1e3:.0f} ms"
