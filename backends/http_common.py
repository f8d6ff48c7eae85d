"""What the HTTP backends share: the TechEmpower plaintext test they all serve, and the plumbing that
is harness rather than server.

Every HTTP backend answers `GET /plaintext` (registry.HTTP_REQUEST) with `200`, `Content-Type:
text/plain` and the 13 bytes `Hello, World!`, over HTTP/1.1 keep-alive where the server keeps
connections alive; anything else gets the server's own 404/405. `--work` runs once per request,
inside the request's handler. Each serves until SIGTERM/SIGINT, then exits 0 with no child left;
`--msize` and `--framing` change nothing (the server parses HTTP its own way: registry reads="http").
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import threading
import time

from . import registry
from .common import STOP_SIGNALS

PATH = registry.HTTP_REQUEST.split()[1]
BODY = b"Hello, World!"
CONTENT_TYPE = "text/plain"
READY_TIMEOUT = 30.0  # a server still not answering by then never announces (netprof's wait fails first)


def tcp_socket(listener: socket.socket) -> socket.socket:
    """The listener as a socket object that knows it is TCP. common.listen_socket's socket reports
    proto 0, and asyncio sets TCP_NODELAY on accepted connections only when the listening socket's
    proto is IPPROTO_TCP (as create_server's own sockets, made from getaddrinfo, report): re-wrapped
    around the same fd, the kernel is asked, so these servers get the TCP_NODELAY they get when they
    bind themselves."""
    return socket.socket(fileno=listener.detach())


def run_asyncio(start, loop_factory=None) -> None:
    """Serve on an asyncio loop until SIGTERM/SIGINT. `start()` is a coroutine that starts serving,
    announces ready and returns a function (plain or async) that stops the server."""

    async def main():
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stopping.set)
        stop = await start()
        await stopping.wait()
        result = stop()
        if inspect.isawaitable(result):
            await result

    # asyncio.Runner cancels whatever handler tasks are still pending on the way out.
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())


def asgi_app(work):
    """The bare ASGI app uvicorn and granian serve: GET /plaintext, else 404 (no lifespan)."""
    start = {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", CONTENT_TYPE.encode()), (b"content-length", str(len(BODY)).encode())]}
    body = {"type": "http.response.body", "body": BODY}
    not_found = {"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]}
    empty = {"type": "http.response.body", "body": b""}

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] != PATH:
            await send(not_found)
            await send(empty)
            return
        if work:
            work()
        await send(start)
        await send(body)

    return app


def announce_ready_as(pid: int, port: int) -> None:
    """common.announce_ready's line on behalf of another process: a server whose worker knows it is
    ready says so for the process netprof started (its parent)."""
    print(f"ready {pid} {port}", flush=True)


def plaintext_answered(host: str, port: int, timeout: float = 1.0) -> bool:
    """One `GET /plaintext` on a fresh connection got a complete 200 with the body (whatever headers)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect((host, port))  # no getaddrinfo: this may run in a thread while the process forks
            s.sendall(f"GET {PATH} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
                if reply.endswith(BODY):
                    break
    except OSError:
        return False
    return reply.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 ")) and reply.endswith(BODY)


def announce_when_answering(host: str, port: int) -> threading.Thread:
    """For a server that binds its own socket in a worker (granian): a daemon thread that announces
    ready (for this process) once `GET /plaintext` is answered; before that, connections would be
    refused or wait for a worker still starting."""

    def poll():
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if plaintext_answered(host, port):
                announce_ready_as(os.getpid(), port)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=poll, name="netprof-ready", daemon=True)
    thread.start()
    return thread
