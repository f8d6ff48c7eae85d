"""aiohttp: a `web.Application` with one route, on asyncio's own loop (what `web.run_app` runs),
started the programmatic way (`AppRunner` + `SockSite` on the harness's listen socket).

aiohttp sets TCP_NODELAY on every connection itself, keeps connections alive, and answers pipelined
requests in order. No access log (a production setting, and it would write per request).
"""

from __future__ import annotations

import socket

from aiohttp import web

from . import http_common
from .common import BACKLOG, Options, announce_ready

SHUTDOWN_TIMEOUT = 1.0  # on SIGTERM, in-flight handlers get this long (aiohttp's default: 60 s)


def app(work) -> web.Application:
    async def plaintext(request: web.Request) -> web.Response:
        if work:
            work()
        return web.Response(body=http_common.BODY, content_type=http_common.CONTENT_TYPE)

    application = web.Application()
    application.router.add_get(http_common.PATH, plaintext)
    return application


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    work = opts.work.callable()
    sock = http_common.tcp_socket(listener)

    async def start():
        runner = web.AppRunner(app(work), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        await web.SockSite(runner, sock, backlog=BACKLOG).start()
        announce_ready(sock)
        return runner.cleanup

    http_common.run_asyncio(start)
