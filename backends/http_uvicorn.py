"""uvicorn with the bare ASGI app (http_common.asgi_app): `uvicorn_h11` (asyncio's loop, the h11 parser) and
`uvicorn_httptools` (uvloop, the httptools parser) — uvicorn's two pure-Python and C-accelerated
stacks. One worker, uvicorn's defaults otherwise (keep-alive 5 s, its Server and Date headers, a
0.1 s housekeeping tick), no access log and no lifespan (the app has nothing to set up).

uvicorn serves the harness's listen socket (`Server.run(sockets=[...])`, the way its gunicorn worker
does). On SIGTERM it shuts down gracefully, then exits 0 like every backend (uvicorn itself would
re-raise the signal into the default handler and die of it).
"""

from __future__ import annotations

import contextlib
import signal
import socket

import uvicorn

from . import http_common
from .common import BACKLOG, STOP_SIGNALS, Options, announce_ready

STACKS = {"uvicorn_h11": ("asyncio", "h11"), "uvicorn_httptools": ("uvloop", "httptools")}  # (loop, parser)


class Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        # uvicorn's own, less the re-raise of the caught signal once shut down
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:  # False when startup failed (uvicorn then exits on its own)
            announce_ready(sockets[0])


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    loop, http = STACKS[name]
    app = http_common.asgi_app(opts.work.callable())
    config = uvicorn.Config(app, loop=loop, http=http, ws="none", lifespan="off", interface="asgi3",
                            access_log=False, log_level="warning", backlog=BACKLOG)
    Server(config).run(sockets=[http_common.tcp_socket(listener)])
