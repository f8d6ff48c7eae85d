"""Is `netprof knee` reproducible? The same search several times per server, the servers taking turns
(issue 34: knees within ±10% over 3 runs on uvicorn_httptools, aiohttp and granian_rsgi).

    .venv/bin/python bench/knee_repro.py --servers uvicorn_httptools,aiohttp,granian_rsgi -r 3 --slo p99<5ms [--tries N]
    .venv/bin/python bench/knee_repro.py --from bench/data/knee_repro/FILE.json [--write]

Each run is a real `netprof knee SERVER -c 10 --slo ... --json --no-probes`; its knee.json is kept whole in
bench/data/knee_repro/ (`--from` re-makes the table).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lib
import results_md

ROOT = Path(__file__).resolve().parent.parent
NETPROF = ROOT / ".venv" / "bin" / "netprof"
DATA = ROOT / "bench" / "data" / "knee_repro"
HEADING = "Open loop: netprof knee, run again"  # one cell per rate (--tries 1)
HEADING_TRIES = "Open loop: netprof knee with --tries {}"  # the section of a run with retries


def one(server: str, slo: str, conns: int, tries: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="knee-") as scratch:
        res = subprocess.run([str(NETPROF), "knee", server, "-c", str(conns), "--slo", slo, "--no-probes", "--json",
                              "--tries", str(tries), "--wait", "--out", f"{scratch}/o"],
                             capture_output=True, text=True, timeout=1200)
    if res.returncode != 0:
        raise SystemExit(f"{server}: netprof knee failed ({res.returncode}): {res.stderr.strip()[-1500:]}")
    return json.loads(res.stdout)


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="uvicorn_httptools,aiohttp,granian_rsgi")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--slo", default="p99<5ms")
    ap.add_argument("-c", "--connections", type=int, default=10)
    ap.add_argument("--tries", type=int, default=3, help="netprof knee --tries")
    ap.add_argument("--from", dest="source", type=Path)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.source:
        doc = json.loads(args.source.read_text())
    else:
        servers = args.servers.split(",")
        runs = []
        for i in range(args.rounds):
            for server in servers if i % 2 == 0 else reversed(servers):
                runs.append(one(server, args.slo, args.connections, args.tries))
                print(f"round {i + 1} {server}: knee {runs[-1]['knee']}, ceiling "
                      f"{runs[-1]['ceiling']['msgs_per_sec']}", file=sys.stderr)
        doc = {"benchmark": "knee_repro", "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
               "commit": lib.commit(), "slo": args.slo, "connections": args.connections, "tries": args.tries,
               "servers": servers, "runs": runs}
        path = lib.save_raw(DATA / f"{_dt.date.today().isoformat()}.json", doc)
        print(f"raw data: {path}", file=sys.stderr)
    tries = int(doc.get("tries", 1))  # raw data from before --tries: one cell per rate
    option = f" --tries {tries}" if "tries" in doc else ""
    intro = (f"Measured by `.venv/bin/python bench/knee_repro.py --servers {','.join(doc['servers'])} -r "
             f"{len(doc['runs']) // len(doc['servers'])} --slo '{doc['slo']}'{option}`; table by "
             f"{results_md.command()}; commit {doc['commit']}, {doc['date']}: `-c {doc['connections']}`, the default "
             f"6 steps (the knee to 1/64 of the ceiling) of 2 s cells, no probes; servers taking turns; a rate fails "
             f"when {tries} cell(s) in a row fail it, the ceiling is the best of {tries}.")
    results_md.publish(HEADING if tries == 1 else HEADING_TRIES.format(tries), intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
