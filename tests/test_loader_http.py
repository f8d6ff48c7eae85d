"""The loader's request/response protocols (`http`, `line`) against real servers it did not write.

The servers below are small asyncio Protocol servers, each in its own process: an HTTP/1.1 keep-alive
server (Content-Length or chunked replies, optionally closing after N replies, a 500 path, a 404 for
anything unknown, a path that echoes the request it got) and a line server. The loader is driven
through `Loader.start` + `RunRequest(protocol=...)`, with short runs.
"""

from __future__ import annotations

import sys

import pytest
from test_loader import ECHO_SERVER

from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run.loader_client import Loader, LoaderError, RunRequest

pytestmark = pytest.mark.concurrent  # the loader against small servers: what it parsed and counted, not how fast

HTTP_SERVER = r"""
import asyncio, sys
opts = dict(a.split("=", 1) for a in sys.argv[1:])
chunked = opts.get("chunked") == "1"
close_after = int(opts.get("close_after", "0"))  # close after N replies (no Connection: close header)
say_close = opts.get("say_close") == "1"         # every reply says Connection: close, then closes

class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf, self.replies = transport, b"", 0

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            fields = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
            size = int(fields.get("content-length", "0"))
            if len(self.buf) < end + 4 + size:
                return
            body = self.buf[end + 4 : end + 4 + size]
            self.buf = self.buf[end + 4 + size :]
            method, path, version = lines[0].split(" ")
            if path == "/plaintext":
                status, payload = "200 OK", b"Hello, World!"
            elif path == "/error":
                status, payload = "500 Internal Server Error", b"oops"
            elif path == "/echo":  # the request as the server saw it
                status, payload = "200 OK", head.encode("latin-1") + b"\r\n\r\n" + body
            else:
                status, payload = "404 Not Found", b"no such path"
            self.replies += 1
            out = [f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n".encode()]
            if say_close:
                out.append(b"Connection: close\r\n")
            if method == "HEAD":
                out.append(f"Content-Length: {len(payload)}\r\n\r\n".encode())
            elif chunked:
                half = len(payload) // 2
                out.append(b"Transfer-Encoding: chunked\r\n\r\n")
                for part in (payload[:half], payload[half:]):
                    if part:
                        out.append(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
                out.append(b"0\r\nX-Trailer: done\r\n\r\n")
            else:
                out.append(f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            self.t.write(b"".join(out))
            if say_close or (close_after and self.replies >= close_after):
                self.t.close()
                return

async def main():
    srv = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", 0, backlog=1024)
    print("ready", srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(600)  # bounded: a forgotten server does not live forever

asyncio.run(main())
"""

