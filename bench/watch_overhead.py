#!/usr/bin/env python3
"""What does `netprof watch` cost the server it watches? wrk's throughput against one uvicorn (uvloop + httptools,
one worker, CPU 0) with no watch, with `netprof watch` at its default --max-overhead, whole throughout
(--max-overhead 0), and light but for the least share of each interval (--max-overhead 0.001: a cap no server
meets, so the light set's own cost shows), interleaved in rounds (each round runs the four in a shuffled order),
as ratios to the same round's unwatched run.

    sudo .venv/bin/python bench/watch_overhead.py [-r 5] [-d 4] [-c 50] [--write]
    sudo .venv/bin/python bench/watch_overhead.py --from bench/data/watch_overhead/DATE.json [--write]

One server for the whole measurement (the same process, as a server in production is watched); wrk -t1 -cC
-dD on CPU 1, started once watch says it is attached (its start-up, the probes' compile, is not in the window),
and watch stopped (SIGTERM) when wrk is done. Each watched run also records what watch said: its attached
share (the duty under the cap), the probes' CPU per request by the kernel's count, and its requests/s (every
request, light parts included). The server runs saturated, the worst case: the probes' time per request is all
added to the request's own.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import lib
import results_md
import rounds

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "watch_overhead"
VENV = HERE.parent / ".venv" / "bin"
HEADING = "netprof watch: what it costs the server it watches"
# no watch; watch at its default cap; whole throughout; light but for the least share (a cap no server meets)
VARIANTS = ("none", "default", "full", "light")
ARGS = {"default": (), "full": ("--max-overhead", "0"), "light": ("--max-overhead", "0.001")}


def _server() -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen(["taskset", "-c", "0", str(VENV / "python"), "-m", "netprof.backends", "uvicorn_httptools",
                          "--port", "0"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline() if select.select([p.stdout], [], [], 30)[0] else ""
    if not line.startswith("ready "):
        p.kill()
        sys.exit(f"the server did not start: {line!r}")
    return p, int(line.split()[2])


def _wrk(port: int, seconds: float, connections: int) -> float:
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s",
                          f"http://127.0.0.1:{port}/plaintext"], capture_output=True, text=True, check=True).stdout
    return next(float(x.split()[1]) for x in out.splitlines() if x.startswith("Requests/sec:"))


def measure(pid: int, port: int, variant: str, seconds: float, connections: int) -> dict:
    if variant == "none":
        return {"wrk_rps": _wrk(port, seconds, connections)}
    w = subprocess.Popen(["taskset", "-c", "1", str(VENV / "netprof"), "watch", "--pid", str(pid), "--json",
                          "--duration", "3600", *ARGS[variant]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if select.select([w.stderr], [], [], 1)[0] and w.stderr.readline().startswith("watching "):
                break
        else:
            sys.exit("watch never attached")
        rps = _wrk(port, seconds, connections)
        w.send_signal(signal.SIGTERM)
        out, _ = w.communicate(timeout=60)
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
    doc = json.loads(out)
    return {"wrk_rps": rps, "watch_rps": doc["requests_per_sec"], "attached_share": doc["attached_share"],
            "probe_cpu_us_per_request": doc["probes"]["cpu_us_per_request"]}


def table(doc: dict) -> str:
    raw = doc["raw"]
    variants = [v for v in VARIANTS if v in raw]
    lines = ["| watch | wrk req/s (mean) | ratio to no watch (95% CI) | attached share | probes' CPU per request |",
             "|---|---|---|---|---|"]
    base = [m["wrk_rps"] for m in raw["none"]]
    for v in variants:
        ms = raw[v]
        mean_rps = sum(m["wrk_rps"] for m in ms) / len(ms)
        if v == "none":
            lines.append(f"| none | {mean_rps:,.0f} | 1 | – | – |")
            continue
        ratio, ci = rounds.interval([m["wrk_rps"] / b for m, b in zip(ms, base)])
        share = sum(m["attached_share"] for m in ms) / len(ms)
        cpu = sum(m["probe_cpu_us_per_request"] for m in ms) / len(ms)
        name = {"default": f"default (--max-overhead {doc['default_cap']:g})",
                "full": "whole throughout (--max-overhead 0)",
                "light": "light but for 5% of each interval (--max-overhead 0.001)"}[v]
        lines.append(f"| {name} | {mean_rps:,.0f} | {ratio:.3f} ± {ci:.3f} | {share:.2f} | {cpu:.1f} µs |")
    return "\n".join(lines)


def main() -> None:
    ap = lib.cli(__doc__, rounds=5)
    ap.add_argument("-d", "--duration", type=float, default=4.0, help="wrk's seconds per run")
    ap.add_argument("-c", "--connections", type=int, default=50)
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        if os.geteuid() != 0:
            sys.exit("run as root (watch loads BPF)")
        server, port = _server()
        try:
            raw_pairs = rounds.interleaved(
                ["uvicorn_httptools"], VARIANTS, args.rounds, 1,
                lambda b, v: measure(server.pid, port, v, args.duration, args.connections),
                lambda v, m: f"{v:<8} {m['wrk_rps']:>9,.0f} req/s")
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
        from netprof.profiler.watch.config import DEFAULT_MAX_OVERHEAD

        doc = lib.keep("watch_overhead", DATA, rounds=args.rounds, duration_s=args.duration,
                       connections=args.connections, default_cap=DEFAULT_MAX_OVERHEAD,
                       raw={v: raw_pairs[("uvicorn_httptools", v)] for v in VARIANTS})
    intro = (f"Measured by `sudo .venv/bin/python bench/watch_overhead.py -r {doc['rounds']} -d {doc['duration_s']:g} "
             f"-c {doc['connections']}`; table by {results_md.command()}; commit {doc['commit']}, {doc['date']}. One "
             "uvicorn (uvloop + httptools, one worker) on CPU 0, saturated by `wrk -t1 -c"
             f"{doc['connections']}` on CPU 1 (the worst case: the server does nothing but answer, so the probes' "
             "time per request is the largest share of it); the variants in a shuffled order in each round, "
             "ratios to the same round's run without watch. `attached share`: the part of the time watch kept its "
             "whole set attached under the cap (light the rest: requests counted and timed only); the probes' CPU "
             "per request is the kernel's count (BPF run time), the probe runs of wrk's own syscalls included.")
    results_md.publish(HEADING, intro, table(doc), args.write)


if __name__ == "__main__":
    main()
