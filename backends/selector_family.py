"""Single-threaded readiness loops: `selector` (selectors module), `select` (select.select),
`epoll` (select.epoll), and the test-only `unfair`.

Each echoes with non-blocking sockets and handles what the textbook examples skip: a send() that
takes only part of the data (a 64 KiB echo can hit a full socket buffer). The rest is kept, the
socket waits for writability, and reading from it pauses until the rest is out (backpressure).

Reads go through common.Framer: one recv per readiness event (level-triggered, so the next wait
reports what is left), asking under message framing for the bytes that complete the message.
"""

from __future__ import annotations

import select
import selectors
import socket
import time

from .common import Framer, Options, announce_ready, die, exit_on_stop_signals, nodelay


class SelectorServer:
    """The echo server from the `selectors` documentation, plus partial sends.

    Also the per-worker loop of `prefork` and `prethread`, which share one listen socket: there a
    woken accept() may find the connection already taken by another worker, which is fine.
    """

    def __init__(self, listener, work, framer: Framer):
        self.listener, self.work, self.framer = listener, work, framer
        self.sel = selectors.DefaultSelector()
        self.pending: dict = {}  # conn -> bytes not yet sent
        listener.setblocking(False)
        self.sel.register(listener, selectors.EVENT_READ, self.accept)

    def serve_forever(self):
        while True:  # until a stop signal (SystemExit) or the process is killed
            for key, _ in self.sel.select():
                key.data(key.fileobj)

    def accept(self, listener):
        try:
            conn, _ = listener.accept()
        except BlockingIOError:  # another worker sharing the listen socket took it
            return None
        conn.setblocking(False)
        nodelay(conn)
        self.sel.register(conn, selectors.EVENT_READ, self.read)
        return conn

    def read(self, conn):
        try:
            data = self.framer.recv(conn)
        except BlockingIOError:
            return
        except ConnectionError:
            data = b""
        if data is None:  # part of a message: the rest comes with a later readiness event
            return
        if not data:
            self.close(conn)
            return
        if self.work:
            self.work()
        self.send(conn, data)

    def send(self, conn, data):
        try:
            sent = conn.send(data)
        except BlockingIOError:
            sent = 0
        except ConnectionError:
            self.close(conn)
            return
        if sent < len(data):
            self.pending[conn] = data[sent:]
            self.sel.modify(conn, selectors.EVENT_WRITE, self.write)

    def write(self, conn):
        data = self.pending.pop(conn)
        self.sel.modify(conn, selectors.EVENT_READ, self.read)
        self.send(conn, data)

    def close(self, conn):
        self.sel.unregister(conn)
        self.pending.pop(conn, None)
        self.framer.forget(conn)
        conn.close()


class UnfairServer(SelectorServer):
    """TEST ONLY, deliberately unfair: the oldest open connection is the favourite. Once it has
    data, the loop stays on it, echoing as long as its peer answers within STICK_QUIET, for up to
    STICK_BUDGET, while every other connection waits. Everyone is still served (one message each
    between the favourite's turns), so runs end and every echo stays correct."""

    # 5 ms, not 1: the favourite's peer must answer within it, and a test's Python peer on a busy host often
    # took longer than 1 ms (the favourite then got 27% of the messages, not most)
    STICK_QUIET_MS = 5
    STICK_BUDGET = 0.1  # seconds

    def __init__(self, *args):
        super().__init__(*args)
        self.conns: dict = {}  # insertion order = accept order

    def accept(self, listener):
        conn = super().accept(listener)
        if conn is not None:
            self.conns[conn] = None

    def close(self, conn):
        self.conns.pop(conn, None)
        super().close(conn)

    def read(self, conn):
        super().read(conn)
        if not self.conns or conn is not next(iter(self.conns)):
            return
        poller = select.poll()
        poller.register(conn, select.POLLIN)
        deadline = time.monotonic() + self.STICK_BUDGET
        while conn in self.conns and conn not in self.pending and time.monotonic() < deadline:
            if not poller.poll(self.STICK_QUIET_MS):
                break
            super().read(conn)


