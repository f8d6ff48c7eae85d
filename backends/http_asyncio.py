"""http_asyncio: the floor for HTTP on asyncio. An asyncio Protocol that parses just enough HTTP/1.1
itself (request line, Content-Length, Connection) and answers the plaintext test, on asyncio's own loop.

`data_received` gets whatever arrived: every complete request in it is answered, and the replies go
out in one `transport.write` (pipelined requests that arrive together cost one send). Keep-alive is
the default; `Connection: close`, HTTP/1.0 without keep-alive, or a request it cannot read ends the
connection after the reply. A body (Content-Length) is read and ignored; chunked request bodies are
refused with 501. The reply carries Server and Date, as the TechEmpower rules ask.
"""

from __future__ import annotations

import asyncio
import socket
import time
from email.utils import formatdate
from typing import Any

from . import http_common
from .common import BACKLOG, Options, announce_ready, nodelay

MAX_HEAD = 65536  # a request head longer than this is refused (431), as servers do

_date_second, _date_bytes = 0, b""  # the Date header line, formatted once per second, not per request


def _date_line() -> bytes:
    global _date_second, _date_bytes
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_bytes = now, f"Date: {formatdate(now, usegmt=True)}\r\n".encode()
    return _date_bytes


def _reply(status: bytes, body: bytes, date: bytes, close: bool, content_type: bytes = b"text/plain") -> bytes:
    return b"".join((b"HTTP/1.1 ", status, b"\r\nServer: netprof\r\n", date, b"Content-Type: ", content_type,
                     b"\r\nContent-Length: ", str(len(body)).encode(), b"\r\n",
                     b"Connection: close\r\n" if close else b"", b"\r\n", body))


PLAIN_BODY = http_common.BODY
OK = b"200 OK"
PATH = http_common.PATH.encode()


class HttpProtocol(asyncio.Protocol):
    __slots__ = ("transport", "buf", "work")

    def __init__(self, work):
        self.work = work
        self.buf = b""
        self.transport: Any = None  # the asyncio transport, from connection_made

    def connection_made(self, transport):
        nodelay(transport.get_extra_info("socket"))
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, close = 0, False
        replies: list[bytes] = []
        ok: bytes | None = None  # the keep-alive 200 reply, built at most once per call
        while not close:
            while buf.startswith(b"\r\n", pos):  # RFC 9112 2.2: empty lines before a request are ignored
                pos += 2
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                if len(buf) - pos > MAX_HEAD:
                    replies.append(_reply(b"431 Request Header Fields Too Large", b"", _date_line(), True))
                    close = True
                break
            status, body_len, closing = self.request(buf[pos:end])
            if end + 4 + body_len > len(buf):
                break  # the body is still on its way: answer once it is here
            pos, close = end + 4 + body_len, closing
            if status is OK:
                if self.work:
                    self.work()
                if not close:  # the common case
                    ok = ok or _reply(OK, PLAIN_BODY, _date_line(), False)
                    replies.append(ok)
                    continue
            replies.append(_reply(status, PLAIN_BODY if status is OK else b"", _date_line(), close))
        self.buf = b"" if close else buf[pos:]
        if replies:
            self.transport.write(b"".join(replies))
        if close:
            self.transport.close()

    @staticmethod
    def request(head: bytes) -> tuple[bytes, int, bool]:
        """(status, body length, close after the reply) of one request head."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return b"400 Bad Request", 0, True
        method, target, version = parts
        close = version == b"HTTP/1.0"
        body_len = 0
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                return b"400 Bad Request", 0, True
            name = name.lower()
            if name == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    return b"400 Bad Request", 0, True
                body_len = int(value)
            elif name == b"transfer-encoding":
                return b"501 Not Implemented", 0, True
            elif name == b"connection":
                tokens = {t.strip() for t in value.lower().split(b",")}
                close = b"close" in tokens or (close and b"keep-alive" not in tokens)
        if target.partition(b"?")[0] != PATH:
            return b"404 Not Found", body_len, close
        if method != b"GET":
            return b"405 Method Not Allowed", body_len, close
        return OK, body_len, close


def serve(name: str, listener: socket.socket, opts: Options) -> None:
    work = opts.work.callable()
    sock = http_common.tcp_socket(listener)
    port = sock.getsockname()[1]

    async def start():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: HttpProtocol(work), sock=sock, backlog=BACKLOG)
        announce_ready(port)
        return server.close

    http_common.run_asyncio(start)
