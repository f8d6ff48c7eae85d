"""The backends under test, as real processes on real sockets (issue 3).

Every backend: `ready` line, byte-exact echo over 50 concurrent connections with split and merged
sends (any sizes under --framing stream; whole 64-byte messages cut at random points under the
default message framing), still serving once the peer closed everything (a backend serves until
told to stop: a stray connect-and-close right after `ready` must not end it), exit 0 on SIGTERM, no
process left behind (fork/prefork included). Plus the work model, the unfair test backend, the
missing-dependency error, a 1 s loader run with zero mismatches, and the cell's verdict on a backend
that does not stop cleanly.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from helpers import Backend, backend_params, require
from netprof.backends import registry
from netprof.backends.common import BadWorkSpec, WorkModel

# The echo backends; ZeroMQ ones: test_zmq.py; HTTP ones (protocol "http") answer requests, not echoes.
BACKENDS = [n for n in registry.names()
            if registry.get(n).transport == "tcp" and getattr(registry.get(n), "protocol", "echo") == "echo"]
RUNNABLE = backend_params(BACKENDS)  # asyncio_eager skips on 3.11, with the reason
SIZES = (1, 64, 1000, 65536)


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
        "prethread", "select_prethread", "cpp_uring",
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
def test_echo_then_serve_on_until_sigterm(name, framing, exercise_fn):
    """50 connections echo at once; the backend serves on as they close (message framing: all of them, the old
    backends exited there) and exits 0 on SIGTERM, with three still open (stream framing: a thread or task
    blocked in its receive must not hold the exit), leaving nothing of its process tree. With message framing
    (the default) it first outlives a stray connection (test_stray_connection_does_not_end_a_backend's, for the
    echo backends) and then serves the loader's 100 connections, every echo byte-checked."""
    keep = 3 if framing == "stream" else 0
    with Backend(name, "--framing", framing) as b:
        b.wait_ready()
        if framing == "message":
            _stray_connections(b)
        socks = [b.connect() for _ in range(50)]  # all open at once before any traffic
        with ThreadPoolExecutor(len(socks)) as pool:
            list(pool.map(exercise_fn, socks, range(len(socks))))
        assert b.proc.poll() is None, "exited while connections were open"
        if framing == "message" and name in BACKENDS and LOADER is not None:
            _loader_run_has_no_mismatch(b)
        for s in socks[keep:]:
            s.close()
        time.sleep(0.15)  # time enough to notice every close (the old backends exited here, within ms)
        assert b.proc.poll() is None, f"exited once its connections were closed: {b.err()}"
        assert b.stop() == 0, b.err()
        b.assert_nothing_left()
        assert "Traceback" not in b.err(), b.err()
        for s in socks[:keep]:
            s.close()


@pytest.mark.parametrize("name", ["selector", "thread", "asyncio", "gevent", "prefork", "cpp_epoll",
                                  "cpp_uring", "trio", "anyio_asyncio", "tornado", "twisted", "socketserver"])
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
# A backend serves until told to stop (issue 16, item 12)


