"""netprof's HTTP mode against wrk on the same servers (issue 17): requests/s and latency p50/p99.

Each server is started once, pinned to CPU 0 (as netprof pins its backends); then, in interleaved
rounds, `wrk -t1 -cN -dD --latency` (pinned to CPU 1) and `netprof run --attach PID --protocol http
-cN -dD --no-probes` (its loader pinned to CPU 1) load it in turn. The ratio is taken within a round.

    .venv/bin/python bench/http_vs_wrk.py                 # aiohttp, uvicorn (h11), uvicorn (httptools)
    .venv/bin/python bench/http_vs_wrk.py --write         # ... and replace its section in RESULTS.md
    .venv/bin/python bench/http_vs_wrk.py --builtin [NAME ...] [--write]

`--builtin`: the servers are netprof's built-in HTTP backends (`netprof list`, reads "http"; default:
all of them), started as `netprof run` starts them (`python -m netprof.backends NAME`, ready line,
pinned to CPU 0), into their own RESULTS.md section.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.backends import registry

SECTION = "HTTP: netprof's loader against wrk (bench/http_vs_wrk.py)"
SECTION_BUILTIN = "HTTP: the built-in HTTP backends, netprof's loader against wrk (bench/http_vs_wrk.py --builtin)"
PY = sys.executable
ASGI = ('async def app(scope, receive, send):\n'
        '    await send({"type": "http.response.start", "status": 200, "headers": '
        '[(b"content-type", b"text/plain"), (b"content-length", b"13")]})\n'
        '    await send({"type": "http.response.body", "body": b"Hello, World!"})\n')
AIOHTTP = ('import sys\nfrom aiohttp import web\n'
           'async def hello(request):\n    return web.Response(text="Hello, World!")\n'
           'app = web.Application()\napp.router.add_get("/plaintext", hello)\n'
           'web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)\n')
SERVERS = {
    "aiohttp": lambda d, port: [PY, f"{d}/aio.py", str(port)],
    "uvicorn_h11": lambda d, port: [PY, "-m", "uvicorn", "asgi:app", "--app-dir", d, "--port", str(port),
                                    "--loop", "asyncio", "--http", "h11", "--no-access-log", "--log-level", "warning"],
    "uvicorn_httptools": lambda d, port: [PY, "-m", "uvicorn", "asgi:app", "--app-dir", d, "--port", str(port),
                                          "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                                          "--log-level", "warning"],
}
UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}
PATH = registry.HTTP_REQUEST.split()[1]  # the path every server here answers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server on port {port} never listened")


def http_backends() -> list[str]:
    return [n for n in registry.names() if registry.get(n).protocol == "http"]


def start_builtin(name: str, cwd: str) -> tuple[subprocess.Popen, int]:
    """A built-in HTTP backend on CPU 0, as netprof starts it; (process, port) once it is ready."""
    srv = subprocess.Popen(["taskset", "-c", "0", PY, "-m", "netprof.backends", name, "--port", "0"],
                           stdout=subprocess.PIPE, text=True, cwd=cwd, start_new_session=True,
                           env={**os.environ, "PYTHONSAFEPATH": "1"})  # nothing imported from cwd
    ready, _, _ = select.select([srv.stdout], [], [], 30)
    line = srv.stdout.readline() if ready else ""
    if not line.startswith("ready "):
        srv.kill()
        raise SystemExit(f"{name}: no ready line ({line!r}, exit {srv.poll()})")
    return srv, int(line.split()[2])


def stop(srv: subprocess.Popen) -> None:
    """SIGTERM (a built-in backend takes its workers with it), SIGKILL to the group if it lingers."""
    srv.terminate()
    try:
        srv.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(srv.pid, signal.SIGKILL)
        srv.wait(timeout=10)


def wrk(port: int, args) -> dict:
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{args.connections}", f"-d{args.duration:g}s",
                          "--latency", f"http://127.0.0.1:{port}{PATH}"],
                         capture_output=True, text=True, timeout=args.duration + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {p: float(v) * UNITS[u] for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    return {"rps": rps, "p50": lat.get("50"), "p99": lat.get("99")}


def netprof(pid: int, port: int, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="netprof-bench-") as tmp:
        p = subprocess.run([str(Path(PY).with_name("netprof")), "run", "--attach", str(pid), "--target",
                            f"127.0.0.1:{port}", "--protocol", "http", "--request", registry.HTTP_REQUEST,
                            "-c", str(args.connections), "-d", str(args.duration), "-r", "1", "--warmup", "1",
                            "--no-probes", "--wait", "--json", "--out", f"{tmp}/run"],
                           capture_output=True, text=True, timeout=args.duration + 120)
        (row,) = json.loads(p.stdout)["runs"]
        if row["status"] != "ok":
            raise SystemExit(f"netprof: {row['error']}")
        return {"rps": row["msgs_per_sec"], "p50": row["lat_us"]["p50"], "p99": row["lat_us"]["p99"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("servers", nargs="*",
                    help=f"default: {', '.join(SERVERS)}; with --builtin, every built-in HTTP backend")
    ap.add_argument("--builtin", action="store_true", help="the servers are netprof's built-in HTTP backends")
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("-d", "--duration", type=float, default=5.0)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    known = http_backends() if args.builtin else list(SERVERS)
    args.servers = args.servers or known
    if unknown := [n for n in args.servers if n not in known]:
        ap.error(f"unknown server {unknown[0]!r}; known{' (--builtin)' if args.builtin else ''}: {', '.join(known)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="netprof-apps-") as d:
        Path(d, "asgi.py").write_text(ASGI)
        Path(d, "aio.py").write_text(AIOHTTP)
        for name in args.servers:
            if args.builtin:
                srv, port = start_builtin(name, d)
            else:
                port = free_port()
                srv = subprocess.Popen(["taskset", "-c", "0", *SERVERS[name](d, port)], cwd=d, start_new_session=True)
            try:
                wait_listening(port)
                got: dict[str, list[dict]] = {"wrk": [], "netprof": []}
                for rnd in range(args.rounds):
                    for tool in (("wrk", "netprof") if rnd % 2 == 0 else ("netprof", "wrk")):
                        got[tool].append(wrk(port, args) if tool == "wrk" else netprof(srv.pid, port, args))
                        print(name, tool, got[tool][-1], file=sys.stderr)
            finally:
                stop(srv)
            ratio = [n["rps"] / w["rps"] for n, w in zip(got["netprof"], got["wrk"])]
            mean = {t: {k: statistics.mean(r[k] for r in got[t]) for k in ("rps", "p50", "p99")} for t in got}
            rows.append(f"| {name} | {mean['wrk']['rps']:,.0f} | {mean['netprof']['rps']:,.0f} | "
                        f"{statistics.mean(ratio):.2f} ({min(ratio):.2f}–{max(ratio):.2f}) | "
                        f"{mean['wrk']['p50']:,.0f} / {mean['netprof']['p50']:,.0f} | "
                        f"{mean['wrk']['p99']:,.0f} / {mean['netprof']['p99']:,.0f} |")
    intro = (f"{command()} — {_dt.date.today()}; `GET /plaintext` → `Hello, World!`, {args.connections} "
             f"connections, {args.duration:g} s per run, {args.rounds} interleaved rounds; server on CPU 0, wrk "
             "(`-t1 --latency`) or netprof's loader on CPU 1; netprof `--no-probes --attach`.")
    head = ("| server | wrk req/s | netprof req/s | netprof/wrk (range) | p50 µs wrk / netprof "
            "| p99 µs wrk / netprof |\n|---|---|---|---|---|---|\n")
    publish(SECTION_BUILTIN if args.builtin else SECTION, intro, head + "\n".join(rows), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
