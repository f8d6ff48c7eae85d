"""granian: HTTP in Rust (hyper on tokio) in a worker process, the Python app called per request.
`granian_asgi` serves the bare ASGI app (http_common.asgi_app, uvicorn's too, through granian's ASGI interface
without lifespan); `granian_rsgi` gives the same answer through RSGI, granian's own interface
(`protocol.response_bytes`). One worker process (granian's default) with one Rust runtime thread,
uvloop as the worker's Python loop (granian's `auto` would pick rloop, installed here for the rloop
backends; uvloop is the usual production choice and what uvicorn_httptools runs), HTTP/1 only (the
loader speaks HTTP/1.1), no websockets, no access log.

The listen socket: on Linux granian binds its own (SO_REUSEPORT, the main process reserving the
port, each worker binding and listening), and its public API takes an address, not a socket. So the
harness's listen socket is closed and granian binds the same host and port (free again at once:
nothing ever connected to it). A thread of the main process prints the ready line once
`GET /plaintext` is answered. The worker process is a child of the one netprof started
(registry multiprocess=True: the probes follow it); on SIGTERM (to the main process, or to the
whole group as netprof sends it) granian stops it and exits 0.
"""

from __future__ import annotations

import functools
import socket

from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops
from granian.log import LogLevels

from . import http_common
from .common import BACKLOG, Options, WorkModel

INTERFACES = {"granian_asgi": Interfaces.ASGINL, "granian_rsgi": Interfaces.RSGI}
KILL_TIMEOUT = 2  # s: a worker that has not stopped by then after SIGTERM is killed (default: wait forever)


def rsgi_app(work):
    headers = [("content-type", http_common.CONTENT_TYPE)]
    body, path = http_common.BODY, http_common.PATH

    async def app(scope, proto):
        if scope.path != path:
            proto.response_empty(404, [])
            return
        if work:
            work()
        proto.response_bytes(200, headers, body)

    return app


def load_app(name: str, work_spec: str):
    """Runs in the worker: the app (module-level and picklable, so any start method can carry it)."""
    work = WorkModel.parse(work_spec).callable()
    return rsgi_app(work) if name == "granian_rsgi" else http_common.asgi_app(work)


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    host, port = listener.getsockname()[:2]
    listener.close()  # granian binds this port itself (see above)
    server = Granian(f"{__name__}:load_app", address=host, port=port, interface=INTERFACES[name], workers=1,
                     runtime_threads=1, loop=Loops.uvloop, http=HTTPModes.http1, websockets=False,
                     backlog=BACKLOG, log_level=LogLevels.warning, workers_kill_timeout=KILL_TIMEOUT)
    http_common.announce_when_answering(host, port)
    # serve() installs its SIGTERM/SIGINT handlers, forks the worker and returns once both stopped.
    try:
        server.serve(target_loader=functools.partial(load_app, name, str(opts.work)), wrap_loader=False)
    except SystemExit as e:
        # netprof stops a backend with SIGTERM to its whole process group: when the worker has
        # stopped before granian's main process handled its own SIGTERM, granian counts that as a
        # worker failure and exits 1. Told to stop (interrupt_signal), it stopped: that is exit 0.
        if not (server.interrupt_signal and e.code == 1):
            raise
