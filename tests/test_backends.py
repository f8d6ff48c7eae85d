"""The backends under test, as real processes on real sockets (issue 3).

Every backend: `ready` line, byte-exact echo over 50 concurrent connections with split and merged
sends (any sizes under --framing stream; whole 64-byte messages cut at random points under the
default message framing), exit 0 on its own once the peer closed everything, exit 0 on SIGTERM, no process left
behind (fork/prefork included). Plus the work model, the unfair test backend, the missing-
dependency error, and (once the loader works) a 2 s loader run with zero mismatches.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import backend_params
from netprof.backends import registry
from netprof.backends.common import BadWorkSpec, WorkModel

BACKENDS = [n for n in registry.names() if registry.get(n).transport == "tcp"]  # ZeroMQ: test_zmq.py
RUNNABLE = backend_params(BACKENDS)  # asyncio_eager skips on 3.11, with the reason
SIZES = (1, 64, 1000, 65536)


class Backend:
    """`python -m netprof.backends NAME --port 0 ...` in its own session (so its process group
    holds it and every child it forks); always killed and reaped on the way out."""

    def __init__(self, name: str, *args: str, env: dict | None = None):
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "netprof.backends", name, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, start_new_session=True, env=env)
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 20) -> int:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        assert line.startswith("ready "), f"no ready line: {line!r}; stderr: {self.err()}"
        _, pid, port = line.split()
        assert int(pid) == self.pid
        self.port = int(port)
        return self.port

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def err(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"backend still running {timeout} s after its last connection closed; "
                        f"stderr: {self.err()}")

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 3
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not self.group_alive(), "processes of the backend's group are still alive"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.group_alive():
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(5)
        self.proc.stdout.close()
        self.stderr.close()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        assert chunk, f"connection closed after {got} of {n} echoed bytes"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def exercise(sock: socket.socket, idx: int) -> None:
    """Whole, split (half, pause, rest) and merged (two sends, one reply read) messages of every
    size; payloads are distinct per connection, so crossed wires show too."""
    rng = random.Random(idx)
    for size in SIZES:
        payload = rng.randbytes(size)
        sock.sendall(payload)
        assert recv_exact(sock, size) == payload, f"conn {idx}: whole {size} B echo differs"
        if size > 1:
            payload = rng.randbytes(size)
            sock.sendall(payload[: size // 2])
            time.sleep(0.005)
            sock.sendall(payload[size // 2:])
            assert recv_exact(sock, size) == payload, f"conn {idx}: split {size} B echo differs"
        a, b = rng.randbytes(size), rng.randbytes(size)
        sock.sendall(a)
        sock.sendall(b)
        assert recv_exact(sock, 2 * size) == a + b, f"conn {idx}: merged {size} B echo differs"


def send_messages(sock: socket.socket, stream: bytes, lengths, msize: int = 64, after=None) -> None:
    """Send `stream` (whole `msize`-byte messages) in sends of the sizes `lengths` yields; after
    each, exactly the messages completed so far must come back, byte-exact. `after(sent)` runs
    after each send (and its echo)."""
    sent = echoed = 0
    for n in lengths:
        sock.sendall(stream[sent:sent + n])
        sent = min(sent + n, len(stream))
        complete = sent - sent % msize
        if complete > echoed:
            assert recv_exact(sock, complete - echoed) == stream[echoed:complete], \
                f"echo of bytes {echoed}..{complete} differs ({msize}-byte messages)"
            echoed = complete
        if after:
            after(sent)
        if sent == len(stream):
            return


def exercise_messages(sock: socket.socket, idx: int, msize: int = 64, messages: int = 60) -> None:
    """Message framing: whole messages, their concatenation cut at random points (so one send
    holds part of a message, or the end of one and the start of the next, or several), with random
    short pauses."""
    rng = random.Random(1000 + idx)

    def lengths():
        while True:
            yield rng.choice((1, rng.randint(1, msize - 1), msize, rng.randint(msize, 5 * msize)))

    def pause(_):
        if rng.random() < 0.3:
            time.sleep(rng.choice((0.0005, 0.002)))

    send_messages(sock, rng.randbytes(msize * messages), lengths(), msize, pause)


def ping_pong(backend: Backend, conns: int, seconds: float) -> list[int]:
    """Strict ping-pong (one 64 B message in flight per connection); messages per connection."""
    socks = [backend.connect() for _ in range(conns)]
    counts = [0] * conns
    start = threading.Barrier(conns)

    def run(i):
        s, msg = socks[i], bytes([i]) * 64
        start.wait()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            s.sendall(msg)
            assert recv_exact(s, 64) == msg
            counts[i] += 1

    with ThreadPoolExecutor(conns) as pool:
        list(pool.map(run, range(conns)))
    for s in socks:
        s.close()
    return counts


# --------------------------------------------------------------------------------------------
# Registry, command line


def test_registry():
    assert set(BACKENDS) == {
        "asyncio", "asyncio_proto", "asyncio_sock", "uvloop", "uvloop_proto", "uvloop_sock", "gevent",
        "selector", "thread", "cpp_epoll", "cpp_poll", "cpp_th", "select", "epoll", "fork", "prefork",
        "prethread", "select_prethread",
        # issue 20
        "asyncio_eager", "rloop_sock", "trio", "anyio_asyncio", "anyio_trio", "tornado",
        "twisted", "twisted_asyncio", "socketserver"}
    assert "unfair" in registry.names(include_test_only=True) and registry.get("unfair").test_only
    assert registry.get("prefork").multiprocess and not registry.get("thread").multiprocess
    assert {b.reads for b in registry.BACKENDS.values()} <= set(registry.READS)
    assert [n for n, b in registry.BACKENDS.items() if b.reads == "split"] == [
        "asyncio_proto", "uvloop_proto", "twisted", "twisted_asyncio"]
    assert [n for n, b in registry.BACKENDS.items() if b.min_python > (3, 11)] == ["asyncio_eager"]
    assert {n for n, b in registry.BACKENDS.items() if b.reads == "frames"} == {
        n for n, b in registry.BACKENDS.items() if b.transport == "zmq"}
    with pytest.raises(registry.UnknownBackend, match="known: asyncio, asyncio_proto"):
        registry.get("nope")


def test_registry_imports_no_backend():
    code = ("import sys, netprof.backends.registry as r; r.names(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('uvloop', 'gevent', 'asyncio', 'trio', "
            "'anyio', 'tornado', 'twisted', 'rloop') "
            "or m.endswith('_cpp_backends')]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_list():
    out = subprocess.run([sys.executable, "-m", "netprof.backends", "--list"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    listed = {line.split()[0]: tuple(line.split()[1:3]) for line in out.stdout.splitlines()}
    assert listed == {n: (b.family, b.reads) for n, b in registry.BACKENDS.items()}


@pytest.mark.parametrize("argv, message", [
    (["nope"], "unknown backend 'nope'"),
    (["selector", "--work", "sleep"], "bad --work"),
    (["selector", "--work", "spin:-3"], "bad --work"),
    (["selector", "--msize", "0"], "--msize must be 1..1048576"),
    (["selector", "--msize", "1048577"], "--msize must be 1..1048576"),
    (["selector", "--msize", "x"], "argument --msize"),
    (["selector", "--framing", "bytes"], "argument --framing: invalid choice"),
])
def test_bad_arguments(argv, message):
    out = subprocess.run([sys.executable, "-m", "netprof.backends", *argv],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_work_model_parse():
    assert WorkModel.parse("none") == WorkModel() and WorkModel().callable() is None
    assert WorkModel.parse("sleep:2000") == WorkModel("sleep", 2000.0, False)
    assert WorkModel.parse("poisson-spin:50") == WorkModel("spin", 50.0, True)
    assert str(WorkModel.parse("poisson-sleep:50")) == "poisson-sleep:50"
    for bad in ("sleep", "nap:5", "spin:x", "sleep:-1", "sleep:nan"):
        with pytest.raises(BadWorkSpec):
            WorkModel.parse(bad)
    spin = WorkModel.parse("spin:3000").callable()
    t = time.perf_counter()
    spin()
    assert time.perf_counter() - t >= 0.003


# --------------------------------------------------------------------------------------------
# Every backend, as a process


@pytest.mark.parametrize("framing, exercise_fn", [("stream", exercise), ("message", exercise_messages)],
                         ids=["stream", "message"])
@pytest.mark.parametrize("name", RUNNABLE + ["unfair"])
def test_echo_and_exit_when_all_closed(name, framing, exercise_fn):
    with Backend(name, "--framing", framing) as b:
        b.wait_ready()
        socks = [b.connect() for _ in range(50)]  # all open at once before any traffic
        with ThreadPoolExecutor(len(socks)) as pool:
            list(pool.map(exercise_fn, socks, range(len(socks))))
        assert b.proc.poll() is None, "exited while connections were open"
        for s in socks:
            s.close()
        assert b.wait_exit(5) == 0, b.err()
        b.assert_nothing_left()


@pytest.mark.parametrize("name", RUNNABLE)
def test_sigterm_exits_0(name):
    with Backend(name) as b:
        b.wait_ready()
        socks = [b.connect() for _ in range(3)]
        for i, s in enumerate(socks):
            exercise_one = bytes([i]) * 64  # one message of the default --msize
            s.sendall(exercise_one)
            assert recv_exact(s, 64) == exercise_one
        os.kill(b.pid, signal.SIGTERM)
        assert b.wait_exit(5) == 0, b.err()
        b.assert_nothing_left()
        for s in socks:
            s.close()


@pytest.mark.parametrize("name", ["selector", "thread", "asyncio", "gevent", "prefork", "cpp_epoll",
                                  "trio", "anyio_asyncio", "tornado", "twisted", "socketserver"])
def test_sigint_exits_0_too(name):
    # A Ctrl-C in the orchestrator's terminal reaches the backend's process group as well.
    with Backend(name) as b:
        b.wait_ready()
        s = b.connect()
        s.sendall(b"ping" * 16)  # one message of the default --msize
        assert recv_exact(s, 64) == b"ping" * 16
        os.killpg(b.pid, signal.SIGINT)
        assert b.wait_exit(5) == 0, b.err()
        assert "Traceback" not in b.err()
        b.assert_nothing_left()
        s.close()


def test_sigterm_before_any_connection():
    with Backend("fork") as b:
        b.wait_ready()
        os.kill(b.pid, signal.SIGTERM)
        assert b.wait_exit(5) == 0, b.err()


# --------------------------------------------------------------------------------------------
# Work model, fairness


@pytest.mark.slow
def test_blocking_sleep_serializes_a_single_thread_loop():
    # 2 ms of blocking sleep per message: one thread serves at most ~500 messages/s in total.
    with Backend("selector", "--work", "sleep:2000") as b:
        b.wait_ready()
        total = sum(ping_pong(b, 10, 2.0)) / 2.0
        assert b.wait_exit(5) == 0
    assert total < 700, f"selector with sleep:2000 did {total:.0f} msgs/s"


@pytest.mark.slow
def test_blocking_sleep_does_not_serialize_threads():
    with Backend("thread", "--work", "sleep:2000") as b:
        b.wait_ready()
        total = sum(ping_pong(b, 10, 2.0)) / 2.0
        assert b.wait_exit(5) == 0
    assert total > 1500, f"thread with sleep:2000 did {total:.0f} msgs/s"


@pytest.mark.slow
def test_unfair_backend_starves_but_serves_everyone():
    with Backend("unfair") as b:
        b.wait_ready()
        counts = sorted(ping_pong(b, 10, 1.5), reverse=True)
        assert b.wait_exit(5) == 0
    assert min(counts) >= 1, f"a connection was never served: {counts}"
    assert counts[0] > 0.5 * sum(counts), f"no favourite connection: {counts}"


# --------------------------------------------------------------------------------------------
# Missing optional dependency


@pytest.mark.parametrize("name, module, fix", [("uvloop_sock", "uvloop", "pip install uvloop"),
                                               ("gevent", "gevent", "pip install gevent"),
                                               ("rloop_sock", "rloop", "pip install rloop"),
                                               ("trio", "trio", "pip install trio"),
                                               ("anyio_trio", "trio", "pip install trio"),
                                               ("anyio_asyncio", "anyio", "pip install anyio"),
                                               ("tornado", "tornado", "pip install tornado"),
                                               ("twisted_asyncio", "twisted", "pip install twisted")])
def test_missing_dependency_is_one_line_exit_3(name, module, fix, tmp_path):
    # A module of that name that fails to import shadows the installed one.
    (tmp_path / f"{module}.py").write_text(f"raise ImportError('No module named {module}')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    with Backend(name, env=env) as b:
        assert b.wait_exit(30) == 3
        err = b.err()
    assert fix in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="asyncio_eager runs on this interpreter")
def test_too_old_python_is_one_line_exit_3():
    with Backend("asyncio_eager") as b:
        assert b.wait_exit(30) == 3
        err = b.err()
    assert err.strip() == f"netprof.backends: {registry.python_requirement(registry.get('asyncio_eager'))}"
    assert "needs Python >= 3.12" in err and "run it with --python 3.12 or 3.13" in err, err


# --------------------------------------------------------------------------------------------
# Driven by the real loader


def _loader() -> str | None:
    path = shutil.which("netprof-loader") or os.path.join(os.path.dirname(sys.executable), "netprof-loader")
    if not os.access(path, os.X_OK):
        return None
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
    return path if out.returncode == 0 and "--target" in out.stdout + out.stderr else None


LOADER = _loader()


@pytest.mark.slow
@pytest.mark.skipif(LOADER is None, reason="netprof-loader not built or not working yet")
@pytest.mark.parametrize("name", RUNNABLE)
def test_loader_run_has_no_mismatch(name):
    with Backend(name) as b:
        port = b.wait_ready()
        out = subprocess.run([LOADER, "--target", f"127.0.0.1:{port}", "-c", "100", "-d", "2", "--json"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["errors"]["mismatch"] == 0, result["errors"]
        assert b.wait_exit(10) == 0, b.err()
        b.assert_nothing_left()