def _real_exchange(b: Backend, info: registry.BackendInfo) -> None:
    """One exchange in the backend's own protocol, checked byte for byte (echo, ZeroMQ frames) or
    by its status line and body (HTTP)."""
    if info.transport == "zmq":
        zmq = pytest.importorskip("zmq")
        ctx = zmq.Context()
        try:
            d = ctx.socket(zmq.DEALER)
            d.linger, d.rcvtimeo = 0, 5000
            d.connect(f"tcp://127.0.0.1:{b.port}")
            d.send_multipart([b"still", b"there"])
            assert d.recv_multipart() == [b"still", b"there"]
            d.close()
        finally:
            ctx.destroy(linger=0)
    elif getattr(info, "protocol", "echo") == "http":
        with b.connect() as s:
            s.sendall(f"{registry.HTTP_REQUEST} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            reply = b""
            while b"Hello, World!" not in reply:
                chunk = s.recv(65536)
                assert chunk, f"connection closed after {reply!r}"
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200"), reply
    else:
        with b.connect() as s:
            msg = os.urandom(64)  # one message of the default --msize
            s.sendall(msg)
            assert recv_exact(s, 64) == msg


def _loader_run_has_no_mismatch(b: Backend) -> None:
    # 0.25 s is hundreds of byte-checked echoes at the least, from the slowest backend on a loaded machine
    # (both CPUs busy for it: 35 backends, so not longer); a fresh backend needs no long warm-up for that.
    out = subprocess.run([LOADER, "--target", f"127.0.0.1:{b.port}", "-c", "100", "-d", "0.25", "--warmup", "0.1",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["errors"]["mismatch"] == 0, result["errors"]
    # the check ran on real traffic: thousands of echoes alone, hundreds beside another test (make test runs
    # the tests that do not measure two at a time)
    assert result["messages"] >= 200, result["messages"]
    assert b.proc.poll() is None, f"exited after the loader's run: {b.err()}"


def _stray_connections(b: Backend) -> None:
    """A connection closed at once and one reset (RST instead of FIN), as a port scan or a health check makes
    right after `ready`: the backend must serve on."""
    socket.create_connection(("127.0.0.1", b.port), timeout=10).close()  # connect, close at once
    reset = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    reset.close()
    time.sleep(0.2)  # time enough to notice both closes (a later exit fails the exchange after)
    assert b.proc.poll() is None, f"exited after a stray connection (code {b.proc.returncode}): {b.err()}"


# The echo backends (and unfair) are checked so by test_echo_then_serve_on_until_sigterm, on the server it starts.
OTHERS = [n for n in registry.names(include_test_only=True) if n not in BACKENDS and n != "unfair"]


@pytest.mark.parametrize("name", backend_params(OTHERS))
def test_stray_connection_does_not_end_a_backend(name):
    """Any local process may connect and close right after `ready` (a port scan, a health check):
    the backend serves on, answers a real exchange afterwards, and ends only on SIGTERM: exit 0, nothing of
    its process tree left (prefork's workers, fork's children)."""
    info = registry.get(name)
    with Backend(name) as b:
        ready, _, _ = select.select([b.proc.stdout], [], [], 30)
        line = b.proc.stdout.readline() if ready else ""
        if not line and b.proc.wait(10) == 3:  # a missing optional dependency: its one-line fix
            require(False, b.err().strip())
        assert line.startswith("ready "), f"no ready line: {line!r}; stderr: {b.err()}"
        b.port = int(line.split()[2])
        _stray_connections(b)
        _real_exchange(b, info)
        time.sleep(0.15)  # its connection closed too: the count is back to zero once more
        assert b.proc.poll() is None, f"exited after its last connection closed: {b.err()}"
        tree = psutil.Process(b.pid).children(recursive=True)
        assert b.stop() == 0, b.err()
        gone, alive = psutil.wait_procs(tree, timeout=5)
        assert not alive, f"left behind after exit 0: {alive}"
        b.assert_nothing_left()
        assert "Traceback" not in b.err(), b.err()


# --------------------------------------------------------------------------------------------
# Work model, fairness


@pytest.mark.slow
@pytest.mark.parametrize("name, low, high", [("selector", 0, 700), ("thread", 1500, float("inf"))])
def test_blocking_sleep_serializes_a_single_thread_loop_only(name, low, high):
    # 2 ms of blocking sleep per message: one thread serves at most ~500 messages/s in total; a
    # thread per connection (10 here) sleeps in parallel.
    with Backend(name, "--work", "sleep:2000") as b:
        b.wait_ready()
        total = sum(ping_pong(b, 10, 2.0)) / 2.0
        assert b.stop() == 0
    assert low < total < high, f"{name} with sleep:2000 did {total:.0f} msgs/s"


@pytest.mark.slow
def test_unfair_backend_starves_but_serves_everyone():
    with Backend("unfair") as b:
        b.wait_ready()
        counts = sorted(ping_pong(b, 10, 1.5), reverse=True)
        assert b.stop() == 0
    assert min(counts) >= 1, f"a connection was never served: {counts}"
    # one favourite, served at least twice as often as any other (a fair loop serves ten alike; the share it gets
    # depends on how fast its peer, a thread of this process, answers on a busy host: 27-80%)
    assert counts[0] > 2 * counts[1] and counts[0] > 0.25 * sum(counts), f"no favourite connection: {counts}"


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
# Many connections at once (and the real loader, for the cells below)


def _loader() -> str | None:
    path = shutil.which("netprof-loader") or os.path.join(os.path.dirname(sys.executable), "netprof-loader")
    if not os.access(path, os.X_OK):
        return None
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
    return path if out.returncode == 0 and "--target" in out.stdout + out.stderr else None


LOADER = _loader()


# Opens N connections to 127.0.0.1:PORT, one by one, says so, and holds them until killed.
HOLD_CONNECTIONS = """
import resource, socket, sys, time
n, port = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 64, n + 64))  # root may raise its own hard limit
held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
print("connected", len(held), flush=True)
time.sleep(600)
"""


# One server of the kind (issue 49: 4-8 s of the serial pass each): every built-in backend that starts a thread per
# connection (thread and socketserver) is bench/stop_after_many_connections.py, with its committed results.
@pytest.mark.slow
@pytest.mark.serial  # 12,000 connections and as many threads: a time bound, and a load on both CPUs
@pytest.mark.parametrize("name", ["thread"])
def test_thread_per_connection_stops_quickly_after_many_connections(name):
    """12,000 handler threads that all see their connection close at once contend for the GIL
    for tens of seconds; a SIGTERM then must not wait for the main thread's turn (the cell would
    SIGKILL the backend after 5 s and fail it): the first thread that runs ends the process, exit 0.
    The moment is made, not waited for: 12,000 connections held by a process of the test's, the backend stopped
    (SIGSTOP) once each has its thread, the holder killed (the kernel closes them all), then the backend resumed
    with the SIGTERM. Left running, beside a busy neighbour its threads could all be gone before the loader's own
    teardown was (bench/stop_after_many_connections.py measures the loader's way)."""
    with Backend(name) as b:
        port = b.wait_ready()
        holder = subprocess.Popen([sys.executable, "-I", "-c", HOLD_CONNECTIONS, "12000", str(port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([holder.stdout], [], [], 60)
            line = holder.stdout.readline() if ready else ""
            assert line == "connected 12000\n", (line, holder.poll(), holder.stderr.read() if holder.poll() else "")
            deadline = time.monotonic() + 60
            while (threads := psutil.Process(b.pid).num_threads()) <= 12000:
                assert time.monotonic() < deadline, (threads, b.err())
                time.sleep(0.02)
            os.kill(b.pid, signal.SIGSTOP)
        finally:
            holder.kill()
            holder.wait(30)
        assert psutil.Process(b.pid).num_threads() > 12000  # every handler there, its connection closed
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGCONT)
        assert b.stop(timeout=5) == 0, b.err()
        took = time.monotonic() - t0
    assert took < 5, took


# --------------------------------------------------------------------------------------------
# The cell stops its backend and judges the stop


# The selector backend with its stop-signal handling replaced: SIGTERM ignored, or an exit 3.
MISBEHAVING = ("import os, signal, sys\n"
               "import netprof.backends.selector_family as sf\n"
               "from netprof.backends.__main__ import main\n"
               "sf.exit_on_stop_signals = lambda: signal.signal(signal.SIGTERM, {handler})\n"
               "sys.exit(main(sys.argv[1:]))\n")


@pytest.mark.skipif(LOADER is None, reason="netprof-loader not built or not working yet")
@pytest.mark.parametrize("handler, error", [
    (None, None),
    ("signal.SIG_IGN", "backend did not exit within 1 s of SIGTERM (netprof had to kill -9 it)"),
    ("lambda *_: os._exit(3)", "backend exited with code 3 when stopped with SIGTERM (it must exit 0)"),
], ids=["clean", "ignores-sigterm", "exits-3"])
def test_cell_stops_the_backend_and_fails_an_unclean_stop(monkeypatch, handler, error):
    from netprof.profiler.core.procs import ProcessGroup
    from netprof.profiler.run import cell as cell_mod
    from netprof.profiler.run.interpreters import prepare
    from netprof.profiler.run.loader_client import Loader
    from netprof.profiler.run.plan import Cell, RunConfig

    monkeypatch.setattr(cell_mod, "EXIT_GRACE", 1.0)
    if handler:
        real_argv = cell_mod.backend_argv

        def argv(*args, **kw):  # `python -m netprof.backends ARGS` -> `python -c MISBEHAVING ARGS`
            full = real_argv(*args, **kw)
            at = full.index("-m")
            return [*full[:at], "-c", MISBEHAVING.format(handler=handler), *full[at + 2:]]

        monkeypatch.setattr(cell_mod, "backend_argv", argv)
    cfg = RunConfig(backends=["selector"], connections=[4], duration=0.5, warmup=0.2, rounds=1, probes=False)
    with ProcessGroup() as group:
        env = cell_mod.CellEnv(cfg, Loader.start(group), prepare(""))
        t0 = time.monotonic()
        out = cell_mod.run_cell(Cell("selector", 4, 1, 1), env)
        took = time.monotonic() - t0
    assert out.row["messages"] > 100, out.row  # the load itself went well in every case
    assert out.row["error"] == error or (error and out.row["error"].startswith(error)), out.row["error"]
    assert out.row["status"] == ("ok" if error is None else "failed")
    assert not psutil.pid_exists(out.backend_pid), "the cell left its backend running"
    assert took < 10, took  # the stop is bounded: SIGTERM, EXIT_GRACE, SIGKILL
