"""The built-in HTTP backends (issue 18): every server people deploy that netprof ships, serving the
TechEmpower plaintext test, checked on real processes and sockets.

Independent truth: the bytes each server sends back, read with a raw socket and parsed here (status
line, Content-Type, Content-Length 13, the body), and in the loaded runs the loader's own byte-exact
HTTP/1.1 parser (a malformed, truncated or non-2xx reply is an error there); the process tree before
and after SIGTERM (psutil); and for the probed runs what each server must do per request: a keep-alive
server at least one receive and one send, gunicorn's sync workers an accept per request (they close
every connection), http_asyncio one send for all the pipelined replies that arrived together.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from helpers import Backend, _missing_bpf, netprof_cli, require_bpf, run_netprof, wait_no_children
from netprof.backends import registry
from netprof.backends.http_common import BODY, PATH
from netprof.profiler.core.errors import InputError
from netprof.profiler.run.plan import RunConfig, validate

HTTP = [n for n in registry.names() if registry.get(n).protocol == "http"]
# gunicorn's sync worker answers one request per connection and closes it (by design: it does not
# keep alive); every other server keeps the connection open.
CLOSES_EVERY_RESPONSE = {"gunicorn_sync"}
RECV = ("recvfrom", "read", "recvmsg", "readv")
SEND = ("sendto", "write", "sendmsg", "writev")
ACCEPT = ("accept", "accept4")
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438  # x86_64 (and every architecture's generic table)


def _params(names) -> list:
    """One param per backend; skipped (with the registry's one-line reason) when this interpreter
    cannot import what it needs."""
    return [pytest.param(n, marks=pytest.mark.skipif(bool(why := registry.missing_requirement(registry.get(n))),
                                                     reason=why or "")) for n in names]


def request(path: str = PATH, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()


class Reader:
    """Reads HTTP/1.1 responses off a socket, one at a time, byte-exact (Content-Length framing: what
    every server here sends for this body)."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"connection closed with {self.buf!r} unparsed"
        self.buf += chunk

    def response(self) -> tuple[str, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            assert sep and name == name.strip(), f"bad header line {line!r} in {head!r}"
            assert name.lower() not in headers, f"header {name} twice in {head!r}"
            headers[name.lower()] = value.strip()
        assert "transfer-encoding" not in headers, head
        size = int(headers["content-length"])
        while len(self.buf) < size:
            self._fill()
        body, self.buf = self.buf[:size], self.buf[size:]
        return status, headers, body

    def closed(self) -> bool:
        """The server closed the connection and sent nothing more."""
        self.sock.settimeout(5)
        return not self.buf and self.sock.recv(1) == b""


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def check_plaintext(resp: tuple[str, dict[str, str], bytes]) -> None:
    status, headers, body = resp
    assert status == "HTTP/1.1 200 OK", resp
    assert headers["content-type"].split(";")[0].strip() == "text/plain", resp
    assert headers["content-length"] == "13" and body == BODY == b"Hello, World!", resp


class Server(Backend):
    """A Backend that is ready once entered, with the process tree it had at its ready line."""

    def __enter__(self):
        try:
            self.wait_ready(30)
            self.tree_at_ready = {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
        except BaseException:
            self.__exit__()  # a failed start must not leave the server running
            raise
        return self


# --------------------------------------------------------------------------------------------
# Raw sockets: the bytes, keep-alive, pipelining, the process tree, SIGTERM


@pytest.mark.parametrize("to", ["process", "group"])  # a user's kill PID; netprof's SIGTERM to the group
@pytest.mark.parametrize("name", _params(HTTP))
def test_pipelined_pair_byte_exact_then_sigterm(name, to):
    info = registry.get(name)
    with Server(name) as srv:
        with srv.connect() as s:
            s.sendall(request() + request())  # two requests in one segment: HTTP/1.1 pipelining
            reader = Reader(s)
            first = reader.response()
            check_plaintext(first)
            closes = first[1].get("connection", "").lower() == "close"
            assert closes == (name in CLOSES_EVERY_RESPONSE), first
            if closes:
                assert reader.closed(), "said Connection: close but kept the connection open"
            else:
                check_plaintext(reader.response())  # the second reply, in order, on the same connection
                s.sendall(request("/nope"))
                status, _, _ = reader.response()
                assert status.startswith("HTTP/1.1 404 "), status  # only the plaintext path is served
                s.sendall(request())
                check_plaintext(reader.response())  # still alive after the 404

        # A forking server must say so in the registry (the probes follow the tree only then), and
        # have forked its workers by `ready` (the probes find the tree that exists when they are
        # pointed at it; later forks only while they are attached).
        tree = psutil.Process(srv.proc.pid).children(recursive=True)
        assert bool(tree) == info.multiprocess, (name, tree)
        assert {p.pid for p in tree} == srv.tree_at_ready, "workers forked after the ready line"
        if to == "group":
            os.killpg(srv.proc.pid, signal.SIGTERM)
        else:
            srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(15) == 0, f"exit code {srv.proc.returncode}; stderr: {srv.err()}"
        deadline = time.monotonic() + 5
        while ((left := [p for p in tree if alive(p)]) or srv.group_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"children still alive after the server exited: {left}"
        assert not srv.group_alive(), f"processes of its group still alive: {srv.group()}"
        assert "Traceback" not in srv.err(), srv.err()


@pytest.mark.parametrize("name", _params(HTTP))
def test_work_runs_once_per_request(name):
    """--work sleep:20000 (a blocking 20 ms) per request: five requests take at least 100 ms, also
    when they arrive pipelined in one segment (once per read would take 20 ms)."""
    n, work_s = 5, 0.02
    with Server(name, "--work", f"sleep:{work_s * 1e6:g}") as srv:
        t0 = time.monotonic()
        if name in CLOSES_EVERY_RESPONSE:  # one request per connection
            for _ in range(n):
                with srv.connect() as s:
                    s.sendall(request())
                    check_plaintext(Reader(s).response())
        else:
            with srv.connect() as s:
                s.sendall(request() * n)
                reader = Reader(s)
                for _ in range(n):
                    check_plaintext(reader.response())
        elapsed = time.monotonic() - t0
    assert elapsed >= n * work_s * 0.95, f"{n} requests in {elapsed * 1e3:.1f} ms: the work did not run per request"


def _server_side_nodelay(srv: Server, client: socket.socket) -> list[int]:
    """TCP_NODELAY of the server's end of `client`'s connection, read from a copy of the server's
    fd (pidfd_getfd: Linux >= 5.6, root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    port, found = client.getsockname()[1], []
    root = psutil.Process(srv.proc.pid)
    for proc in [root, *root.children(recursive=True)]:
        for conn in proc.net_connections("tcp"):
            if not (conn.raddr and conn.raddr.port == port and conn.fd >= 0):
                continue
            pidfd = libc.syscall(SYS_PIDFD_OPEN, proc.pid, 0)
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, conn.fd, 0) if pidfd >= 0 else -1
            if pidfd >= 0:
                os.close(pidfd)
            if fd < 0:
                pytest.skip(f"pidfd_getfd: {os.strerror(ctypes.get_errno())}")
            with socket.socket(fileno=fd) as copy:
                found.append(copy.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    return found


@pytest.mark.parametrize("name", _params(HTTP))
def test_connections_have_tcp_nodelay(name):
    """Small replies must not wait for Nagle: every server sets TCP_NODELAY on its connections
    (uvicorn_h11 and http_asyncio through the harness's socket, see http_common.tcp_socket) — but
    tornado, which sets it to flush each response's end and clears it again after the response."""
    with Server(name) as srv, srv.connect() as c:
        c.sendall(request())
        check_plaintext(Reader(c).response())
        if name in CLOSES_EVERY_RESPONSE:
            c = srv.connect()  # the answered connection is gone; an accepted one, before any request
            time.sleep(0.2)
        assert _server_side_nodelay(srv, c) == [0 if name == "tornado_http" else 1]


def test_http_asyncio_parses_bodies_batches_and_close():
    """The floor's own parser: a request with a body (Content-Length) split across segments, a
    pipelined batch, and Connection: close."""
    with Server("http_asyncio") as srv, srv.connect() as s:
        reader = Reader(s)
        post = b"GET /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab"
        s.sendall(post)
        time.sleep(0.1)
        s.sendall(b"cde" + request() * 3)  # the rest of the body, then three more requests
        for _ in range(4):
            check_plaintext(reader.response())
        s.sendall(request(extra="Connection: close\r\n"))
        status, headers, body = reader.response()
        check_plaintext((status, headers, body))
        assert headers["connection"] == "close" and reader.closed()


# --------------------------------------------------------------------------------------------
# Through the CLI: the loader's HTTP/1.1 parser, 50 connections, pipelining


# Loaded through the CLI: an event loop and a pre-fork server (issue 49: every built-in HTTP backend loaded by
# netprof and by wrk is bench/http_vs_wrk.py --builtin; every backend's answers, pipelined included, are checked
# byte-exact above; netprof loads uvicorn_httptools in tests/test_breakdown_run.py and granian in
# tests/test_interpreters.py): asyncio's own parser and gunicorn's sync workers (a connection per request), the
# two whose syscalls per request are judged below. (uvicorn_httptools and granian_rsgi were loaded here too: ~4 s
# of the serial pass.)
LOADED = ["http_asyncio", "gunicorn_sync"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict:
    """One `netprof run` of the LOADED backends this interpreter can run, 50 connections at pipeline 1
    and 8, counting probes on where BPF is: its rows by backend, and what outlived it. One run, not one
    per backend: each run pays netprof's start-up, and the suite has a time limit."""
    names = [n for n in LOADED if not registry.missing_requirement(registry.get(n))]
    probes = [] if _missing_bpf() is None else ["--no-probes"]
    # the probes count over the whole 1-s window (--probe-share 1): the per-request syscall checks below hold
    # to ±5-10%, and a 0.09-s probed sub-window (the default share) holds too few requests for that; nor did 0.3 s
    # on a busy hour (gunicorn_sync, a connection per request: 58 requests, 64 accepts, 1.10 per request, the
    # connections in flight at the window's two edges not alike)
    p = run_netprof("run", *names, "--pipeline", "1,8", *probes, "-c", "50", "-d", "1", "-r", "1", "--warmup", "0.2",
                    "--probe-share", "1", "--no-report", "--wait", "--json",
                    "--out", str(tmp_path_factory.mktemp("http") / "out"), timeout=600)
    # Exit 1 is a failed cell: the test of that backend fails on its row, the others stand.
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    rows: dict[str, list[dict]] = {}
    for row in json.loads(p.stdout)["runs"]:
        rows.setdefault(row["backend"], []).append(row)
    return {"rows": rows, "left": wait_no_children()}


def check_rows(rows: list[dict], name: str, pipelines: list[int]) -> None:
    assert sorted(r["pipeline"] for r in rows) == pipelines, rows
    for row in rows:
        assert (row["backend"], row["status"], row["protocol"], row["reads"]) == (name, "ok", "http", "http"), row
        assert row["messages"] > 0 and row["msgs_per_sec"] > 0, row
        assert not any(row["errors"].values()), row["errors"]  # malformed, truncated, non-2xx, resets, ...
        assert row["connected"] == 50, row["connected"]
        # Not asserted: that every connection was served in the window. gunicorn's gevent worker
        # serves its 50 unevenly (Jain ~0.76 here; now and then one gets no reply in the window): a
        # finding for the report to explain, not a fault of its HTTP.


@pytest.mark.slow
@pytest.mark.parametrize("name", _params(LOADED))
def test_loaded_through_the_cli(loaded, name):
    check_rows(loaded["rows"].get(name, []), name, [1, 8])
    assert not loaded["left"], "a backend (or one of its workers) outlived the run"


@pytest.mark.slow
@pytest.mark.parametrize("name", _params(["http_asyncio", "gunicorn_sync"]))
def test_syscalls_per_request(loaded, name):
    require_bpf()  # the run had the probes then
    rows = {r["pipeline"]: r for r in loaded["rows"].get(name, [])}
    check_rows(list(rows.values()), name, [1, 8])

    def per_request(row, names):
        return sum(v for k, v in (row.get("syscalls_per_msg") or {}).items() if k in names)

    one, eight = rows[1], rows[8]
    # Each request arrives on its own at pipeline 1: at least one receive and one send for it.
    assert 0.95 <= per_request(one, RECV) <= 3 and 0.95 <= per_request(one, SEND) <= 3, one["syscalls_per_msg"]
    if name == "gunicorn_sync":
        # A new connection per request, accepted by the forked workers: the probes followed them.
        for row in (one, eight):
            assert 0.9 <= per_request(row, ACCEPT) <= 1.1, row["syscalls_per_msg"]
    else:
        # Keep-alive: no accept per request; pipelined replies that arrive together go out in one write.
        assert per_request(one, ACCEPT) < 0.01, one["syscalls_per_msg"]
        assert per_request(eight, SEND) < 0.5, eight["syscalls_per_msg"]


# --------------------------------------------------------------------------------------------
# The protocol comes from the backends; bad mixes are refused with one line


def test_run_protocol_comes_from_the_builtin_backends(tmp_path):
    cfg = validate(RunConfig(backends=["http_asyncio", "tornado_http"], out_dir=str(tmp_path / "o")))
    assert (cfg.protocol, cfg.request) == ("http", registry.HTTP_REQUEST)
    assert cfg.protocol_fields()["request"] == "GET /plaintext"
    cfg = validate(RunConfig(backends=["selector"], out_dir=str(tmp_path / "o")))
    assert (cfg.protocol, cfg.protocol_fields()) == ("echo", {})
    for bad, message in [
        ({"backends": ["http_asyncio", "selector"]}, "echo and HTTP backends cannot share a run"),
        ({"backends": ["aiohttp"], "protocol": "line"}, "speak http"),
        ({"backends": ["aiohttp"], "request": "GET /other"}, "answer 'GET /plaintext' only"),
        ({"backends": ["aiohttp"], "framings": ["stream"]}, "--framing is for the echo backends"),
    ]:
        with pytest.raises(InputError, match=message):
            validate(RunConfig(out_dir=str(tmp_path / "o"), **bad))


def test_mixing_echo_and_http_is_one_line_exit_2(tmp_path):
    p = netprof_cli("run", "http_asyncio", "selector", "--out", str(tmp_path / "o"))  # refused: starts nothing
    assert p.returncode == 2 and "echo and HTTP backends cannot share a run" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_missing_dependency_is_a_one_line_fix_not_a_crash():
    # As on an interpreter without granian: the import fails (sys.modules[...] = None makes it fail).
    code = ("import sys; sys.modules['granian'] = None; from netprof.backends.__main__ import main; "
            "sys.exit(main(['granian_asgi', '--port', '0']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    assert "needs granian" in p.stderr and registry.FIXES["granian"] in p.stderr, p.stderr
    # What `netprof list` shows for a backend whose dependency is not installed (no import tried).
    fake = registry.BackendInfo("x", "x", "x", "x", requires=("no_such_module_netprof",))
    assert "needs no_such_module_netprof, which is not installed" in registry.uninstalled_requirement(fake)
    assert [n for n in HTTP if registry.uninstalled_requirement(registry.get(n))] == \
        [n for n in HTTP if registry.missing_requirement(registry.get(n))]
