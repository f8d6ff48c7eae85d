"""Is the loader ever the bottleneck? Its CPU use while driving each backend, cell by cell.

Each cell: one backend (`python -m netprof.backends NAME --port 0`, pinned to --backend-cpu), the loader
(pinned to --loader-cpus), N connections, ping-pong for --duration seconds. Reported: msgs/s, latency
p50/p99, and the loader's own `cpu_frac` (CPU seconds / (window × worker threads, at most its CPUs)). A loader near
cpu_frac 1.0 is saturated: the backend's figure is then a floor, not its speed. headroom = 1 - cpu_frac.

    .venv/bin/python bench/loader_headroom.py                       # cpp_epoll selector uvloop_proto
    .venv/bin/python bench/loader_headroom.py cpp_epoll -c 10,100,1000 -d 3 --threads 1,2 --json out.json

Timing figures belong here, not in tests; the machine is noisy (±10%): use --rounds for spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from netprof.profiler.core.procs import ProcessError, ProcessGroup
from netprof.profiler.run.loader_client import Loader, LoaderError, RunRequest
from netprof.profiler.run.plan import RunConfig


def start_backend(group: ProcessGroup, name: str, cpu: str | None) -> int:
    proc = group.spawn(f"backend-{name}", [sys.executable, "-m", "netprof.backends", name, "--port", "0"], cpus=cpu)
    line = proc.wait_line("ready", 20)  # "ready <pid> <port>"
    return int(line.split()[-1])


def run_cell(args, backend: str, conns: int, threads: int, pipeline: int) -> dict:
    rows = []
    for _round in range(args.rounds):
        with ProcessGroup() as group:  # fresh backend per round: no state carried over
            try:
                port = start_backend(group, backend, args.backend_cpu)
            except ProcessError as e:
                return {"backend": backend, "connections": conns, "threads": threads, "error": str(e)}
            loader = Loader.start(group, cpus=args.loader_cpus, threads=threads)
            req = RunRequest(target=f"127.0.0.1:{port}", connections=conns, duration=args.duration,
                             warmup=args.warmup, pipeline=pipeline, msize=args.msize,
                             transport=RunConfig(backends=[backend]).loader_transport(backend))
            try:
                s = loader.run(req)
            except LoaderError as e:
                return {"backend": backend, "connections": conns, "threads": threads, "error": f"{e.kind}: {e.message}"}
            rows.append(s)
    mps = [s["msgs_per_sec"] for s in rows]
    frac = [s["loader_cpu"]["cpu_frac"] for s in rows]
    return {
        "backend": backend,
        "connections": conns,
        "threads": threads,
        "pipeline": pipeline,
        "msgs_per_sec": statistics.mean(mps),
        "msgs_per_sec_sd": statistics.stdev(mps) if len(mps) > 1 else 0.0,
        "p50_us": statistics.mean(s["latency_us"]["p50"] for s in rows),
        "p99_us": statistics.mean(s["latency_us"]["p99"] for s in rows),
        "loader_cpu_frac": statistics.mean(frac),
        "loader_cpu_us_per_msg": statistics.mean(
            (s["loader_cpu"]["user_s"] + s["loader_cpu"]["sys_s"]) / max(1, s["messages"]) * 1e6 for s in rows
        ),
        "headroom": 1.0 - statistics.mean(frac),
        "errors": {k: sum(s["errors"][k] for s in rows) for k in rows[0]["errors"]},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("backends", nargs="*", default=["cpp_epoll", "selector", "uvloop_proto"])
    ap.add_argument("-c", "--connections", default="10,100,1000")
    ap.add_argument("-d", "--duration", type=float, default=3.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("-r", "--rounds", type=int, default=1)
    ap.add_argument("-s", "--msize", type=int, default=64)
    ap.add_argument("--pipeline", default="1")
    ap.add_argument("--threads", default="1", help="loader worker threads, comma list")
    ap.add_argument("--backend-cpu", default="0")
    ap.add_argument("--loader-cpus", default="1")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()

    rows = []
    t0 = time.monotonic()
    print(f"{'backend':<14}{'conns':>7}{'thr':>4}{'K':>4}{'msgs/s':>12}{'p50 us':>10}{'p99 us':>10}"
          f"{'ldr cpu':>9}{'us/msg':>8}")
    for backend in args.backends:
        for conns in (int(c) for c in args.connections.split(",")):
            for threads in (int(t) for t in args.threads.split(",")):
                for k in (int(p) for p in args.pipeline.split(",")):
                    r = run_cell(args, backend, conns, threads, k)
                    rows.append(r)
                    if "error" in r:
                        print(f"{backend:<14}{conns:>7}{threads:>4}{k:>4}  FAILED: {r['error']}")
                        continue
                    print(f"{backend:<14}{conns:>7}{threads:>4}{k:>4}{r['msgs_per_sec']:>12.0f}{r['p50_us']:>10.1f}"
                          f"{r['p99_us']:>10.1f}{r['loader_cpu_frac']:>9.2f}{r['loader_cpu_us_per_msg']:>8.2f}",
                          flush=True)
    print(f"({time.monotonic() - t0:.0f} s; loader cpu near 1.00 = the loader, not the backend, is the limit)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
