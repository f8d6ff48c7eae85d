"""Process-based models from the socket-patterns seed: `fork` (a child per connection) and
`prefork` (--workers children sharing the listen socket).

The parent only supervises. It sleeps in a selector on the listen socket (fork) and the signal
wakeup fd, so SIGCHLD and SIGTERM are handled in the loop rather than inside signal handlers. It
reaps children as they exit and serves until SIGTERM/SIGINT; then it terminates and reaps every
child and exits 0.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import socket
import sys
import traceback

from .common import STOP_SIGNALS, Options, announce_ready, die, echo_blocking, nodelay
from .selector_family import SelectorServer

PR_SET_PDEATHSIG = 1
SIGNALS = (signal.SIGCHLD, *STOP_SIGNALS)


class Supervisor:
    """Signal plumbing and child bookkeeping shared by fork and prefork."""

    def __init__(self):
        self.children: set[int] = set()
        self.sel = selectors.DefaultSelector()
        self._wake_r, wake_w = socket.socketpair()
        for s in (self._wake_r, wake_w):
            s.setblocking(False)
        self._wake_w = wake_w  # keep it open: it is the wakeup fd
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        # A Python-level handler must exist for the wakeup fd to hear a signal.
        for sig in SIGNALS:
            signal.signal(sig, lambda *_: None)
        self.sel.register(self._wake_r, selectors.EVENT_READ, self._on_signal)
        self.terminated = False
        try:
            self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # not Linux/glibc: children just lack the safety net
            self._prctl = None

    def fork(self) -> int:
        # Signals stay blocked across fork() until the child has its default handlers back, so a
        # SIGTERM sent to a brand-new child is never swallowed by the parent's no-op handler.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        pid = os.fork()
        if pid == 0:
            # The child: default signal behaviour, no wakeup fd, and die with the parent even if
            # the parent is SIGKILLed (no orphaned servers left holding the port).
            signal.set_wakeup_fd(-1)
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            self._wake_r.close()
            self._wake_w.close()
            self.sel.close()
            if self._prctl:
                self._prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        else:
            self.children.add(pid)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return pid

    def _on_signal(self, sock):
        for signum in sock.recv(4096):
            if signum in STOP_SIGNALS:
                self.terminated = True

    def reap(self) -> list[tuple[int, int]]:
        """Collect every exited child: [(pid, exit code)]."""
        done = []
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            self.children.discard(pid)
            done.append((pid, os.waitstatus_to_exitcode(status)))
        return done

    def poll(self):
        for key, _ in self.sel.select():
            key.data(key.fileobj)

    def shutdown(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in list(self.children):
            os.waitpid(pid, 0)
        self.children.clear()


def child_exit(serve_fn, *args) -> None:
    """Run a child's job and leave with os._exit: the child must not fall back into the parent's
    code (its loop, finally blocks, atexit handlers)."""
    code = 0
    try:
        serve_fn(*args)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
    os._exit(code)


# --- fork: one process per connection ---


def serve_fork(listener, opts):
    sup = Supervisor()
    work, framer = opts.work.callable(), opts.framer()

    def accept(listener):
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        nodelay(conn)
        conn.setblocking(True)
        if sup.fork() == 0:
            listener.close()
            child_exit(echo_blocking, conn, work, framer)
        conn.close()  # the child has its own copy

    listener.setblocking(False)
    sup.sel.register(listener, selectors.EVENT_READ, accept)
    announce_ready(listener)
    while not sup.terminated:
        sup.poll()
        sup.reap()  # a connection's child that is done (SIGCHLD woke the poll)
    sup.shutdown()


# --- prefork: N workers, each a selector loop on the shared listen socket ---


def serve_prefork(listener, opts):
    """The seed's prefork has each worker accept one connection under a lock and serve it until
    it closes, which cannot serve more persistent connections than there are workers. Here each
    worker runs a selector loop over the connections it accepts from the shared listen socket, as
    multi-process servers with persistent connections do (nginx and gunicorn's async workers)."""
    sup = Supervisor()
    for _ in range(opts.workers):
        if sup.fork() == 0:
            server = SelectorServer(listener, opts.work.callable(), opts.framer())
            child_exit(server.serve_forever)
    failed = None
    announce_ready(listener)
    while not sup.terminated:
        sup.poll()
        for pid, code in sup.reap():
            if -code in STOP_SIGNALS:  # Ctrl-C to the whole group, or someone stopping workers
                sup.terminated = True
            elif not sup.terminated:  # a worker never exits on its own: it crashed
                failed = f"prefork: worker {pid} exited with code {code}"
        if failed:
            break
    sup.shutdown()
    if failed:
        die(failed)


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    if name == "fork":
        serve_fork(listener, opts)
    else:
        serve_prefork(listener, opts)
