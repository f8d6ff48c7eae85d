"""ZeroMQ backends (the aiozmq seed): a ROUTER bound at tcp://HOST:PORT sends every request's frames
back to the DEALER they came from. The loader drives them in its ZeroMQ mode (PROTOCOL.md).

- `zmq_raw`: one thread, blocking `recv_multipart` / `send_multipart` (the seed's "single thread raw zmq").
- `zmq_poller`: one thread, `zmq.Poller` over the ROUTER, one non-blocking receive per poll (the
  seed's "single thread zmq with poller").
- `zmq_threads`: the zguide's asynchronous server: `zmq.proxy` in the main thread joins the ROUTER to
  a DEALER bound on inproc, and `--workers` threads, each with a DEALER on that inproc endpoint, echo.
- `aiozmq_core`: aiozmq's transport + `ZmqProtocol` (`msg_received` -> `transport.write`) on asyncio's
  own loop (the seed's "core aiozmq").
- `aiozmq_rpc`: the aiozmq.rpc server path with an `echo` method, behind an adapter that turns each
  raw request into the call a real aiozmq.rpc client would send (see `_RawCallServer`).

`--msize` and `--framing` are accepted and recorded (common.Options) but change nothing here: a
ZeroMQ message is already a whole message (registry `reads="frames"`), so every receive yields one
request, `--work` runs once per request and its frames go back as they came.

Each serves until SIGTERM/SIGINT and then exits 0, however many peers came and went. A library that
fails at run time (aiozmq is old) makes the backend exit 1 with a one-line reason.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

import zmq

from .common import STOP_SIGNALS, Options, StopWakeup, die, exit_on_stop_signals, fatal, start_thread

WORKERS_ENDPOINT = "inproc://netprof-workers"


# --------------------------------------------------------------------------------------------
# Shared plumbing


def _endpoint(host: str, port: int | str) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def _port_of(endpoint) -> int:
    if isinstance(endpoint, bytes):
        endpoint = endpoint.decode()
    return int(endpoint.rstrip("\0").rpartition(":")[2])


def _router(ctx: zmq.Context, listener, host: str, want_port: int) -> tuple[zmq.Socket, int]:
    """A ROUTER bound where the backend was asked to listen. The harness hands every backend a TCP
    listen socket; ZeroMQ needs its own, so that one is closed first (port 0: ZeroMQ picks one)."""
    listener.close()
    sock = ctx.socket(zmq.ROUTER)
    if ":" in host:
        sock.ipv6 = True
    sock.bind(_endpoint(host, want_port if want_port else "*"))
    return sock, _port_of(sock.getsockopt(zmq.LAST_ENDPOINT))


def _ready(port: int) -> None:
    print(f"ready {os.getpid()} {port}", flush=True)


def _context() -> zmq.Context:
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)  # default for its sockets: exiting never waits for unsent replies
    return ctx


# --------------------------------------------------------------------------------------------
# pyzmq


# How long a blocking receive waits before looking at signals again. pyzmq runs Python signal
# handlers only when a call returns, and libzmq retries its wait internally when a signal lands while
# it is processing commands, so a SIGTERM could otherwise wait for the next message. The timeout only
# ever fires when no message comes for that long: under load it costs nothing.
IDLE_TICK_MS = 100


def serve_raw(router: zmq.Socket, port: int, work) -> None:
    """The main thread blocks in recv_multipart; SIGTERM raises SystemExit."""
    exit_on_stop_signals()
    _ready(port)
    router.rcvtimeo = IDLE_TICK_MS
    recv, send = router.recv_multipart, router.send_multipart
    while True:
        try:
            frames = recv()
        except zmq.Again:
            continue
        if work:
            work()
        send(frames)


def serve_poller(router: zmq.Socket, port: int, work) -> None:
    """zmq.Poller over the ROUTER and the signal wakeup socket (so SIGTERM always wakes the poll)."""
    wake = StopWakeup()
    _ready(port)
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(wake.sock, zmq.POLLIN)
    while True:
        for sock, _ in poller.poll():
            if sock is router:
                frames = router.recv_multipart(zmq.NOBLOCK)
                if work:
                    work()
                router.send_multipart(frames)
            elif wake.woken():
                return


def _worker(ctx: zmq.Context, work) -> None:
    sock = ctx.socket(zmq.DEALER)  # made in its own thread: ZeroMQ sockets are not thread-safe
    sock.connect(WORKERS_ENDPOINT)
    while True:
        frames = sock.recv_multipart()  # [peer identity, request frames...]
        if work:
            work()
        sock.send_multipart(frames)


def serve_threads(router: zmq.Socket, port: int, work, workers: int) -> None:
    """zmq.proxy (a C loop, GIL released) and the workers run in threads; the main thread waits for
    SIGTERM/SIGINT."""
    wake = StopWakeup()
    backend = router.context.socket(zmq.DEALER)
    backend.bind(WORKERS_ENDPOINT)
    for _ in range(workers):
        start_thread(_worker, router.context, work)
    start_thread(_proxy, router, backend)
    _ready(port)
    wake.wait()


def _proxy(router: zmq.Socket, backend: zmq.Socket) -> None:
    try:
        zmq.proxy(router, backend)
    except zmq.ContextTerminated:
        pass
    except Exception as e:  # noqa: BLE001 - a dead proxy must not leave a silent half-server
        fatal(f"zmq_threads: proxy failed: {type(e).__name__}: {e}")


# --------------------------------------------------------------------------------------------
# aiozmq


class _Stopper:
    """SIGTERM/SIGINT and a transport lost for a reason end the loop."""

    def __init__(self, loop):
        self.done = loop.create_future()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.stop)

    def stop(self, exc: BaseException | None = None):
        if not self.done.done():
            self.done.set_result(exc)


async def _serve_aiozmq(name: str, router: zmq.Socket, port: int, work) -> None:
    import aiozmq

    loop = asyncio.get_running_loop()
    stopper = _Stopper(loop)
    if name == "aiozmq_core":

        class Echo(aiozmq.ZmqProtocol):
            transport = None

            def connection_made(self, transport):
                self.transport = transport

            def msg_received(self, msg):
                if work:
                    work()
                self.transport.write(msg)

            def connection_lost(self, exc):
                stopper.stop(exc or RuntimeError("aiozmq closed the transport"))

        transport, _ = await aiozmq.create_zmq_connection(Echo, zmq.ROUTER, zmq_sock=router)
    else:
        transport = await _rpc_server(router, work, stopper)
    _ready(port)
    exc = await stopper.done
    if exc is not None:
        raise exc
    transport.close()


async def _rpc_server(router: zmq.Socket, work, stopper: _Stopper):
    import aiozmq
    import aiozmq.rpc
    from aiozmq.rpc.rpc import _ServerProtocol  # the server side of aiozmq.rpc.serve_rpc

    class Handler(aiozmq.rpc.AttrHandler):
        @aiozmq.rpc.method
        def echo(self, frames):
            if work:
                work()
            return frames

    class Unwrap:
        """The transport as the RPC server sees it: its reply [peer, header, msgpack(result)] goes
        out as [peer, *result]."""

        def __init__(self, transport, packer):
            self._t, self._packer = transport, packer
            self._error_at = _ServerProtocol.RESP_PREFIX.size + _ServerProtocol.RESP_SUFFIX.size - 1

        def write(self, frames):
            peer, header, body = frames
            if header[self._error_at]:  # the call raised: echo the packed error (a mismatch)
                self._t.write([peer, body])
            else:
                self._t.write([peer, *self._packer.unpackb(body)])

        def __getattr__(self, name):
            return getattr(self._t, name)

    class RawCallServer(_ServerProtocol):
        """A request [peer, frames...] becomes echo(frames) encoded as aiozmq.rpc's client encodes
        it (header struct, method name, msgpack args and kwargs) and takes the real server path:
        unpack, dispatch, signature check, call, pack the answer. The adapter adds one packb of the
        arguments and one unpackb of the answer: the client's share of an RPC."""

        req_id = 0
        pid = os.getpid() % 0x10000

        def connection_made(self, transport):
            super().connection_made(Unwrap(transport, self.packer))

        def msg_received(self, data):
            peer, *frames = data
            self.req_id = (self.req_id + 1) & 0xFFFFFFFF
            header = self.REQ.pack(self.pid, 0, self.req_id, time.time())
            super().msg_received([peer, header, b"echo", self.packer.packb((frames,)), self.packer.packb({})])

        def connection_lost(self, exc):
            super().connection_lost(exc)
            stopper.stop(exc or RuntimeError("aiozmq closed the transport"))

    loop = asyncio.get_running_loop()
    transport, _ = await aiozmq.create_zmq_connection(lambda: RawCallServer(loop, Handler()), zmq.ROUTER,
                                                      zmq_sock=router)
    return transport