def serve_selector(listener, work, framer, server_cls=SelectorServer):
    server = server_cls(listener, work, framer)
    announce_ready(listener)
    server.serve_forever()


# --- select.select, as in the socket-patterns seed ---

FD_SETSIZE = 1024  # glibc's fd_set; select() cannot watch a higher fd number


def check_select_fd(conn):
    if conn.fileno() >= FD_SETSIZE:
        die(f"select() cannot watch fd {conn.fileno()} (FD_SETSIZE is {FD_SETSIZE}): the select "
            "backends serve at most about 1000 connections")


def accept_for_select(listener, blocking: bool):
    """A new connection for a select()-driven loop: within FD_SETSIZE, TCP_NODELAY."""
    conn, _ = listener.accept()
    check_select_fd(conn)
    conn.setblocking(blocking)
    nodelay(conn)
    return conn


def serve_select(listener, work, framer):
    readers, writers, pending = {listener}, set(), {}

    def close(sock):
        readers.discard(sock)
        writers.discard(sock)
        pending.pop(sock, None)
        framer.forget(sock)
        sock.close()

    def send(sock, data):
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        except ConnectionError:
            return close(sock)
        if sent < len(data):
            pending[sock] = data[sent:]
            readers.discard(sock)
            writers.add(sock)

    listener.setblocking(False)
    announce_ready(listener)
    while True:  # until a stop signal
        readable, writable, _ = select.select(readers, writers, [])
        for sock in writable:
            writers.discard(sock)
            readers.add(sock)
            send(sock, pending.pop(sock))
        for sock in readable:
            if sock is listener:
                readers.add(accept_for_select(listener, blocking=False))
                continue
            try:
                data = framer.recv(sock)
            except ConnectionError:
                data = b""
            if data is None:
                continue
            if not data:
                close(sock)
                continue
            if work:
                work()
            send(sock, data)


# --- select.epoll, used directly (level-triggered), as in the socket-patterns seed ---


def serve_epoll(listener, work, framer):
    ep = select.epoll()
    conns, pending = {}, {}  # fd -> socket, fd -> unsent bytes
    lfd = listener.fileno()

    def close(fd):
        ep.unregister(fd)
        pending.pop(fd, None)
        conn = conns.pop(fd)
        framer.forget(conn)
        conn.close()

    def send(fd, data):
        try:
            sent = conns[fd].send(data)
        except BlockingIOError:
            sent = 0
        except ConnectionError:
            return close(fd)
        if sent < len(data):
            pending[fd] = data[sent:]
            ep.modify(fd, select.EPOLLOUT)

    listener.setblocking(False)
    ep.register(lfd, select.EPOLLIN)
    announce_ready(listener)
    while True:  # until a stop signal
        for fd, events in ep.poll():
            if fd == lfd:
                conn, _ = listener.accept()
                conn.setblocking(False)
                nodelay(conn)
                conns[conn.fileno()] = conn
                ep.register(conn.fileno(), select.EPOLLIN)
            elif fd in pending:
                if events & (select.EPOLLERR | select.EPOLLHUP) and not events & select.EPOLLOUT:
                    close(fd)
                    continue
                ep.modify(fd, select.EPOLLIN)
                send(fd, pending.pop(fd))
            else:
                try:
                    data = framer.recv(conns[fd])
                except ConnectionError:
                    data = b""
                if data is None:
                    continue
                if not data:
                    close(fd)
                    continue
                if work:
                    work()
                send(fd, data)


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    exit_on_stop_signals()
    work, framer = opts.work.callable(), opts.framer()
    if name == "select":
        serve_select(listener, work, framer)
    elif name == "epoll":
        serve_epoll(listener, work, framer)
    elif name == "unfair":
        serve_selector(listener, work, framer, UnfairServer)
    else:
        serve_selector(listener, work, framer)
