"""What every backend shares: options, the listen socket, the ready line, the work model, and the
"exit once every connection is closed" bookkeeping.

The backends themselves stay small and idiomatic; anything that is harness plumbing rather than a
serving model lives here, once.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

# One recv reads at most this much; also the C++ backends' buffer size.
BUFSIZE = 65536
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
    """Simulated handler work, applied once per recv() that returned data, before echoing.

    A backend cannot see message boundaries (TCP merges and splits), so "per message" means "per
    recv that returned data"; with pipeline 1 and small messages the two coincide in practice.

    `sleep` is a *blocking* sleep (time.sleep / usleep), on purpose: it stands for a handler that
    blocks (a synchronous DB call, a slow library), which is what shows which serving models stall
    every other connection (the flare seed). `spin` burns CPU for the duration. The poisson-
    variants draw each duration from an exponential distribution with the given mean, so arrivals
    of work ends form a Poisson process.
    """

    kind: str = "none"  # none | sleep | spin
    us: float = 0.0  # duration, or mean duration when poisson
    poisson: bool = False

    @classmethod
    def parse(cls, spec: str) -> WorkModel:
        spec = spec.strip()
        if spec in ("", "none"):
            return cls()
        name, sep, value = spec.partition(":")
        kinds = {"sleep": ("sleep", False), "spin": ("spin", False),
                 "poisson-sleep": ("sleep", True), "poisson-spin": ("spin", True)}
        if name not in kinds or not sep:
            raise BadWorkSpec(f"bad --work {spec!r}: use none, sleep:US, spin:US, poisson-sleep:MEAN_US "
                              "or poisson-spin:MEAN_US")
        try:
            us = float(value)
        except ValueError:
            us = -1.0
        if not (us >= 0 and math.isfinite(us)):
            raise BadWorkSpec(f"bad --work {spec!r}: the duration must be a number of microseconds >= 0")
        kind, poisson = kinds[name]
        return cls(kind, us, poisson)

    def __str__(self) -> str:
        if self.kind == "none":
            return "none"
        return f"{'poisson-' if self.poisson else ''}{self.kind}:{self.us:g}"

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


# --------------------------------------------------------------------------------------------
# Options and the command line


@dataclass
class Options:
    host: str = "127.0.0.1"
    port: int = 0
    work: WorkModel = WorkModel()
    workers: int = DEFAULT_WORKERS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m netprof.backends",
        description="Run one echo backend under test. Prints `ready <pid> <port>` once it accepts "
                    "connections, echoes every byte, exits 0 when the peer has closed every "
                    "connection (after at least one) or on SIGTERM/SIGINT.")
    p.add_argument("name", nargs="?", help="backend name (see --list)")
    p.add_argument("--list", action="store_true", help="print the backends and exit")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    p.add_argument("--work", default="none",
                   help="per-message handler work: none | sleep:US | spin:US | poisson-sleep:MEAN "
                        "| poisson-spin:MEAN (applied once per recv that returned data)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                   help=f"processes/threads for prefork, prethread, select_prethread (default {DEFAULT_WORKERS})")
    return p


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


def announce_ready(listener) -> None:
    """The one line the orchestrator waits for. Printed after listen(), so connects succeed."""
    print(f"ready {os.getpid()} {listener.getsockname()[1]}", flush=True)


def exit_on_stop_signals() -> None:
    """For single-threaded loops: SIGTERM (and SIGINT, which a Ctrl-C in the orchestrator's
    terminal sends to the backend too) unwinds the loop and the process exits 0; the kernel closes
    the sockets. (Multi-threaded backends use StopWakeup instead.)"""

    def handler(signum, frame):
        raise SystemExit(0)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


class StopWakeup:
    """A socket the main thread of a multi-threaded backend sleeps on: readable on SIGTERM/SIGINT
    and on notify() (any thread: "all connections closed").

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

    def notify(self) -> None:
        self._w.send(b"\0")

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


# --------------------------------------------------------------------------------------------
# "All connections closed" bookkeeping


class ConnTracker:
    """Counts connections so a backend can exit once the peer has closed all of them.

    Thread-safe (the lock is taken once per connection open/close, never per message).
    `done` is set when, after at least one accepted connection, none is open any more.
    """

    def __init__(self, on_done=None) -> None:
        self.on_done = on_done  # also called (from the closing thread) when done
        self.accepted = 0
        self.open = 0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def opened(self) -> None:
        with self._lock:
            self.accepted += 1
            self.open += 1

    def closed(self) -> bool:
        """Record one closed connection; True if that was the last one."""
        with self._lock:
            self.open -= 1
            last = self.open == 0
        if last:
            self.done.set()
            if self.on_done:
                self.on_done()
        return last


def die(msg: str, code: int = 1):
    """One-line error and exit, from the main thread."""
    print(f"netprof.backends: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def fatal(msg: str) -> None:
    """One-line error and exit 1 from any thread: a serving thread that cannot go on (fd limit,
    no more threads) must not leave a half-dead server the orchestrator would see as a stall."""
    print(f"netprof.backends: {msg}", file=sys.stderr, flush=True)
    os._exit(1)


def echo_blocking(conn, work) -> None:
    """Blocking echo loop of one connection until the peer closes (thread and fork backends)."""
    with conn:
        try:
            while data := conn.recv(BUFSIZE):
                if work:
                    work()
                conn.sendall(data)
        except ConnectionError:
            pass
