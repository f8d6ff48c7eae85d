"""`netprof watch` on servers netprof did not start and traffic it did not send (issue 54): wrk's count and rate,
the wire (tcpdump on loopback, each request paired with its answer), Debian's Prometheus scraping the metrics
endpoint, perf stat's count of syscalls, gunicorn's forked workers, a handler waiting on another service, routes
read by the kernel, and the refusals. Each server is a built-in backend started as `python -m netprof.backends NAME`
(helpers.Backend), or uvicorn serving an app of the test's own (the routes), pinned to CPU 0; wrk, tcpdump and
Prometheus run on CPU 1."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from helpers import Backend, default_sigint, netprof_cli, netprof_cmd, require_bpf, require_tool, run_netprof

SERVER_CPU, LOAD_CPU = 0, 1


def _pin(pid: int, cpu: int) -> None:
    """Every thread of pid's tree on `cpu` (the backends start before the test can pin them: their threads too)."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for p in procs:
        for t in p.threads():
            os.sched_setaffinity(t.id, {cpu})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watch:
    """`netprof watch ARGS` in the background, on the load's CPU; `attached()` waits for its "watching" line."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(["taskset", "-c", str(LOAD_CPU), *netprof_cmd("watch", *args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=default_sigint, cwd=cwd)
        self.err_lines: list[str] = []

    def attached(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.5)
            if ready:
                line = self.proc.stderr.readline()
                if not line:
                    break
                self.err_lines.append(line)
                if line.startswith("watching "):
                    return
        pytest.fail(f"watch never attached (exit {self.proc.poll()}): {''.join(self.err_lines)}")

    def result(self, timeout: float = 60) -> dict:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, "".join(self.err_lines) + err
        self.err_lines += err.splitlines(keepends=True)
        return json.loads(out)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def _wrk(port: int, seconds: int, connections: int, path: str = "/plaintext") -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(LOAD_CPU), require_tool("wrk"), "-t1", f"-c{connections}",
                             f"-d{seconds}s", f"http://127.0.0.1:{port}{path}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wrk_figures(out: str) -> tuple[int, float]:
    """(requests, requests/s) as wrk printed them."""
    requests = rate = None
    for line in out.splitlines():
        words = line.split()
        if "requests in" in line:
            requests = int(words[0])
        if line.startswith("Requests/sec:"):
            rate = float(words[1])
    assert requests is not None and rate is not None, out
    return requests, rate


# --- the wire: a pcap of loopback, each request paired with its answer ----------------------------------------

def _packets(pcap: Path):
    """(time, sport, dport, seq, ack, payload head) of each TCP segment with data. A reader of its own: the
    classic pcap format is a 24-byte header and a 16-byte one per packet, and no pcap library is in the venv."""
    data = pcap.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), hex(magic)
    scale = 1e-6 if magic == 0xA1B2C3D4 else 1e-9
    linktype = struct.unpack_from("<I", data, 20)[0]
    link = {1: 14, 113: 16}[linktype]  # Ethernet (lo), Linux cooked
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        ip = pkt[link:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack_from("!H", ip, 2)[0]
        tcp = ip[ihl:]
        sport, dport, seq, ack = struct.unpack_from("!HHII", tcp)
        doff = (tcp[12] >> 4) * 4
        length = total - ihl - doff
        if length > 0:
            yield sec + frac * scale, sport, dport, seq, ack, length, tcp[doff:doff + 8]


def _wire_server_times(pcap: Path, port: int) -> list[tuple[float, float]]:
    """Per request seen on the wire: its request segment → the first answer segment on its connection that
    acknowledges it (so a dropped packet breaks a pair rather than pairing the wrong two): (the request's
    time, epoch s; the pair's time, µs)."""
    pending: dict[int, tuple[float, int]] = {}  # client port → (time, end seq) of its open request
    times = []
    for t, sport, dport, seq, ack, length, head in _packets(pcap):
        if dport == port and head.startswith(b"GET "):
            pending[sport] = (t, (seq + length) & 0xFFFFFFFF)
        elif sport == port and head.startswith(b"HTTP/") and dport in pending:
            t0, end = pending.pop(dport)
            if ack == end:
                times.append((t0, (t - t0) * 1e6))
    return times


def _tcpdump(port: int, out: Path) -> subprocess.Popen:
    p = subprocess.Popen(["taskset", "-c", str(LOAD_CPU), require_tool("tcpdump"), "-i", "lo", "-n", "-s", "128",
                          "-B", "32768", "-w", str(out), f"tcp port {port}"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stderr], [], [], 20)
    line = p.stderr.readline() if ready else ""
    assert "listening on" in line, line
    return p


# --- Prometheus -------------------------------------------------------------------------------------------

class Prometheus:
    """Debian's prometheus, scraping `target` every second, its own data and port (as the lab starts sshd)."""

    def __init__(self, tmp: Path, target: str) -> None:
        exe = require_tool("prometheus")
        cfg = tmp / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                       f"  - job_name: netprof\n    static_configs:\n      - targets: ['{target}']\n")
        self.port = _free_port()
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(LOAD_CPU), exe, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self.log, stderr=self.log)

    def query(self, expr: str) -> list:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"prometheus not ready in {timeout} s: {Path(self.log.name).read_text()[-2000:]}")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


