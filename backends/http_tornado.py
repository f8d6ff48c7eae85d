"""tornado_http: a `tornado.web.Application` with one `RequestHandler`, served by tornado's
`HTTPServer` on the harness's listen socket (`add_sockets`), on asyncio's loop (tornado 6 runs on it).

Tornado's defaults stay: keep-alive, its Server/Date/Etag headers (the Etag is a hash of the body,
computed per request), no access log unless logging is configured (it is not), and its TCP_NODELAY
dance: on to flush the end of each response, off again once it is finished (two setsockopt calls
per request; between requests the connection has Nagle's algorithm on).
"""

from __future__ import annotations

import socket

from tornado.httpserver import HTTPServer
from tornado.web import Application, RequestHandler

from . import http_common
from .common import Options, announce_ready


class Plaintext(RequestHandler):
    def initialize(self, work) -> None:
        self.work = work

    def get(self) -> None:
        if self.work:
            self.work()
        self.set_header("Content-Type", http_common.CONTENT_TYPE)
        self.finish(http_common.BODY)


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    work = opts.work.callable()
    sock = http_common.tcp_socket(listener)
    sock.setblocking(False)  # as tornado.netutil.bind_sockets leaves its sockets

    async def start():
        server = HTTPServer(Application([(http_common.PATH, Plaintext, {"work": work})]))
        server.add_sockets([sock])
        announce_ready(sock)

        async def stop():
            server.stop()
            await server.close_all_connections()

        return stop

    http_common.run_asyncio(start)
