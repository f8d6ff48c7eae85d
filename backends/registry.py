"""The backends under test: names, families, what each one is.

Importing this module imports no backend (no uvloop, gevent or C++ module): each backend's module
is imported only when that backend is served, so `netprof list` and argument validation work on a
machine that lacks an optional dependency.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
from dataclasses import dataclass

_PKG = __name__.rpartition(".")[0]  # "netprof.backends" once installed
CPP_MODULE = f"{_PKG}._cpp_backends"

# How to get each optional import; the one-line error names this fix.
FIXES = {
    "uvloop": "pip install uvloop",
    "gevent": "pip install gevent",
    CPP_MODULE: "make setup (builds the C++ backends)",
    "zmq": "pip install pyzmq",
    "aiozmq": "pip install 'aiozmq[rpc]'",
    "aiozmq.rpc": "pip install 'aiozmq[rpc]' (aiozmq.rpc needs msgpack)",
    # The HTTP servers, pinned in pyproject.toml: `make setup` installs them into netprof's venv; the
    # --python environments get the same versions from profiler/run/interp-requirements.txt.
    **{mod: f"pip install '{mod}=={pin}' (netprof's own venv: make setup)" for mod, pin in (
        ("aiohttp", "3.14.*"), ("uvicorn", "0.54.*"), ("h11", "0.16.*"), ("httptools", "0.9.*"),
        ("granian", "2.8.*"), ("gunicorn", "27.0.*"))},
}


READS = {
    "exact": "asks each receive for the bytes that complete the current message (recv(msize - have))",
    "split": "a callback gets whatever arrived and splits it into whole messages",
    "frames": "ZeroMQ frames: each receive is one whole message already",
    "http": "the server's own HTTP parser: --msize and --framing change nothing",
}

# What a backend speaks (BackendInfo.protocol) is what the loader speaks to it: "echo" (msize bytes
# echoed back) or "http", the TechEmpower plaintext test: this one request, answered
# `200 Hello, World!` (text/plain) by every HTTP backend (backends/http_common.py serves this path).
HTTP_REQUEST = "GET /plaintext"


class UnknownBackend(LookupError):
    pass


@dataclass(frozen=True)
class BackendInfo:
    name: str
    family: str
    description: str
    module: str  # dotted module with `serve(name, listener, opts) -> None`
    requires: tuple[str, ...] = ()  # optional imports this backend needs
    test_only: bool = False
    multiprocess: bool = False  # children do the serving: probes must follow the process tree
    # what it serves: "tcp" (byte echo) or "zmq" (a ROUTER echoing frames, driven as --zmq-client says:
    # RunConfig.loader_transport)
    transport: str = "tcp"
    # How it reads under message framing (READS): "exact" asks the kernel for msize - have,
    # "split" gets what arrived (a data_received callback) and splits it into messages, "frames"
    # receives ZeroMQ messages (already whole; --msize/--framing change nothing), "http" parses
    # HTTP requests its own way (the HTTP backends: --framing does not apply).
    reads: str = "exact"
    min_python: tuple[int, int] = (3, 11)  # the oldest CPython it runs on (pyproject: >= 3.11)
    # What the loader speaks to it: "echo" (the ping-pong) or "http" (HTTP_REQUEST over HTTP/1.1);
    # a run's protocol comes from its built-in backends (profiler/run/plan.py).
    protocol: str = "echo"


def _b(name, family, description, module, requires=(), **kw) -> BackendInfo:
    if "reads" not in kw:
        kw["reads"] = "frames" if kw.get("transport") == "zmq" else "http" if kw.get("protocol") == "http" else "exact"
    return BackendInfo(name, family, description, f"{_PKG}.{module}", tuple(requires), **kw)


def _http(name, family, description, module, requires=(), **kw) -> BackendInfo:
    return _b(name, family, description, module, requires, protocol="http", **kw)


_ALL = [
    # The network_ping_test seed's twelve.
    _b("asyncio", "asyncio", "asyncio streams: start_server, reader.read / writer.write + drain", "asyncio_family"),
    _b("asyncio_proto", "asyncio", "asyncio Protocol: data_received -> transport.write", "asyncio_family",
       reads="split"),
    _b("asyncio_sock", "asyncio", "asyncio raw sockets: loop.sock_accept / sock_recv / sock_sendall", "asyncio_family"),
    _b("uvloop", "uvloop", "streams (as asyncio) on uvloop.new_event_loop()", "asyncio_family", ["uvloop"]),
    _b("uvloop_proto", "uvloop", "Protocol (as asyncio_proto) on uvloop", "asyncio_family", ["uvloop"],
       reads="split"),
    _b("uvloop_sock", "uvloop", "raw sockets (as asyncio_sock) on uvloop", "asyncio_family", ["uvloop"]),
    _b("gevent", "gevent", "gevent StreamServer, one greenlet per connection", "gevent_backend", ["gevent"]),
    _b("selector", "selector", "one thread, selectors.DefaultSelector (epoll), callbacks per socket",
       "selector_family"),
    _b("thread", "threads", "one blocking thread per connection", "threads"),
    _b("cpp_epoll", "cpp", "C++ epoll loop, one thread (pybind11, GIL released)", "cpp", [CPP_MODULE]),
    _b("cpp_poll", "cpp", "C++ poll loop, one thread (pybind11, GIL released)", "cpp", [CPP_MODULE]),
    _b("cpp_th", "cpp", "C++ std::thread per connection, blocking sockets (pybind11)", "cpp", [CPP_MODULE]),
    _b("cpp_uring", "cpp", "C++ io_uring loop (liburing), one thread: one RECV and one SEND request per message, "
       "one io_uring_enter per batch (pybind11, GIL released)", "cpp", [CPP_MODULE]),
    # The socket-patterns seed.
    _b("select", "selector", "one thread, select.select() (at most ~1000 connections: FD_SETSIZE)", "selector_family"),
    _b("epoll", "selector", "one thread, select.epoll used directly, level-triggered", "selector_family"),
    _b("fork", "processes", "a forked process per connection, blocking sockets", "processes", multiprocess=True),
    _b("prefork", "processes", "--workers pre-forked processes sharing the listen socket, each a selector loop",
       "processes", multiprocess=True),
    _b("prethread", "threads", "--workers threads sharing the listen socket, each a selector loop", "threads"),
    _b("select_prethread", "threads", "select.select() reads, a pool of --workers sender threads replies",
       "threads"),
    # The aiozmq seed: ZeroMQ ROUTER backends, driven by the loader's ZeroMQ mode (DEALER sockets).
    _b("zmq_raw", "zeromq", "pyzmq ROUTER, one thread, blocking recv_multipart/send_multipart", "zmq_family",
       ["zmq"], transport="zmq"),
    _b("zmq_poller", "zeromq", "pyzmq ROUTER, one thread, zmq.Poller + non-blocking recv", "zmq_family",
       ["zmq"], transport="zmq"),
    _b("zmq_threads", "zeromq", "zmq.proxy ROUTER <-> inproc DEALER, --workers DEALER worker threads",
       "zmq_family", ["zmq"], transport="zmq"),
    _b("aiozmq_core", "zeromq", "aiozmq ROUTER transport + ZmqProtocol on asyncio (msg_received -> write)",
       "zmq_family", ["zmq", "aiozmq"], transport="zmq"),
    _b("aiozmq_rpc", "zeromq", "aiozmq.rpc server with an echo method (raw frames adapted to RPC calls)",
       "zmq_family", ["zmq", "aiozmq", "aiozmq.rpc"], transport="zmq"),
    # What people choose today (issue 20).
    _b("asyncio_eager", "asyncio", "asyncio streams with asyncio.eager_task_factory (Python >= 3.12: "
       "--python 3.12)", "asyncio_family", min_python=(3, 12)),
    # rloop's streams and Protocol styles (`rloop`, `rloop_proto`; asyncio_family serves them) are left
    # out: rloop 0.5's transport treats a read error such as ECONNRESET like EAGAIN, so a peer that
    # resets (the loader closing with a reply unread) never reaches connection_lost: the handler
    # waits forever and the fd leaks, one per reset connection.
    _b("rloop_sock", "rloop", "raw sockets (as asyncio_sock) on rloop.new_event_loop() (the Rust loop)",
       "asyncio_family", ["rloop"]),
    _b("trio", "trio", "trio.serve_listeners, a task per connection: SocketStream.receive_some / send_all",
       "trio_family", ["trio"]),
    _b("anyio_asyncio", "anyio", "anyio SocketListener.serve on asyncio: SocketStream.receive / send",
       "trio_family", ["anyio"]),
    _b("anyio_trio", "anyio", "anyio SocketListener.serve on trio: SocketStream.receive / send", "trio_family",
       ["anyio", "trio"]),
    _b("tornado", "tornado", "tornado TCPServer.handle_stream: IOStream.read_bytes / write", "tornado_backend",
       ["tornado"]),
    _b("twisted", "twisted", "Twisted Protocol.dataReceived -> transport.write, default (epoll) reactor",
       "twisted_family", ["twisted"], reads="split"),
    _b("twisted_asyncio", "twisted", "Twisted Protocol (as twisted) on the asyncio reactor", "twisted_family",
       ["twisted"], reads="split"),
    _b("socketserver", "threads", "socketserver.ThreadingTCPServer + StreamRequestHandler (rfile / wfile)",
       "socketserver_backend"),
    # The HTTP servers people deploy (issue 18), each serving the TechEmpower plaintext test
    # (HTTP_REQUEST), one worker pinned with the backend unless several workers are the point.
    _http("http_asyncio", "asyncio", "the floor: an asyncio Protocol parsing HTTP/1.1 itself; the replies to "
          "pipelined requests that arrive together go out in one write", "http_asyncio"),
    _http("aiohttp", "aiohttp", "aiohttp web.Application on asyncio's loop (AppRunner + SockSite)", "http_aiohttp",
          ["aiohttp"]),
    _http("uvicorn_h11", "uvicorn", "uvicorn, a bare ASGI app, asyncio's loop + h11", "http_uvicorn",
          ["uvicorn", "h11"]),
    _http("uvicorn_httptools", "uvicorn", "uvicorn, a bare ASGI app, uvloop + httptools", "http_uvicorn",
          ["uvicorn", "httptools", "uvloop"]),
    _http("granian_asgi", "granian", "granian (Rust HTTP/1), a bare ASGI app on uvloop, 1 worker process",
          "http_granian", ["granian", "uvloop"], multiprocess=True),
    _http("granian_rsgi", "granian", "granian (Rust HTTP/1), an RSGI app on uvloop, 1 worker process",
          "http_granian", ["granian", "uvloop"], multiprocess=True),
    _http("gunicorn_sync", "gunicorn", "gunicorn, --workers sync workers (default 2), a WSGI app (closes the "
          "connection after every response: sync workers do not keep alive)", "http_gunicorn", ["gunicorn"],
          multiprocess=True),
    _http("gunicorn_gevent", "gunicorn", "gunicorn, 1 gevent worker (keep-alive), a WSGI app", "http_gunicorn",
          ["gunicorn", "gevent"], multiprocess=True),
    _http("tornado_http", "tornado", "tornado.web.Application + HTTPServer on asyncio's loop", "http_tornado",
          ["tornado"]),
    # For netprof's own tests.
    _b("unfair", "selector", "TEST ONLY: selector loop that favours its oldest connection (starvation)",
       "selector_family", test_only=True),
]

BACKENDS: dict[str, BackendInfo] = {b.name: b for b in _ALL}


def names(include_test_only: bool = False) -> list[str]:
    return [b.name for b in _ALL if include_test_only or not b.test_only]


def get(name: str) -> BackendInfo:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; known: {', '.join(names(True))}") from None


# The CPython versions netprof's interpreter environments are locked for (`--python`).
PYTHONS = ((3, 11), (3, 12), (3, 13))


def python_requirement(info: BackendInfo) -> str | None:
    """None if this interpreter is new enough for the backend, else a one-line message naming
    the fix (imports nothing: cheap enough for listings and test collection)."""
    if sys.version_info[:2] >= info.min_python:
        return None
    need = ".".join(map(str, info.min_python))
    newer = " or ".join(f"{major}.{minor}" for major, minor in PYTHONS if (major, minor) >= info.min_python)
    return (f"backend {info.name!r} needs Python >= {need} (this is {platform.python_version()}): "
            f"run it with --python {newer or need}")


def uninstalled_requirement(info: BackendInfo) -> str | None:
    """python_requirement, or a one-line message naming the fix when an optional import of the
    backend is not installed on this interpreter. Imports none of them (a module search only:
    cheap enough for `netprof list`); missing_requirement is the full check."""
    if why := python_requirement(info):
        return why
    for mod in info.requires:
        try:
            # a top-level name is searched without importing anything; the C++ module's parent is
            # netprof.backends, imported already
            found = importlib.util.find_spec(mod if mod == CPP_MODULE else mod.partition(".")[0]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            what = "the C++ backends module" if mod == CPP_MODULE else mod
            return f"needs {what}, which is not installed; fix: {FIXES.get(mod, 'pip install ' + mod)}"
    return None


def missing_requirement(info: BackendInfo) -> str | None:
    """None if the backend can run on this interpreter (version, optional imports), else a
    one-line message naming the fix. (This imports them, so call it only when about to serve or
    when checking a machine.)"""
    if why := python_requirement(info):
        return why
    for mod in info.requires:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            what = "the C++ backends module" if mod == CPP_MODULE else mod
            return (f"backend {info.name!r} needs {what}, which cannot be imported ({e}); "
                    f"fix: {FIXES.get(mod, 'pip install ' + mod)}")
    return None