LINE_SERVER = r"""
import asyncio, sys
close_after = int(sys.argv[1]) if len(sys.argv) > 1 else 0

class Line(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf, self.replies = transport, b"", 0

    def data_received(self, data):
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            self.t.write(b"+" + line.rstrip(b"\r") + b"\r\n")
            self.replies += 1
            if close_after and self.replies >= close_after:
                self.t.close()
                return

async def main():
    srv = await asyncio.get_running_loop().create_server(Line, "127.0.0.1", 0, backlog=1024)
    print("ready", srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""

HTTP_ERROR_KINDS = {"connect", "reset", "timeout", "mismatch", "malformed", "truncated", "unframed",
                    "http_3xx", "http_4xx", "http_5xx"}


def start_server(group: ProcessGroup, source: str, *args: str) -> int:
    proc = group.spawn("server", [sys.executable, "-c", source, *args])
    return int(proc.wait_line("ready", 10).split()[1])


def run(loader: Loader, port: int, **kw) -> dict:
    kw.setdefault("connections", 4)
    kw.setdefault("duration", 1.0)
    kw.setdefault("warmup", 0.2)
    return loader.run(RunRequest(target=f"127.0.0.1:{port}", **kw), timeout=30)


def check(s: dict, protocol: str) -> None:
    """Invariants of a complete request/response run."""
    assert s["protocol"] == protocol
    assert sum(s["per_conn_messages"]) == s["messages"]
    assert s["latency_us"]["count"] == s["messages"]
    assert s["request_bytes"] > 0
    if protocol == "http":
        assert set(s["errors"]) == HTTP_ERROR_KINDS
        assert set(s["status"]) == {"1xx", "2xx", "3xx", "4xx", "5xx"}
        assert s["status"]["2xx"] == s["messages"]  # a message is one 2xx exchange in the window
    else:
        assert set(s["errors"]) == {"connect", "reset", "timeout", "mismatch", "malformed", "truncated"}
        assert "status" not in s


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_http_keep_alive(group, loader, chunked):
    port = start_server(group, HTTP_SERVER, f"chunked={chunked}")
    s = run(loader, port, protocol="http", request="GET /plaintext", pipeline=1)
    check(s, "http")
    assert s["messages"] > 100
    assert min(s["per_conn_messages"]) > 0
    assert s["reconnects"] == 0
    assert not any(s["errors"].values()), s["errors"]
    assert "error_sample" not in s
    assert s["status"]["2xx"] > 100 and s["status"]["4xx"] == s["status"]["5xx"] == 0
    assert 0 < s["latency_us"]["p50"] <= s["latency_us"]["p99"]


def test_http_pipelining(group, loader):
    port = start_server(group, HTTP_SERVER, "chunked=1")
    s = run(loader, port, protocol="http", request="GET /plaintext", pipeline=8, connections=2)
    check(s, "http")
    assert s["messages"] > 100
    assert not any(s["errors"].values()), s["errors"]
    assert s["reconnects"] == 0  # the server keeps every connection open


def test_http_request_fields_reach_the_server(group, loader):
    """request, headers, body and host go out as given (the /echo path sends the request back)."""
    port = start_server(group, HTTP_SERVER)
    s = run(loader, port, protocol="http", request="POST /echo", headers=["X-Test: 42", "Accept: */*"],
            body='{"k": "v"}', host="app.test", connections=1, duration=0.3)
    check(s, "http")
    assert s["messages"] > 0 and not any(s["errors"].values())
    assert s["reconnects"] == 0
    expected = (b"POST /echo HTTP/1.1\r\nHost: app.test\r\nX-Test: 42\r\nAccept: */*\r\n"
                b"Content-Length: 10\r\n\r\n")
    assert s["request_bytes"] == len(expected) + 10


def test_http_server_closes_after_n(group, loader):
    """A keep-alive connection the server closes after 10 replies is reopened and counted; its
    unanswered pipelined requests are sent again, so nothing is an error."""
    port = start_server(group, HTTP_SERVER, "close_after=10")
    s = run(loader, port, protocol="http", request="GET /plaintext", pipeline=2)
    check(s, "http")
    assert s["messages"] > 50
    assert s["reconnects"] >= s["messages"] // 10 - 8
    assert not any(s["errors"].values()), s["errors"]


def test_http_connection_close(group, loader):
    port = start_server(group, HTTP_SERVER, "say_close=1")
    s = run(loader, port, protocol="http", request="GET /plaintext", connections=2)
    check(s, "http")
    assert s["messages"] > 10
    assert s["reconnects"] >= s["messages"]
    assert not any(s["errors"].values()), s["errors"]


@pytest.mark.parametrize("path,kind,cls", [("/error", "http_5xx", "5xx"), ("/missing", "http_4xx", "4xx")])
def test_http_error_statuses(group, loader, path, kind, cls):
    port = start_server(group, HTTP_SERVER)
    s = run(loader, port, protocol="http", request=f"GET {path}", connections=2, duration=0.5)
    check(s, "http")
    assert s["messages"] == 0  # non-2xx exchanges are errors, not messages
    assert s["errors"][kind] > 10
    assert s["status"][cls] > 10
    assert s["error_sample"].startswith(f"{kind}: status ")
    assert s["reconnects"] == 0


def test_http_head(group, loader):
    """Replies to HEAD carry a Content-Length but no body."""
    port = start_server(group, HTTP_SERVER)
    s = run(loader, port, protocol="http", request="HEAD /plaintext", connections=2, duration=0.5)
    check(s, "http")
    assert s["messages"] > 10 and not any(s["errors"].values()), s["errors"]
    assert s["reconnects"] == 0  # a body-less reply read as complete: no connection given up


def test_http_against_an_echo_server(group, loader):
    """--protocol http against a server that is not HTTP: every reply is malformed, named in the sample."""
    port = start_server(group, ECHO_SERVER, "echo", "0")
    s = run(loader, port, protocol="http", request="GET /plaintext", connections=2, duration=0.5)
    check(s, "http")
    assert s["messages"] == 0
    assert s["errors"]["malformed"] > 0
    assert s["reconnects"] > 0
    assert s["error_sample"].startswith("malformed: ")
    assert "GET /plaintext HTTP/1.1" in s["error_sample"]


def test_http_bad_fields(loader):
    for kw, words in [
        (dict(protocol="gopher"), "protocol must be"),
        (dict(protocol="http", request="GET"), "METHOD /path"),
        (dict(protocol="http", headers=["no colon"]), "Name: value"),
        (dict(protocol="http", headers=["Content-Length: 3"]), "frames the request"),
        (dict(request="GET /"), "needs protocol"),
        (dict(protocol="line"), "needs a line"),
        (dict(protocol="line", line="a\nb"), "newline"),
        (dict(protocol="http", transport="zmq"), "transport"),
    ]:
        with pytest.raises(LoaderError) as e:
            loader.run(RunRequest(target="127.0.0.1:9", connections=1, duration=0.2, **kw), timeout=10)
        assert e.value.kind == "bad_request"
        assert words in e.value.message, (kw, e.value.message)
    assert loader.ping()["event"] == "pong"


def test_line(group, loader):
    port = start_server(group, LINE_SERVER)
    s = run(loader, port, protocol="line", line="PING", pipeline=4, connections=3)
    check(s, "line")
    assert s["messages"] > 100
    assert s["request_bytes"] == 5
    assert s["reconnects"] == 0
    assert not any(s["errors"].values()), s["errors"]


def test_line_server_closes_after_n(group, loader):
    port = start_server(group, LINE_SERVER, "5")
    s = run(loader, port, protocol="line", line="get k\r", pipeline=2, connections=2)
    check(s, "line")
    assert s["messages"] > 20
    assert s["reconnects"] >= s["messages"] // 5 - 4
    assert not any(s["errors"].values()), s["errors"]


def test_request_json_only_carries_what_is_set():
    base = RunRequest(target="127.0.0.1:1", connections=1).to_json()
    assert not {"protocol", "request", "headers", "body", "host", "line"} & set(base)
    http = RunRequest(target="127.0.0.1:1", connections=1, protocol="http", request="GET /x",
                      headers=["A: 1"], body="", host="h").to_json()
    assert (http["protocol"], http["request"], http["headers"], http["body"], http["host"]) == (
        "http", "GET /x", ["A: 1"], "", "h")
    assert "line" not in http
    line = RunRequest(target="127.0.0.1:1", connections=1, protocol="line", line="PING").to_json()
    assert (line["protocol"], line["line"]) == ("line", "PING")
    assert not {"request", "headers", "body", "host"} & set(line)