# --------------------------------------------------------------------------------------------
# Entry point


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    # opts.msize / opts.framing: nothing to do, a ZeroMQ message is already a message (see above).
    work = opts.work.callable()
    ctx = _context()
    try:
        router, port = _router(ctx, listener, opts.host, opts.port)
    except zmq.ZMQError as e:
        die(f"{name}: cannot bind {_endpoint(opts.host, opts.port)}: {e}")
    try:
        if name.startswith("aiozmq"):
            _run_aiozmq(name, router, port, work)
        else:
            # Each prints `ready` once its stop-signal handling is in place.
            if name == "zmq_threads":
                serve_threads(router, port, work, opts.workers)
            else:
                {"zmq_raw": serve_raw, "zmq_poller": serve_poller}[name](router, port, work)
    except (SystemExit, KeyboardInterrupt):
        raise SystemExit(0) from None
    except zmq.ZMQError as e:
        die(f"{name}: ZeroMQ error: {e}")
    except Exception as e:  # a library that no longer works here: one line, exit 1
        die(f"{name}: {type(e).__name__}: {e} (Python {sys.version.split()[0]}, pyzmq {zmq.__version__})")


def _run_aiozmq(name: str, router: zmq.Socket, port: int, work) -> None:
    asyncio.run(_serve_aiozmq(name, router, port, work))