def test_uvicorn_under_wrk_agrees_with_wrk_the_wire_and_prometheus(tmp_path):
    """The acceptance's run: uvicorn (uvloop + httptools, one worker, CPU 0) under `wrk -t1 -c50` (CPU 1), `watch
    --pid P --duration 5 --json --out D --metrics-port M`, wrk started as watch attaches and given the same 5 s.
    requests/s within 5% of wrk's; every request's mean server time within 15% of the wire's (tcpdump on loopback:
    each request's segment to the first answer segment acknowledging it), and the followed requests' within 15% of
    the wire's of the spans they were followed in; the parts' sum within 5% of the server time (each is measured,
    none a remainder; under the default cap both are the requests followed); a route `GET /plaintext` with its
    syscalls; Prometheus's query API returns netprof_requests_total > 0 from its 1-s scrapes."""
    require_bpf()
    metrics_port = _free_port()
    prom = Prometheus(tmp_path, f"127.0.0.1:{metrics_port}")
    try:
        with Backend("uvicorn_httptools") as server:
            port = server.wait_ready()
            _pin(server.pid, SERVER_CPU)
            prom.wait_ready()
            pcap = tmp_path / "lo.pcap"
            dump = _tcpdump(port, pcap)
            try:
                out = tmp_path / "watch"
                # --out relative: where the user stands, though watch's set compiles beside the CLI (probes/base.py)
                with Watch("--pid", str(server.pid), "--duration", "5", "--json", "--out", out.name,
                           "--metrics-port", str(metrics_port), cwd=tmp_path) as w:
                    w.attached()
                    wrk = _wrk(port, 5, 50)
                    tids = {t.id for t in psutil.Process(server.pid).threads()}  # the truth for the row's `sched`
                    seen: list = []
                    deadline = time.monotonic() + 20
                    while w.proc.poll() is None and time.monotonic() < deadline and not seen:
                        time.sleep(0.5)
                        try:
                            seen = [r for r in prom.query("netprof_requests_total") if float(r["value"][1]) > 0]
                        except OSError:
                            pass
                    try:  # the listen-queue and run-queue gauges, from the same scrapes
                        queue_gauge = prom.query("netprof_accept_queue")
                        runq_gauge = prom.query("netprof_threads_waiting_for_cpu")
                    except OSError:
                        queue_gauge = runq_gauge = []
                    doc = w.result()
                    tids &= {t.id for t in psutil.Process(server.pid).threads()}  # alive at both ends
                    wrk_out, _ = wrk.communicate(timeout=30)
            finally:  # also when an assertion above failed: tcpdump never ends by itself
                dump.send_signal(signal.SIGINT)
                try:
                    dump.wait(10)
                except subprocess.TimeoutExpired:
                    dump.kill()
                    dump.wait(10)
    finally:
        prom.close()
    assert seen, "prometheus never returned netprof_requests_total > 0 while watch ran"
    assert "GET /plaintext" in [r["metric"]["route"] for r in seen], seen
    assert queue_gauge and float(queue_gauge[0]["value"][1]) >= 0, queue_gauge
    assert runq_gauge and 0 <= float(runq_gauge[0]["value"][1]) <= len(tids), (runq_gauge, tids)
    wrk_requests, wrk_rate = _wrk_figures(wrk_out)
    # every request counted, also those answered while the default --max-overhead had the set light
    assert doc["requests_per_sec"] == pytest.approx(wrk_rate, rel=0.05), (doc["requests_per_sec"], wrk_out,
                                                                          doc["attached_share"])
    sampled = doc["requests"] - doc["unsampled"]
    assert sampled >= 0.05 * doc["requests"] and 0.05 <= doc["attached_share"] <= 1, doc
    wire = _wire_server_times(pcap, port)
    assert len(wire) >= 0.5 * wrk_requests, (len(wire), wrk_requests)  # pairs found for most requests
    # every request is timed, also while the default --max-overhead has the set light: the whole wire's
    wire_mean = sum(us for _, us in wire) / len(wire)
    every = doc["every_request_server_time_us"]["mean"]
    assert every == pytest.approx(wire_mean, rel=0.15), (doc["every_request_server_time_us"], wire_mean)
    # server_time_us is that of the requests followed, answered while the set was whole (the server is slower then
    # by the probes' own cost): within 15% of the wire's requests of those spans (windows.jsonl `whole`, epoch s).
    # Against the whole wire's (the acceptance's line as written) it is off by that cost, the probes' effect on
    # the requests they follow (`followed_time_ratio`): 1.02-1.07 on ordinary hours, 1.36 on one of 22-33% steal
    # (fresh-clone run of 2026-12-02: followed 3,627 µs against their spans' 3,632 and the whole wire's 2,669,
    # every request 2,674): the host's cost of a BPF hook, which bench/watch_overhead.py measures, not this test.
    windows = [json.loads(x) for x in (out / "windows.jsonl").read_text().splitlines()]
    assert all(isinstance(w["accept_queue"], int) for w in windows), [w.get("accept_queue") for w in windows]
    # each window's mean of threads waiting for a CPU: uvicorn's threads, alive throughout (none exited)
    assert all(0 <= w["threads_waiting"] <= len(tids) for w in windows), [w.get("threads_waiting") for w in windows]
    spans = [w["whole"] for w in windows]
    timed = [us for t0, us in wire if any(a <= t0 <= b for a, b in spans)]
    assert len(timed) >= 0.03 * len(wire), (len(timed), len(wire), spans)
    followed = doc["server_time_us"]["mean"]
    print(f"server time (followed) {followed} µs, the wire's of those spans {sum(timed) / len(timed):.1f}; every "
          f"request's {every} µs, the whole wire's {wire_mean:.1f}; attached share {doc['attached_share']}")
    assert followed == pytest.approx(sum(timed) / len(timed), rel=0.15), (followed, doc["attached_share"])
    assert doc["probes"]["followed_time_ratio"] == pytest.approx(followed / every, abs=0.002), doc["probes"]
    b = doc["breakdown"]
    assert b["requests"] >= 0.9 * sampled, b
    assert b["mean_us"] == pytest.approx(followed, rel=0.05), (b, doc["server_time_us"])
    (route,) = [r for r in doc["routes"] if r["route"] == "GET /plaintext"]
    assert route["requests"] >= 0.99 * sampled, doc["routes"]
    assert 1 <= route["syscalls_per_request"] < 20, route
    # the requests answered while the set was light were counted and timed, not their syscalls
    unsampled = [r["syscalls_per_request"] for r in doc["routes"] if r["route"] == "(unsampled)"]
    assert unsampled == ([None] if doc["unsampled"] else []), (unsampled, doc["unsampled"])
    assert sum(p["requests"] for p in doc["processes"]) == pytest.approx(doc["requests"], rel=0.01), doc["processes"]
    # --out: the same figures, and one line per window
    assert json.loads((out / "watch.json").read_text())["requests"] == doc["requests"]
    assert len(windows) >= 4 and sum(x["requests"] for x in windows) == doc["requests"], len(windows)
    # --out: the report a run writes, on the watched window (its row says the latency is the server's)
    summary = json.loads((out / "summary.json").read_text())
    (row,) = summary["runs"]
    assert row["latency"] == "server" and row["messages"] == doc["requests"], row
    # the server's threads against its CPU over the watch (/proc schedstat, subtracted thread by thread)
    sched = row["sched"]
    assert sched["threads"] == len(tids) and sched["turns_max"] >= 1, (sched, tids)
    assert 0 <= sched["runq_mean"] <= len(tids), sched
    assert row["breakdown"]["parts_mean_us"] == pytest.approx(doc["breakdown"]["mean_us"], rel=0.01), row["breakdown"]
    # its kernel operations per request, the watch's own count (none by name), as compare and the page judge them
    ops = summary["cells"][0]["metrics"]["kernel_ops_per_msg_total"]["mean"]
    assert ops == pytest.approx(doc["syscalls_per_request"] + (doc["ring_ops_per_request"] or 0), abs=0.01), ops
    assert isinstance(summary["anomalies"], list)
    report = (out / "report.md").read_text()
    assert "netprof watch: no loader" in report
    assert "| interpreter(s) | the watched server's own, not started by netprof" in report
    # in the server's terms: no loader's round trip, no transit; its syscalls per request, counted per request
    assert "round trip" not in report and "transit" not in report and "loader_wait" not in report, report
    assert "## Where the server time went" in report and "no probes" not in report
    assert "(one watch: no interval)" in report and "1 round" not in report  # a watch has no rounds
    assert f"| GET /plaintext | {route['requests']:,} |" in report, report


