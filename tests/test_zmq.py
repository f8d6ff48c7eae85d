"""The ZeroMQ family (issue 11): the five ROUTER backends against a Python DEALER client, the
loader's ZeroMQ mode (control protocol and one-shot), and `netprof run` end to end with probes.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from helpers import Backend, require_bpf, run_netprof, wait_no_children
from netprof.backends import registry
from netprof.profiler.core.paths import loader_binary
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run.loader_client import Loader, LoaderError, RunRequest

zmq = pytest.importorskip("zmq")

ZMQ_BACKENDS = [n for n in registry.names() if registry.get(n).transport == "zmq"]


def dealers(ctx, port: int, n: int) -> list:
    socks = []
    for _ in range(n):
        d = ctx.socket(zmq.DEALER)
        d.linger = 0
        d.rcvtimeo = 5000
        d.connect(f"tcp://127.0.0.1:{port}")
        socks.append(d)
    return socks


def test_registry_entries():
    assert set(ZMQ_BACKENDS) == {"zmq_raw", "zmq_poller", "zmq_threads", "aiozmq_core", "aiozmq_rpc"}
    for name in ZMQ_BACKENDS:
        info = registry.get(name)
        assert info.family == "zeromq" and "zmq" in info.requires
    assert "aiozmq" in registry.get("aiozmq_rpc").requires
    assert registry.get("selector").transport == "tcp"
    assert RunRequest("127.0.0.1:1", 1).to_json()["transport"] == "tcp"


@pytest.mark.parametrize("name", ZMQ_BACKENDS)
def test_echo_exact_then_serve_on_until_sigterm(name):
    ctx = zmq.Context()
    try:
        with Backend(name) as b:
            port = b.wait_ready()
            socks = dealers(ctx, port, 4)
            # Distinct payloads per DEALER and round, several in flight, multipart and empty frames too.
            for rnd in range(20):
                sent = {}
                for i, d in enumerate(socks):
                    msg = [f"{name}/{i}/{rnd}/".encode() * (1 + rnd % 5), bytes([i, rnd]) * (rnd * 50)]
                    if rnd % 4 == 3:
                        msg.append(b"")
                    d.send_multipart(msg)
                    sent[i] = msg
                for i, d in enumerate(socks):
                    assert d.recv_multipart() == sent[i], (name, i, rnd)
            big = os.urandom(200_000)
            socks[0].send(big)
            assert socks[0].recv() == big
            assert b.proc.poll() is None, "exited while peers were connected"
            for d in socks:
                d.close()
            # Every peer gone is no reason to stop: only SIGTERM is.
            b.assert_running_after(0.5, "exited once its peers were gone")
            assert b.stop(5) == 0, b.err()
            assert "Traceback" not in b.err(), b.err()

        with Backend(name) as b:  # and SIGTERM with a peer still connected
            port = b.wait_ready()
            (d,) = dealers(ctx, port, 1)
            d.send(b"ping")
            assert d.recv() == b"ping"
            assert b.stop(5) == 0, b.err()
            assert "Traceback" not in b.err(), b.err()
            d.close()
    finally:
        ctx.destroy(linger=0)


def test_broken_library_is_one_line_exit_1(tmp_path):
    # An aiozmq that imports but fails at run time (the fate of old asyncio libraries).
    pkg = tmp_path / "aiozmq"
    (pkg / "rpc").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "class ZmqProtocol: pass\n"
        "async def create_zmq_connection(*a, **k):\n"
        "    raise AttributeError(\"module 'asyncio' has no attribute 'async'\")\n")
    (pkg / "rpc" / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    with Backend("aiozmq_core", env=env) as b:
        assert b.wait_exit(30) == 1
        err = b.err().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "has no attribute 'async'" in err, err


def test_missing_dependency_is_one_line_exit_3(tmp_path):
    (tmp_path / "aiozmq.py").write_text("raise ImportError('No module named aiozmq')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    with Backend("aiozmq_rpc", env=env) as b:
        assert b.wait_exit(30) == 3
        err = b.err().strip()
    assert "pip install 'aiozmq[rpc]'" in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
@pytest.mark.concurrent  # the loader's ZMTP events, counts, errors and refusals, not its rate: `make test`'s first pass
def test_loader_zmq_mode_against_zmq_poller():
    events = []
    with ProcessGroup() as group, Backend("zmq_poller") as b:
        port = b.wait_ready()
        loader = Loader.start(group)
        stats = loader.run(RunRequest(target=f"127.0.0.1:{port}", connections=10, duration=2.0, warmup=0.3,
                                      transport="zmq"), on_event=events.append)
        assert [e["event"] for e in events] == ["accepted", "connected", "measure_start", "measure_stop", "result"]
        assert events[1]["connected"] == 10 and events[1]["failed"] == 0
        assert stats["messages"] > 0 and not stats["aborted"]
        assert stats["errors"] == {"connect": 0, "reset": 0, "timeout": 0, "mismatch": 0}
        assert len(stats["per_conn_messages"]) == 10 and min(stats["per_conn_messages"]) > 0
        assert sum(stats["per_conn_messages"]) == stats["messages"] == stats["latency_us"]["count"]
        assert stats["duration_s"] == pytest.approx(2.0, abs=1e-3)
        # The loader closed its DEALERs: the backend serves on until SIGTERM, then exits 0.
        b.assert_running_after(0.5, "exited once the loader's peers were gone")
        assert b.stop(5) == 0, b.err()
        # Nobody there any more: no hello is answered, so the run fails as `connect`.
        with pytest.raises(LoaderError) as e:
            loader.run(RunRequest(target=f"127.0.0.1:{port}", connections=3, duration=0.5, connect_timeout=0.3,
                                  transport="zmq"))
        assert e.value.kind == "connect" and e.value.stats["errors"]["timeout"] == 3
        with pytest.raises(LoaderError) as e:
            loader.run(RunRequest(target=f"127.0.0.1:{port}", connections=1, transport="0mq"))
        assert e.value.kind == "bad_request" and "transport" in e.value.message
        # Each DEALER needs 2 descriptors: refused before the run (no `accepted`), naming the limit.
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        n = (soft - 64) // 2 + 1
        if soft != resource.RLIM_INFINITY and n + 64 <= soft:
            events.clear()
            with pytest.raises(LoaderError) as e:
                loader.run(RunRequest(target=f"127.0.0.1:{port}", connections=n, transport="zmq"),
                           on_event=events.append)
            assert e.value.kind == "bad_request" and "2 descriptors" in e.value.message
            assert [ev["event"] for ev in events] == ["error"]


WRONG_ROUTER = r"""
import sys, zmq
ctx = zmq.Context(); r = ctx.socket(zmq.ROUTER); r.linger = 0
print("ready", r.bind_to_random_port("tcp://127.0.0.1"), flush=True)
n = 0
while n < 200000:
    peer, *frames = r.recv_multipart(); n += 1
    if n % 10 == 0 and n > 20: frames[0] = frames[0][:-1] + bytes([frames[0][-1] ^ 1])  # one wrong byte
    if n % 15 == 0 and n > 20: frames.append(b"xyz")                                    # an extra frame
    r.send_multipart([peer, *frames])
