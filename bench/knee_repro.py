"""Is `netprof knee` reproducible? The same search several times per server, the servers taking turns
(issue 34: knees within ±10% over 3 runs on uvicorn_httptools, aiohttp and granian_rsgi).

    .venv/bin/python bench/knee_repro.py --servers uvicorn_httptools,aiohttp,granian_rsgi -r 3 --slo p99<5ms [--tries N]
        [--canary]   # the speed canary on the backend's CPU through each run: knees at one host speed too
    .venv/bin/python bench/knee_repro.py --from bench/data/knee_repro/FILE.json [--write]

Each run is a real `netprof knee SERVER -c 10 --slo ... --json --no-probes`; its knee.json is kept whole in
bench/data/knee_repro/ (`--from` re-makes the table).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lib
import results_md

from netprof.profiler.ab import Canary
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.model.hostspeed import loop_ns

ROOT = Path(__file__).resolve().parent.parent
NETPROF = ROOT / ".venv" / "bin" / "netprof"
DATA = ROOT / "bench" / "data" / "knee_repro"
HEADING = "Open loop: netprof knee, run again"  # one cell per rate (--tries 1)
HEADING_TRIES = "Open loop: netprof knee with --tries {}"  # the section of a run with retries
HEADING_CANARY = "Open loop: netprof knee against the host's speed"  # --canary
HEADING_RECHECK = "Open loop: netprof knee with a second look at the lowest failing rate"  # --canary, since b2ae178


def one(server: str, slo: str, conns: int, tries: int, canary: bool) -> dict:
    """One `netprof knee` run; with `canary`, the speed canary (profiler/ab/records.py's reader, as `netprof ab` uses
    it) on the backend's CPU 0 through it, and its median loop time over the run as `canary_ns` (docs/facts.md: the
    host's speed moves in regimes of 0.3-3 s, and drifted 1.4-1.7x over minutes in the runs of RESULTS.md)."""
    with ProcessGroup() as group, tempfile.TemporaryDirectory(prefix="knee-") as scratch:
        speed = Canary.start(group, 0, 1500) if canary else None
        if speed is not None:
            speed.wait_started()  # its interpreter's start falls before the run
        t0 = time.monotonic()
        res = subprocess.run([str(NETPROF), "knee", server, "-c", str(conns), "--slo", slo, "--no-probes", "--json",
                              "--tries", str(tries), "--wait", "--out", f"{scratch}/o"],
                             capture_output=True, text=True, timeout=1200)
        t1 = time.monotonic()
        if res.returncode != 0:
            raise SystemExit(f"{server}: netprof knee failed ({res.returncode}): {res.stderr.strip()[-1500:]}")
        run = json.loads(res.stdout)
        if speed is not None:
            run["canary_ns"] = loop_ns(speed.samples(until=t1), [(t0, t1)])
            speed.close()
    return run


def table(doc: dict) -> str:
    rows = ["| server | ceiling (closed loop) msgs/s | knees, run by run | spread (max/min − 1) | ±10% "
            "| cells per run |", "|---|---|---|---|---|---|"]
    for server in doc["servers"]:
        runs = [r for r in doc["runs"] if r["server"] == server]
        knees = [r["knee"] for r in runs]
        ceil = statistics.median(r["ceiling"]["msgs_per_sec"] for r in runs)
        # cells measured: the ceiling's and every probe's tries (knee.json before --tries: one each)
        cells = ", ".join(str(r["ceiling"].get("tries", 1) + sum(p.get("tries", 1) for p in r["probes"])) for r in runs)
        if any(k is None for k in knees):
            rows.append(f"| {server} | {ceil:,.0f} | {', '.join(str(k) for k in knees)} | – | no knee in a run "
                        f"| {cells} |")
            continue
        mid = statistics.median(knees)
        ok = all(abs(k / mid - 1) <= 0.10 for k in knees)
        rows.append(f"| {server} | {ceil:,.0f} | {', '.join(f'{k:,.0f}' for k in knees)} | "
                    f"{max(knees) / min(knees) - 1:.1%} | {'within' if ok else 'NOT within'} | {cells} |")
    return "\n".join(rows)