def test_every_gunicorn_worker_is_followed(tmp_path):
    """gunicorn_sync with 4 forked workers (a connection per request) under wrk: every worker's requests are
    counted, and they add up to the whole and to wrk's count (watch's window holds wrk's whole run). Under a cap
    no server meets (--max-overhead 0.001) the set is whole for the least share of each interval and light for
    the rest: requests are counted and timed all the same."""
    require_bpf()
    with Backend("gunicorn_sync", "--workers", "4") as server:
        port = server.wait_ready()
        _pin(server.pid, SERVER_CPU)
        workers = {p.pid for p in psutil.Process(server.pid).children()}
        assert len(workers) == 4, workers
        with Watch("--pid", str(server.pid), "--duration", "3", "--json", "--max-overhead", "0.001") as w:
            w.attached()
            wrk = _wrk(port, 2, 8)
            wrk_out, _ = wrk.communicate(timeout=30)
            doc = w.result()
    wrk_requests, _ = _wrk_figures(wrk_out)
    by_pid = {p["pid"]: p["requests"] for p in doc["processes"]}
    assert set(by_pid) == workers and all(n > 0 for n in by_pid.values()), (by_pid, workers)
    assert sum(by_pid.values()) == pytest.approx(doc["requests"], abs=8), (by_pid, doc["requests"])
    assert doc["requests"] == pytest.approx(wrk_requests, rel=0.02), (doc["requests"], wrk_out)
    assert doc["attached_share"] < 0.5 and 0 < doc["unsampled"] < doc["requests"], doc
    # ... and timed: light keeps the arrivals' hook (a new connection is learned at its setup)
    (light,) = [r for r in doc["routes"] if r["route"] == "(unsampled)"]
    assert light["server_time_us"]["mean"] and light["server_time_us"]["mean"] > 0, light