"""


@pytest.mark.parametrize("transport", ["zmq", "zmtp"])  # libzmq's DEALERs, the loader's own ZMTP
def test_one_shot_zmq_mode_counts_wrong_echoes(transport):
    with ProcessGroup() as group:
        proc = group.spawn("wrong-router", [sys.executable, "-c", WRONG_ROUTER])
        port = int(proc.wait_line("ready", 10).split()[1])
        out = subprocess.run([loader_binary(), "--target", f"127.0.0.1:{port}", "-c", "4", "-d", "1",
                              "--warmup", "0.2", "--pipeline", "2", "--transport", transport, "--json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        s = json.loads(out.stdout)
        assert s["messages"] > 0 and s["pipeline"] == 2
        # every tenth echo has 1 wrong byte, every fifteenth 3 extra bytes: none of them is counted (zmtp reads a
        # byte stream: after an extra frame its connection is out of step, and every later echo mismatches too)
        assert s["errors"]["mismatch"] > 0.1 * s["messages"]
        assert sum(s["per_conn_messages"]) == s["messages"]


@pytest.mark.slow
def test_netprof_run_zmq_end_to_end(tmp_path):
    require_bpf()
    out = tmp_path / "run"
    t0 = time.monotonic()
    res = run_netprof("run", "--no-report", "zmq_raw", "zmq_poller", "-c", "1,10", "-d", "0.5", "-r", "1",
                      "--warmup", "0.2", "--json", "--out", str(out), timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    runs = json.loads(res.stdout)["runs"]
    assert {(r["backend"], r["connections"]) for r in runs} == {
        (b, c) for b in ("zmq_raw", "zmq_poller") for c in (1, 10)}
    for r in runs:
        assert r["status"] == "ok", r
        assert r["family"] == "zeromq" and r["messages"] > 0
        assert r["errors"]["mismatch"] == 0
        spm = r["syscalls_per_msg"]
        # the ROUTER's I/O thread reads each request and writes each reply on its TCP socket
        assert spm.get("recvfrom", 0) > 0.5 and spm.get("sendto", 0) > 0.5, spm
    # netprof stopped each backend as soon as its cell ended (a clean SIGTERM exit: no 5 s grace
    # and SIGKILL per cell) and nothing is left behind
    assert time.monotonic() - t0 < 120
    assert not wait_no_children()