def speed_table(doc: dict) -> str:
    """--canary: each run's knee and ceiling at one host speed: × its canary loop time ÷ the median over every
    run of the table (a slower host has a longer loop; if a server's capacity is CPU speed, the product holds)."""
    ref = statistics.median(r["canary_ns"] for r in doc["runs"])
    rows = ["| server | canary loop µs, run by run | knees at the median speed | spread | ±10% "
            "| ceilings at the median speed | spread |", "|---|---|---|---|---|---|---|"]
    for server in doc["servers"]:
        runs = [r for r in doc["runs"] if r["server"] == server]
        adj = [r["knee"] * r["canary_ns"] / ref for r in runs if r["knee"]]
        ceil = [r["ceiling"]["msgs_per_sec"] * r["canary_ns"] / ref for r in runs]
        mid = statistics.median(adj)
        ok = len(adj) == len(runs) and all(abs(k / mid - 1) <= 0.10 for k in adj)
        loops = ", ".join(f"{r['canary_ns'] / 1e3:.1f}" for r in runs)
        rows.append(f"| {server} | {loops} | "
                    f"{', '.join(f'{k:,.0f}' for k in adj)} | {max(adj) / min(adj) - 1:.1%} | "
                    f"{'within' if ok else 'NOT within'} | {', '.join(f'{c:,.0f}' for c in ceil)} | "
                    f"{max(ceil) / min(ceil) - 1:.1%} |")
    return "\n".join(rows)


def main() -> int:
    ap = lib.cli(__doc__, rounds=3)
    ap.add_argument("--servers", default="uvicorn_httptools,aiohttp,granian_rsgi")
    ap.add_argument("--slo", default="p99<5ms")
    ap.add_argument("-c", "--connections", type=int, default=10)
    ap.add_argument("--tries", type=int, default=3, help="netprof knee --tries")
    ap.add_argument("--canary", action="store_true", help="the speed canary on CPU 0 through each run")
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        servers = args.servers.split(",")
        runs = []
        for i in range(args.rounds):
            for server in servers if i % 2 == 0 else reversed(servers):
                runs.append(one(server, args.slo, args.connections, args.tries, args.canary))
                print(f"round {i + 1} {server}: knee {runs[-1]['knee']}, ceiling "
                      f"{runs[-1]['ceiling']['msgs_per_sec']}", file=sys.stderr)
        doc = lib.keep("knee_repro", DATA, "-canary" if args.canary else "", slo=args.slo,
                       connections=args.connections, tries=args.tries, servers=servers, runs=runs)
    tries = int(doc.get("tries", 1))  # raw data from before --tries: one cell per rate
    with_canary = all("canary_ns" in r for r in doc["runs"])
    option = (f" --tries {tries}" if "tries" in doc else "") + (" --canary" if with_canary else "")
    intro = (f"Measured by `.venv/bin/python bench/knee_repro.py --servers {','.join(doc['servers'])} -r "
             f"{len(doc['runs']) // len(doc['servers'])} --slo '{doc['slo']}'{option}`; table by "
             f"{results_md.command()}; commit {doc['commit']}, {doc['date']}: `-c {doc['connections']}`, the default "
             f"6 steps (the knee to 1/64 of the ceiling) of 2 s cells, no probes; servers taking turns; a rate fails "
             f"when {tries} cell(s) in a row fail it, the ceiling is the best of {tries}.")
    rechecked = any("recheck" in p for r in doc["runs"] for p in r["probes"])  # knee.json since b2ae178
    if rechecked:
        intro += " The search looks a second time at the lowest rate that failed (knee.py's search())."
    if with_canary:  # a section of its own
        intro += " The speed canary ran on the backend's CPU 0 through each run (~0.6% of it)."
        results_md.publish(HEADING_RECHECK if rechecked else HEADING_CANARY, intro,
                           f"{table(doc)}\n\n{speed_table(doc)}", args.write)
        return 0
    results_md.publish(HEADING if tries == 1 else HEADING_TRIES.format(tries), intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