def _echo_load(port: int, connections: int, seconds: float, counts: list[int], rtt_s: list[float]) -> None:
    """Strict ping-pong of 64-byte messages on `connections` connections: a load watch does not know about.
    Connection i's messages in counts[i], the time they took from send to the whole echo in rtt_s[i]. Among its
    messages some open like a request line and are not one (capitals and a space, then no '/'; a two-letter
    "method"): bytes of that kind in netprof's own random payload were once taken for routes."""
    near_misses = (b"x" * 64, b"PING " + b"y" * 59, b"R Oy" + b"z" * 60, b"AB /" + b"w" * 60)

    def one(i: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            end, n, spent = time.monotonic() + seconds, 0, 0.0
            while (t0 := time.monotonic()) < end:
                msg = near_misses[n % len(near_misses)]
                s.sendall(msg)
                got = 0
                while got < len(msg):
                    chunk = s.recv(len(msg) - got)
                    assert chunk, "server closed"
                    got += len(chunk)
                n, spent = n + 1, spent + time.monotonic() - t0
            counts[i], rtt_s[i] = n, spent

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)


def test_a_handler_waiting_on_another_service_is_off_cpu_io(tmp_path):
    """A thread-per-connection echo server whose handler calls another service that answers after 500 µs (the
    remote-work helper of `--work remote:500`), under a load of the test's own: watch finds ~500 µs of each
    request off CPU waiting on I/O, and names no route (not HTTP)."""
    require_bpf()
    token = os.urandom(16).hex()
    env = {**os.environ, "NETPROF_REMOTE_TOKEN": token}
    helper = subprocess.Popen([sys.executable, "-I", "-m", "netprof.profiler.core.remote_work", "--us", "500",
                               "--cpu", str(LOAD_CPU), "--seconds", "60"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([helper.stdout], [], [], 20)
        line = helper.stdout.readline() if ready else ""
        assert line.startswith("ready "), line
        helper_port = int(line.split()[1])
        with Backend("thread", "--work", f"remote:500@127.0.0.1:{helper_port}", env=env) as server:
            port = server.wait_ready()
            _pin(server.pid, SERVER_CPU)
            with Watch("--pid", str(server.pid), "--duration", "2", "--json") as w:
                w.attached()
                counts, rtt_s = [0] * 8, [0.0] * 8
                load = threading.Thread(target=_echo_load, args=(port, 8, 2.5, counts, rtt_s))
                load.start()
                doc = w.result()
                load.join(60)
    finally:
        helper.terminate()
        helper.wait(10)
    assert sum(counts) > 0
    b = doc["breakdown"]
    assert b["requests"] >= 0.8 * (doc["requests"] - doc["unsampled"]) > 0, doc  # of the attached share (the cap)
    io = b["parts_mean_us"]["off_cpu_io"]
    # Asked 500 µs: at least that minus the clock's grain (a physical floor). The ceiling is the host's speed (the
    # helper's wake-up shares the load's busy CPU: 1,224 µs in a CI run on a slow hour, ~520 on a quiet one), so it
    # comes from the same run: a request's server time, and so its I/O wait, lies inside the client's round trip.
    rtt_us = sum(rtt_s) / sum(counts) * 1e6
    print(f"off_cpu_io {io:.1f} µs a request (500 asked), the client's round trip {rtt_us:.1f} µs")
    assert 480 <= io <= rtt_us, (b, rtt_us)
    assert {r["route"] for r in doc["routes"]} - {"(unsampled)"} == {"(not HTTP)"}, doc["routes"]
    # the window lines (stderr, no terminal) in an echo server's words from the first that read a request (one
    # whose requests all came while the set was light keeps HTTP's, the words before any is read)
    said = [ln for ln in w.err_lines if " msgs/s " in ln or " req/s " in ln]
    echo = [i for i, ln in enumerate(said) if " msgs/s " in ln]
    assert echo and all(" msgs/s " in ln and "/msg" in ln for ln in said[echo[0]:]), said


def _ask(s: socket.socket, method: str, target: str, body: bytes = b"", headers: str = "") -> None:
    """One HTTP/1.1 request on `s`, by hand, and its answer's head read (the test servers' answers are small)."""
    s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode()
              + body)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, "the server closed the connection"
        head += chunk


# uvicorn's app for the routes: 200 to every path, GET /io after an awaited asyncio.sleep(0.002) (the loop asleep
# until its timer)
ROUTES_APP = """
import asyncio
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/io":
        await asyncio.sleep(0.002)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})
"""


def _uvicorn(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """ROUTES_APP under uvicorn (uvloop, httptools), pinned to the server's CPU once it answers."""
    (tmp_path / "routes_app.py").write_text(ROUTES_APP)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "routes_app:app", "--app-dir", str(tmp_path),
                               "--port", str(port), "--log-level", "warning"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"uvicorn did not answer: {server.communicate(timeout=10)[1].decode()[-2000:]}")
            time.sleep(0.1)
    _pin(server.pid, SERVER_CPU)
    return server, port


ROUNDS = 100  # requests sent to each route


def test_routes_are_read_by_the_kernel_folded_and_hold_no_secret(tmp_path):
    """Requests sent by hand to uvicorn: method and path become the route, ids folded into {id}, the query
    string, headers and body never kept (a secret put in all three appears in no output: JSON, --out's files,
    the metrics). GET /io awaits a 2-ms timer: its off_cpu_io is the loop asleep until it (its readiness waits ended
    on their timeout), by route (JSON, the report's table, the metrics, the live lines), and the other routes wait
    on none. Its syscalls per request are perf stat's count of the server's over the watch within 3%. The watch has
    no --duration: SIGTERM ends it as the duration would, --out's report included (and from a shell that ignores
    SIGINT, Ctrl-C is the user's: not tested)."""
    require_bpf()
    secret = "s3cr3t-" + os.urandom(6).hex()
    sent = {"GET /users/{id}": 0, "POST /users/{id}/items/{id}": 0, "GET /static/app.js": 0, "GET /io": 0}
    metrics_port = _free_port()
    server, port = _uvicorn(tmp_path)
    try:
        out = tmp_path / "watch"
        # --max-overhead 0: every request routed (under a cap some would count as "(unsampled)")
        with Watch("--pid", str(server.pid), "--duration", "600", "--json", "--out", str(out),
                   "--metrics-port", str(metrics_port), "--max-overhead", "0") as w:
            w.attached()
            # perf's count of the server's syscalls over the watch, the truth for its syscalls per request: every
            # 0.1 s a line, the first once it counts
            perf = subprocess.Popen([require_tool("perf"), "stat", "-I", "100", "-x,", "-e", "raw_syscalls:sys_enter",
                                     "-p", str(server.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, preexec_fn=default_sigint)
            ready, _, _ = select.select([perf.stderr], [], [], 30)
            perf_lines = [perf.stderr.readline()] if ready else []
            assert perf_lines and "raw_syscalls:sys_enter" in perf_lines[0], (perf_lines, perf.poll())
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                for i in range(ROUNDS):
                    for target, method, route, body in (
                            (f"/users/{1000 + i}?token={secret}", "GET", "GET /users/{id}", b""),
                            (f"/users/{i}/items/0f8c2d1e-{i:04d}-4bcd-9e3f-123456789abc", "POST",
                             "POST /users/{id}/items/{id}", secret.encode()),
                            ("/static/app.js", "GET", "GET /static/app.js", b""),
                            ("/io", "GET", "GET /io", b"")):
                        _ask(s, method, target, body, f"Authorization: Bearer {secret}\r\n")
                        sent[route] += 1
            want = f'netprof_requests_total{{route="POST /users/{{id}}/items/{{id}}"}} {ROUNDS}.0'
            io_done = f'netprof_requests_total{{route="GET /io"}} {ROUNDS}.0'  # sent last: the others are in
            deadline = time.monotonic() + 10  # the board is published once a window (--interval, 1 s)
            metrics = ""
            while io_done not in metrics and time.monotonic() < deadline and w.proc.poll() is None:
                time.sleep(0.3)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
                        metrics = r.read().decode()
                except OSError:  # the endpoint closes at the watch's end (before --out's report is written)
                    break
            perf.send_signal(signal.SIGINT)
            perf_lines += perf.communicate(timeout=30)[1].splitlines()
            w.proc.send_signal(signal.SIGTERM)
            doc = w.result()
    finally:
        server.terminate()
        server.wait(10)
    assert doc["ended_by"] == "SIGTERM", doc["ended_by"]
    assert (out / "report.md").is_file() and (out / "summary.json").is_file()
    got = {r["route"]: r["requests"] for r in doc["routes"]}
    assert got == sent, got
    # the report by route: each route's row with the requests sent, and the opening's sentence naming each
    report = (out / "report.md").read_text()
    for route, n in sent.items():
        assert f"| {route} | {n} |" in report, report
    (said,) = [line for line in report.splitlines() if line.startswith("- By route, ")]
    # GET /io (its timer) first
    assert said.startswith("- By route, GET /io took ") and all(f"{route} " in said for route in sent), said
    # and the terminal's last word on the watch, the same sentence
    (last,) = [line for line in w.err_lines if ", over the whole watch: by route, " in line]
    assert last.split(": by route, ")[1].strip() == said.split("- By route, ")[1], (last, said)
    everything = (json.dumps(doc) + metrics).encode() + b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert secret.encode() not in everything  # every file --out wrote: the report, its plots, results.csv
    assert want in metrics and io_done in metrics, metrics[:3000]
    # the loop's timer, by route: 2 ms asked, at least that minus the clock's grain, and nearly all of it until the
    # timer (the loop's few turns between are on CPU); the other routes never wait for one
    routes = {r["route"]: r["breakdown"] for r in doc["routes"]}
    io, plain = routes["GET /io"], routes["GET /static/app.js"]
    print(f"GET /io: off_cpu_io {io['parts_mean_us']['off_cpu_io']} µs, {io['detail_mean_us']}; "
          f"GET /static/app.js: {plain['detail_mean_us']}")
    skipped = doc["breakdown"]["skipped"]  # why a request was not followed, whole (pytest cuts a dict's repr short)
    # every request of the route followed, but for the race the breakdown counts and skips as `clock` (a thread's
    # clocks read from another CPU while this VM held the thread's program between reading the time of a state
    # change and writing it: breakdown.bpf.h, bd_enter_state; one GET /io of 100 in 2 of 17 runs here on 2026-12-05
    # at bc7c534): nothing else lost, and at most two so
    lost = ROUNDS - io["requests"]
    assert 0 <= lost <= skipped["clock"] <= 2 and sum(skipped.values()) == skipped["clock"], json.dumps([io, skipped])
    assert io["parts_mean_us"]["off_cpu_io"] >= 1900, json.dumps([io, skipped])
    assert io["detail_mean_us"]["off_cpu_timer"] >= 0.9 * io["parts_mean_us"]["off_cpu_io"], io
    assert plain["detail_mean_us"]["off_cpu_timer"] < 0.05 * io["detail_mean_us"]["off_cpu_timer"], plain
    (row,) = [line for line in report.splitlines() if line.startswith("| GET /io |")]
    assert "% of it until a timer)" in row, row
    # the metric is the route's sum: its requests × their mean
    (timer,) = [line for line in metrics.splitlines()
                if line.startswith('netprof_request_timer_seconds_total{route="GET /io"}')]
    total = io["requests"] * io["detail_mean_us"]["off_cpu_timer"] / 1e6
    assert abs(float(timer.split()[-1]) - total) <= 0.05 * total, (timer, total)
    # the syscalls, perf stat's count over nearly the same span (perf started after the watch and stopped before it:
    # the server idle at both ends), which also has the ~20 of the connection's set-up: before its first request the
    # thread has no route, and watch counts a thread's syscalls for the route of the request it read last
    # an interval in which the server never ran reads "<not counted>": none
    counts = [line.split(",")[1] for line in perf_lines if "raw_syscalls:sys_enter" in line]
    counted = sum(int(c) for c in counts if c.isdigit())
    watched = doc["syscalls_per_request"] * doc["requests"]
    print(f"syscalls: watch {doc['syscalls_per_request']} a request ({watched:.0f}), perf stat {counted}")
    assert watched == pytest.approx(counted, rel=0.03), (doc["syscalls_per_request"], doc["requests"], counted)
    # off a terminal, a line a window: the whole watch's off_cpu_io was mostly the loop's timers
    assert any("off_cpu_io" in line and "% (timers)" in line for line in w.err_lines), w.err_lines


def test_one_watch_per_process_ctrl_c_and_the_process_exit_detach(tmp_path):
    """A second watch of the same process refuses with one line (exit 2); the first ends when the process does
    (exit 0, "exited: detached"), leaving no lock file and no BPF program of its own. (SIGTERM: the routes test.)"""
    require_bpf()
    with Backend("asyncio_sock") as server:
        server.wait_ready()
        with Watch("--pid", str(server.pid)) as first:
            first.attached()
            second = run_netprof("watch", "--pid", str(server.pid), "--duration", "1", timeout=120)
            assert second.returncode == 2, second.stderr
            assert "another netprof watch" in second.stderr and "Traceback" not in second.stderr, second.stderr
            assert len(second.stderr.strip().splitlines()) == 1, second.stderr
            server.stop()
            out, err = first.proc.communicate(timeout=30)
            assert first.proc.returncode == 0, err
            assert "exited: detached" in err, err
    assert not Path(f"/run/netprof/watch-{server.pid}.lock").exists()


@pytest.mark.parametrize("args,says", [
    (("--pid", "0"), "--pid 0"),
    (("--pid", "999999999"), "no such process"),
    (("--port", "1"), "no process listens"),
    ((), "exactly one of --pid"),
    (("--pid", "1", "--port", "80"), "exactly one of --pid"),
    (("--pid", "1", "--json"), "give --duration"),
    (("--cgroup", "../../etc"), "--cgroup"),
    (("--pid", "1", "--duration", "0"), "--duration 0"),
    (("--pid", "1", "--max-overhead", "-0.1"), "--max-overhead -0.1"),
    (("--pid", "1", "--routes", "2"), "--routes 2"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    p = netprof_cli("watch", *args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert says in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_cap_keeps_the_probes_share_of_the_servers_cpu():
    """next_duty: attached throughout while the probes cost under the cap; above it, the share of the interval
    that brings their CPU (on average) to the cap, never under MIN_DUTY; no cap (0) attaches throughout; a
    window with (almost) no server CPU changes nothing."""
    from netprof.profiler.watch.session import MIN_DUTY, next_duty

    ms = 1_000_000
    assert next_duty(1.0, 5 * ms, 100 * ms, 0.1) == 1.0              # 5% < 10%
    assert next_duty(1.0, 20 * ms, 100 * ms, 0.1) == pytest.approx(0.5)  # 20% attached → half the time: 10%
    assert next_duty(0.5, 10 * ms, 100 * ms, 0.1) == 1.0             # (measured while attached) back under the cap
    assert next_duty(1.0, 1000 * ms, 100 * ms, 0.1) == MIN_DUTY     # ten times the server's CPU: the floor
    assert next_duty(1.0, 1000 * ms, 100 * ms, 0) == 1.0            # no cap
    assert next_duty(0.3, 5 * ms, ms // 2, 0.1) == 0.3                # an idle window: as it was


def test_the_live_table_puts_the_unsampled_last_and_says_timers():
    """The live view's table (a terminal): the routes followed, most requests first, then "(unsampled)" (the
    requests answered while the set was light: often the most, and of no route), as the report's table; a route
    whose off_cpu_io was mostly the loop asleep until a timer says "(timers)"."""
    from rich.console import Console

    from netprof.profiler.watch import live

    def route(name, n, parts=None, timer=0.0, calls=3.0):
        return {"route": name, "requests": n, "requests_per_sec": float(n), "syscalls_per_request": calls,
                "server_time_us": {"mean": 100.0, "p50": 90.0, "p99": 300.0, "max": 400.0},
                "breakdown": {"parts_mean_us": parts or {}, "detail_mean_us": {"off_cpu_timer": timer}}}

    f = {"requests_per_sec": 3000.0, "server_time_us": {"p50": 90.0, "p99": 300.0}, "syscalls_per_request": 3.0,
         "breakdown": {"parts_mean_us": {"off_cpu_io": 1900.0, "on_cpu": 100.0}, "detail_mean_us": {}},
         "routes": [route("(unsampled)", 2000, calls=None), route("GET /", 700, {"on_cpu": 50.0}),
                    route("GET /io", 300, {"off_cpu_io": 2000.0, "on_cpu": 40.0}, timer=1990.0)]}
    console = Console(record=True, width=160)
    console.print(live.table(f, "port 8000"))
    text = console.export_text()
    rows = [line.split()[0:2] for line in text.splitlines()[2:]]
    assert [" ".join(r) for r in rows] == ["GET /", "GET /io", "(unsampled) 2,000"], text
    assert "off_cpu_io 98% (timers)" in text, text
    assert "(timers)" not in live.line(f)  # the watch's whole: no timer figure given
    idle = f | {"requests_per_sec": 0.0, "server_time_us": {"p50": None, "p99": None}, "syscalls_per_request": None,
                "breakdown": {"parts_mean_us": {}, "detail_mean_us": {}}, "duty": 0.5}
    assert live.line(idle) == "0 req/s: no request answered  (followed 50% of the window: --max-overhead)"
    # connections the server has not accepted yet (its listen queue at the window's end): said, on every line
    assert live.line(idle | {"accept_queue": 1200}) == ("0 req/s: no request answered  1,200 waiting to be accepted  "
                                                        "(followed 50% of the window: --max-overhead)")
    assert live.line(f | {"accept_queue": 12}).endswith("/req  12 waiting to be accepted")
    assert "accepted" not in live.line(f | {"accept_queue": 0}) + live.line(f | {"accept_queue": None})
    # threads ready to run with no CPU for them (a pool outgrowing its CPUs), from half a thread on average
    assert live.line(f | {"accept_queue": 12, "threads_waiting": 37.4}).endswith(
        "/req  12 waiting to be accepted  37 threads waiting for a CPU")
    assert live.line(f | {"threads_waiting": 1.04}).endswith("/req  1.0 threads waiting for a CPU")
    assert "CPU" not in live.line(f | {"threads_waiting": 0.2}) + live.line(f | {"threads_waiting": None})
    # a loop that hands work to io_uring (uvloop's epoll_ctl): its ring operations beside the syscalls
    assert "3.0 syscalls/req" in live.line(f)
    ringed = route("GET /", 700, {"on_cpu": 50.0}) | {"ring_ops_per_request": 1.0}
    ring = f | {"ring_ops_per_request": 1.0, "routes": [ringed]}
    assert "3.0 syscalls + 1.0 io_uring ops/req" in live.line(ring)
    assert "3.0 syscalls/req" in live.line(f | {"ring_ops_per_request": 0.02})  # rounds to 0.0: left out
    console = Console(record=True, width=160)
    console.print(live.table(ring, "port 8000"))
    assert "3.0 + 1.0 io_uring" in console.export_text()


def test_the_live_view_speaks_of_messages_for_an_echo_server():
    """The view's words follow what the server spoke in the last window that read a request: an echo server's
    windows (every request "(not HTTP)") say msgs/s and /msg; one with only "(unsampled)" (--max-overhead's
    light share) keeps the words it had; HTTP's until a request is read."""
    from rich.console import Console

    from netprof.profiler.watch import live
    from netprof.profiler.watch.figures import protocol

    def window(*routes):
        return {"requests_per_sec": 2000.0, "server_time_us": {"p50": 90.0, "p99": 300.0},
                "syscalls_per_request": 2.0, "breakdown": {"parts_mean_us": {"on_cpu": 50.0}, "detail_mean_us": {}},
                "routes": [{"route": name, "requests": n, "requests_per_sec": float(n), "syscalls_per_request": 2.0,
                            "server_time_us": {"mean": 100.0, "p50": 90.0, "p99": 300.0, "max": 400.0},
                            "breakdown": {"parts_mean_us": {}, "detail_mean_us": {}}} for name, n in routes]}

    echo, light = window(("(not HTTP)", 2000)), window(("(unsampled)", 2000))
    assert protocol(echo["routes"]) == "echo" and protocol(light["routes"]) is None
    assert protocol(window(("(not HTTP)", 5), ("(other)", 2000))["routes"]) == "http"  # past the route slots
    assert protocol(window(("(not HTTP)", 0), ("GET /", 1))["routes"]) == "http"
    console = Console(record=True, width=200, force_terminal=False)
    view = live.View(console, "pid 1")
    for f in (light, echo, light):
        view.window(f)
    lines = console.export_text().splitlines()
    assert lines[0].startswith("pid 1: 2,000 req/s ") and lines[0].endswith("2.0 syscalls/req"), lines
    for said in lines[1:]:
        assert said.startswith("pid 1: 2,000 msgs/s ") and said.endswith("2.0 syscalls/msg"), lines
    table = Console(record=True, width=200)
    table.print(live.table(echo, "pid 1", "echo"))
    text = table.export_text()
    assert "msgs/s" in text and "syscalls/msg" in text and "req" not in text, text
