"""What every backend shares: options, the listen socket, the ready line, the work model, and the
stop-signal plumbing.

A backend serves until netprof stops it (SIGTERM, or SIGINT from a Ctrl-C), then exits 0 with every
process it started gone. It never exits because its connections came and went: any local process
may connect and close right after `ready`.

The backends themselves stay small and idiomatic; anything that is harness plumbing rather than a
serving model lives here, once.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import NoReturn

# One recv reads at most this much under stream framing; also the C++ backends' buffer size.
BUFSIZE = 65536
DEFAULT_MSIZE = 64
MAX_MSIZE = 1 << 20
FRAMINGS = ("message", "stream")  # the first is the default
# listen() backlog: the loader opens up to ~19k connections at once. The kernel caps it at
# net.core.somaxconn (4096 here), which is still far above what an accept loop falls behind by.
BACKLOG = 65535
DEFAULT_WORKERS = 2


# --------------------------------------------------------------------------------------------
# Work model


class BadWorkSpec(ValueError):
    pass


@dataclass(frozen=True)
class WorkModel:
    """Simulated handler work, applied before echoing: once per whole message under message
    framing (the default: the backend knows --msize, so it sees message boundaries), once per recv
    that returned data under stream framing (TCP merges and splits, so a recv may hold part of a
    message or several; with pipeline 1 and small messages the two coincide in practice).

    `sleep` is a *blocking* sleep (time.sleep / usleep), on purpose: it stands for a handler that
    blocks (a synchronous DB call, a slow library), which is what shows which serving models stall
    every other connection (the flare seed). `spin` burns CPU for the duration. The poisson-
    variants draw each duration from an exponential distribution with the given mean, so arrivals
    of work ends form a Poisson process.
    """

    kind: str = "none"  # none | sleep | spin | remote
    us: float = 0.0  # duration, or mean duration when poisson
    poisson: bool = False
    # remote: HOST:PORT of the helper that answers after `us` (profiler/core/remote_work.py). netprof's own
    # --work remote:US has none; the backend's gets it from netprof (remote:US@HOST:PORT).
    peer: str = ""

    @classmethod
    def parse(cls, spec: str) -> WorkModel:
        spec = spec.strip()
        if spec in ("", "none"):
            return cls()
        name, sep, value = spec.partition(":")
        kinds = {"sleep": ("sleep", False), "spin": ("spin", False),
                 "poisson-sleep": ("sleep", True), "poisson-spin": ("spin", True), "remote": ("remote", False)}
        if name not in kinds or not sep:
            raise BadWorkSpec(f"bad --work {spec!r}: use none, sleep:US, spin:US, poisson-sleep:MEAN_US, "
                              "poisson-spin:MEAN_US or remote:US")
        value, _, peer = value.partition("@")
        if peer and (name != "remote" or not re.fullmatch(r"127(\.\d{1,3}){3}:\d{1,5}", peer)):
            raise BadWorkSpec(f"bad --work {spec!r}: only remote:US takes @127.x.y.z:PORT (netprof gives it)")
        try:
            us = float(value)
        except ValueError:
            us = -1.0
        if not (us >= 0 and math.isfinite(us)):
            raise BadWorkSpec(f"bad --work {spec!r}: the duration must be a number of microseconds >= 0")
        kind, poisson = kinds[name]
        return cls(kind, us, poisson, peer)

    def __str__(self) -> str:
        if self.kind == "none":
            return "none"
        return f"{'poisson-' if self.poisson else ''}{self.kind}:{self.us:g}" + (f"@{self.peer}" if self.peer else "")

    def callable(self):
        """A zero-argument function doing one unit of work, or None for `none` (so handlers can
        write `if work: work()` and pay nothing when there is no work)."""
        if self.kind == "none":
            return None
        seconds = self.us / 1e6
        draw = lambda: seconds  # noqa: E731
        if self.poisson and seconds > 0:
            rng = random.Random()
            draw = lambda: rng.expovariate(1.0 / seconds)  # noqa: E731
        if self.kind == "remote":
            return _remote_call(self.peer)
        if self.kind == "sleep":
            sleep = time.sleep  # bound now: stays the blocking sleep even if gevent patches `time`

            def work():
                sleep(draw())
        else:
            clock = time.perf_counter

            def work():
                end = clock() + draw()
                while clock() < end:
                    pass
        return work


def _remote_call(peer: str):
    """One blocking request to the remote-work helper per call, on a connection of the calling thread's
    own (made at its first call, with the run's token first). `_socket`, not `socket`: gevent patches the
    latter, and this stands for a synchronous client (a database driver) that blocks its thread, as the
    `sleep` model does."""
    import _socket

    from netprof.profiler.core.remote_work import REQUEST, TOKEN_ENV  # the helper's side of the exchange owns it

    if not peer:
        raise BadWorkSpec("--work remote:US needs the helper's address: netprof gives it (remote:US@HOST:PORT)")
    host, port = peer.rsplit(":", 1)
    token = os.environ.get(TOKEN_ENV, "").encode()
    local = threading.local()

    def work():
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            conn.connect((host, int(port)))
            conn.sendall(token)
            local.conn = conn
        conn.sendall(REQUEST)
        if not conn.recv(1):
            raise ConnectionError("the remote-work helper closed the connection")

    return work


# --------------------------------------------------------------------------------------------
# Options and the command line


@dataclass
class Options:
    host: str = "127.0.0.1"
    port: int = 0
    work: WorkModel = WorkModel()
    workers: int = DEFAULT_WORKERS
    msize: int = DEFAULT_MSIZE
    framing: str = FRAMINGS[0]

    def framer(self) -> Framer:
        """A fresh Framer for these options (one per serving loop: it holds per-socket state)."""
        return Framer(self.msize, self.framing)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m netprof.backends",
        description="Run one echo backend under test. Prints `ready <pid> <port>` once it accepts "
                    "connections, echoes every byte, and serves until SIGTERM/SIGINT, then exits 0 "
                    "(connections coming and going never end it).")
    p.add_argument("name", nargs="?", help="backend name (see --list)")
    p.add_argument("--list", action="store_true", help="print the backends and exit")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    p.add_argument("--work", default="none",
                   help="per-message handler work: none | sleep:US | spin:US | poisson-sleep:MEAN "
                        "| poisson-spin:MEAN (applied once per message under message framing, once "
                        "per recv that returned data under stream framing)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                   help="processes/threads for prefork, prethread, select_prethread, gunicorn_sync "
                        f"(default {DEFAULT_WORKERS})")
    p.add_argument("--msize", type=int, default=DEFAULT_MSIZE, metavar="N",
                   help=f"message size in bytes, 1..{MAX_MSIZE} (default {DEFAULT_MSIZE}); used by message framing")
    p.add_argument("--framing", default=FRAMINGS[0], choices=FRAMINGS,
                   help="message (default): each receive asks for the bytes that complete one message "
                        "(recv(msize - have)) and whole messages are echoed, as the reference harness "
                        "does; stream: read up to 64 KiB and echo what came")
    return p


def check_msize(parser: argparse.ArgumentParser, msize: int) -> None:
    """parser.error (exit 2) on an --msize out of range (argparse's `choices` checks --framing)."""
    if not 1 <= msize <= MAX_MSIZE:
        parser.error(f"--msize must be 1..{MAX_MSIZE} bytes, not {msize}")


# --------------------------------------------------------------------------------------------
# Framing: the message accumulator of the pull-style backends


class Framer:
    """How a pull-style backend (one that chooses its read size) reads under --framing.

    - message: ask for exactly the bytes that complete the current message (`recv(msize - have)`),
      as the reference harness's `sock.recv(msize)` does; once a message is whole, work() once and
      echo it whole. A message that arrives in one recv costs what stream framing costs: no copy.
    - stream: ask for up to BUFSIZE and echo what came.

    Blocking loops (threads, greenlets, coroutines) read `first` bytes and, if what came is
    shorter than `whole`, complete it with `finish` / `finish_async`. Readiness loops (one recv per
    readiness event, level-triggered: the next wait reports the rest) call `recv(sock)`, which
    keeps each socket's partial message here; `forget(sock)` when it closes.
    """

    def __init__(self, msize: int = DEFAULT_MSIZE, framing: str = FRAMINGS[0]):
        self.msize = msize
        self.stream = framing == "stream"
        self.first = BUFSIZE if self.stream else msize  # the recv size when no message is under way
        self.whole = 0 if self.stream else msize  # less than this is part of a message
        self._partial: dict = {}  # sock -> bytearray: the message under way (readiness loops)

    def _missing(self, buf: bytearray) -> int:
        return self.msize - len(buf)

    def finish(self, recv, head) -> bytes | bytearray:
        """Blocking: `head` is the start of a message; recv(n) the rest. The whole message, or b""
        if the peer closed first."""
        buf = bytearray(head)
        while missing := self._missing(buf):
            if not (more := recv(missing)):
                return b""
            buf += more
        return buf

    async def finish_async(self, recv, head) -> bytes | bytearray:
        """`finish` for a coroutine `recv(n)` (asyncio streams and sock_recv)."""
        buf = bytearray(head)
        while missing := self._missing(buf):
            if not (more := await recv(missing)):
                return b""
            buf += more
        return buf

    def recv(self, sock) -> bytes | bytearray | None:
        """Readiness loops: one recv() on a readable socket. b"" at EOF, None while the message is
        still incomplete, else what to echo (and work() for). Raises what sock.recv raises."""
        buf = self._partial.get(sock)
        if buf is None:
            data = sock.recv(self.first)
            if len(data) >= self.whole or not data:
                return data
            self._partial[sock] = bytearray(data)
            return None
        data = sock.recv(self._missing(buf))
        if not data:
            return data
        buf += data
        if self._missing(buf):
            return None
        del self._partial[sock]
        return buf

    def forget(self, sock) -> None:
        self._partial.pop(sock, None)

    def splitter(self, work) -> Splitter:
        """For a callback-style backend (registry reads="split"), see Splitter."""
        return Splitter(self.whole, work)


class Splitter:
    """How a callback-style backend (registry reads="split": asyncio's `data_received`, Twisted's
    `dataReceived`), which cannot choose its read size, handles what arrived on one connection.
    Stream framing: work() once, write what came. Message framing: work() and write() once per
    whole message; a trailing partial message waits for the rest.

    Make `feed` the protocol's callback itself when the protocol is built (no extra call frame per
    message; some loops look the callback up once, before connection_made), and set `write` to
    the transport's write in connection_made.
    """

    __slots__ = ("whole", "work", "write", "rest")

    def __init__(self, whole: int, work, write=None):
        self.whole, self.work, self.write = whole, work, write  # whole: msize, or 0 (stream)
        self.rest: bytearray | None = None  # the start of a message still incomplete

    def feed(self, data) -> None:
        if self.rest is not None:  # bytes again: Twisted's transport.write takes nothing else
            self.rest += data
            data, self.rest = bytes(self.rest), None
        whole, work, write = self.whole, self.work, self.write
        if len(data) == whole or not whole:  # one message (the common case), or stream framing
            if work:
                work()
            write(data)
            return
        end = len(data) - len(data) % whole
        for start in range(0, end, whole):
            if work:
                work()
            write(data[start:start + whole])
        if end < len(data):
            self.rest = bytearray(memoryview(data)[end:])


# --------------------------------------------------------------------------------------------
# Sockets


def listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    return sock


def nodelay(sock) -> None:
    """Every connection gets TCP_NODELAY: ping-pong of small messages must not wait for Nagle."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # both mean "stop now, exit 0"


def announce_ready(listener: socket.socket | int) -> None:
    """The one line the orchestrator waits for. Printed after listen(), so connects succeed.
    Takes the listen socket, or its port when the socket was handed over (rloop detaches it)."""
    port = listener if isinstance(listener, int) else listener.getsockname()[1]
    print(f"ready {os.getpid()} {port}", flush=True)


def exit_on_stop_signals() -> None:
    """For single-threaded loops: SIGTERM (and SIGINT, which a Ctrl-C in the orchestrator's
    terminal sends to the backend too) unwinds the loop and the process exits 0; the kernel closes
    the sockets. (Multi-threaded backends use StopWakeup instead.)"""

    def handler(signum, frame):
        raise SystemExit(0)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


class StopWakeup:
    """A socket the main thread of a multi-threaded backend sleeps on: readable on SIGTERM/SIGINT.

    A Python-level handler that raises is not enough once other threads run: the handler runs only
    when the main thread executes bytecode and notices the pending signal, and a main thread
    asleep in select() or Event.wait() can miss it for good (CPython issue #85300). The C-level
    handler always writes the signal number to the wakeup fd, so sleeping on that is reliable.
    """

    def __init__(self):
        self.sock, self._w = socket.socketpair()
        self.sock.setblocking(False)
        self._w.setblocking(False)
        signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: None)  # a Python handler makes the wakeup fd hear it

    def woken(self) -> bool:
        """Drain the socket (call when select() says readable); True if it is time to stop."""
        try:
            return bool(self.sock.recv(4096))
        except BlockingIOError:
            return False

    def wait(self) -> None:
        while True:
            select.select([self.sock], [], [])
            if self.woken():
                return

    def exit_if_requested(self) -> None:
        """For a serving thread that just finished a connection: exit 0 at once if a stop signal has
        come (peeked, not consumed). With thousands of threads contending for the GIL (thread per
        connection once the peer closed them all), the main thread can wait tens of seconds for its
        turn to act on the signal; whichever thread runs first ends the process instead."""
        try:
            if self.sock.recv(1, socket.MSG_PEEK):
                os._exit(0)  # nothing to clean up that the kernel does not: sockets, threads
        except BlockingIOError:
            pass


def start_thread(target, *args) -> threading.Thread:
    """Start a daemon thread that never takes SIGTERM/SIGINT (threads it starts inherit that),
    so these signals always interrupt the main thread, which is the one waiting for them."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return thread


def die(msg: str, code: int = 1):
    """One-line error and exit, from the main thread."""
    print(f"netprof.backends: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def fatal(msg: str) -> NoReturn:
    """One-line error and exit 1 from any thread: a serving thread that cannot go on (fd limit,
    no more threads) must not leave a half-dead server the orchestrator would see as a stall."""
    print(f"netprof.backends: {msg}", file=sys.stderr, flush=True)
    os._exit(1)


def echo_pull(recv, send, work, framer: Framer) -> None:
    """The blocking pull loop: recv(n) returns up to n bytes (b"" at EOF), send(data) sends it all.
    Under message framing each recv asks for the bytes that complete the current message."""
    first, whole = framer.first, framer.whole
    while data := recv(first):
        if len(data) < whole and not (data := framer.finish(recv, data)):
            break  # closed in the middle of a message: nothing to echo
        if work:
            work()
        send(data)


async def echo_pull_async(recv, send, work, framer: Framer) -> None:
    """`echo_pull` for coroutine `recv`/`send` (asyncio sock_recv, trio and anyio streams). A recv
    that raises at EOF instead of returning b"" (anyio) ends it with that exception."""
    first, whole = framer.first, framer.whole
    while data := await recv(first):
        if len(data) < whole and not (data := await framer.finish_async(recv, data)):
            break
        if work:
            work()
        await send(data)


def echo_blocking(conn, work, framer: Framer) -> None:
    """Blocking echo loop of one connection until the peer closes (thread, fork and gevent)."""
    with conn:
        try:
            echo_pull(conn.recv, conn.sendall, work, framer)
        except ConnectionError:
            pass
