"""Tornado: a `tornado.tcpserver.TCPServer` on the harness's listen socket (`add_sockets`), one
`handle_stream` coroutine per connection reading with `IOStream.read_bytes` and echoing with
`write`.

Framing (common.Framer): message framing asks for one whole message, `read_bytes(msize)`, which
completes only when msize bytes are there (registry reads="exact"; IOStream itself reads the socket
in chunks into its buffer); stream framing takes what came, `read_bytes(65536, partial=True)`.

Tornado 6 runs on asyncio's loop: the process is run by asyncio_family.run (the same stop-signal
handling as the asyncio backends).
"""

from __future__ import annotations

import socket

from tornado.iostream import StreamClosedError
from tornado.tcpserver import TCPServer

from . import asyncio_family
from .common import Options


class EchoServer(TCPServer):
    def __init__(self, work, framer):
        super().__init__()
        self.work = work
        self.size, self.partial = framer.first, framer.stream  # msize, or 64 KiB partial

    async def handle_stream(self, stream, address):
        stream.set_nodelay(True)
        work, size, partial = self.work, self.size, self.partial
        try:
            while True:
                data = await stream.read_bytes(size, partial=partial)
                if work:
                    work()
                await stream.write(data)
        except StreamClosedError:  # EOF (also in the middle of a message) or reset
            pass
        finally:
            stream.close()


async def start(listener, work, framer):
    listener.setblocking(False)  # as tornado.netutil.bind_sockets leaves its sockets
    server = EchoServer(work, framer)
    server.add_sockets([listener])
    return server.stop


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    asyncio_family.run(start, listener, opts)
