"""netprof's open-loop load (`--rate`) against an independent open-loop generator, vegeta, on the same
server process (issue 34): below the server's knee, do the two give the same p50 and p99?

    bash scripts/setup-bench.sh          # vegeta, pinned, into /usr/local/bin (once)
    .venv/bin/python bench/open_loop_vs_vegeta.py --backend uvicorn_httptools --rates 500,1000,2000 -r 3
    .venv/bin/python bench/open_loop_vs_vegeta.py --from bench/data/open_loop_vs_vegeta/FILE.json [--write]

One backend server (`python -m netprof.backends NAME`) is started once, pinned to CPU 0, and stays warm;
for each round and rate, vegeta (`attack -rate R`, keep-alive, at most -c connections, on CPU 1) and
`netprof run --attach PID --target ... --rate R -c C --no-probes` (its loader on CPU 1) take turns, the
order alternating by round. Both send GET /plaintext at a constant rate; netprof's latency is measured from each
request's intended time, vegeta's from when it sent the request (it has no correction for a late send,
which below the knee should not matter: that is the check). Raw figures go to
bench/data/open_loop_vs_vegeta/; `--from` re-makes the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lib
import results_md

ROOT = Path(__file__).resolve().parent.parent
NETPROF = ROOT / ".venv" / "bin" / "netprof"
PYTHON = ROOT / ".venv" / "bin" / "python"
DATA = ROOT / "bench" / "data" / "open_loop_vs_vegeta"
HEADING = "Open loop: netprof --rate against vegeta"
PATH = "/plaintext"  # what the built-in HTTP backends serve (backends/registry.py HTTP_REQUEST)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"the backend did not listen on {port} within {timeout:g} s")


def vegeta(port: int, rate: float, seconds: float, conns: int) -> dict:
    target = f"GET http://127.0.0.1:{port}{PATH}\n"
    attack = subprocess.run(
        ["taskset", "-c", "1", "vegeta", "attack", f"-rate={rate:g}/s", f"-duration={seconds:g}s",
         f"-connections={conns}", f"-max-connections={conns}", "-keepalive=true", "-http2=false"],
        input=target.encode(), capture_output=True, timeout=seconds + 60, check=True)
    rep = subprocess.run(["vegeta", "report", "-type=json"], input=attack.stdout, capture_output=True,
                         timeout=60, check=True)
    r = json.loads(rep.stdout)
    if r["success"] < 0.99:
        raise SystemExit(f"vegeta: {r['success']:.1%} of requests succeeded: {r.get('status_codes')}")
    lat = r["latencies"]  # ns
    return {"tool": "vegeta", "rate": rate, "achieved": r["throughput"], "requests": r["requests"],
            "success": r["success"], "p50_us": lat["50th"] / 1e3, "p99_us": lat["99th"] / 1e3,
            "max_us": lat["max"] / 1e3}


def netprof(pid: int, port: int, rate: float, seconds: float, conns: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="olv-") as scratch:
        res = subprocess.run(
            [str(NETPROF), "run", "--attach", str(pid), "--target", f"127.0.0.1:{port}", "--protocol", "http",
             "--request", f"GET {PATH}", "--rate", f"{rate:g}", "-c", str(conns), "-d", f"{seconds:g}",
             "--warmup", "1", "-r", "1",
             "--no-probes", "--loader-cpus", "1", "--json", "--wait", "--out", f"{scratch}/o"],
            capture_output=True, text=True, timeout=seconds + 120)
    if res.returncode != 0:
        raise SystemExit(f"netprof run failed ({res.returncode}): {res.stderr.strip()[-1500:]}")
    row = json.loads(res.stdout)["runs"][0]
    ol = row.get("open_loop") or {}
    return {"tool": "netprof", "rate": rate, "achieved": row["msgs_per_sec"], "p50_us": row["lat_us"]["p50"],
            "p99_us": row["lat_us"]["p99"], "max_us": row["lat_us"]["max"], "p99_sent_us": row["lat_sent_us"]["p99"],
            "schedule_late_p99_us": ol.get("schedule_late_us.p99"), "behind": ol.get("behind")}


def measure(args) -> dict:
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", "0", str(PYTHON), "-I", "-m", "netprof.backends", args.backend,
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    records = []
    try:
        wait_listening(port)
        for rnd in range(args.rounds):
            for rate in args.rates:
                order = ("vegeta", "netprof") if rnd % 2 == 0 else ("netprof", "vegeta")
                for tool in order:
                    rec = (vegeta(port, rate, args.duration, args.connections) if tool == "vegeta"
                           else netprof(server.pid, port, rate, args.duration, args.connections))
                    rec["round"] = rnd + 1
                    records.append(rec)
                    print(f"round {rnd + 1} {tool:<7} {rate:>7g}/s: achieved {rec['achieved']:.0f}/s, "
                          f"p50 {rec['p50_us']:.0f} µs, p99 {rec['p99_us']:.0f} µs", file=sys.stderr)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=10)
    return {"benchmark": "open_loop_vs_vegeta", "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "commit": lib.commit(), "backend": args.backend, "connections": args.connections,
            "duration_s": args.duration, "vegeta": _vegeta_version(), "records": records}


def _vegeta_version() -> str:
    out = " ".join(subprocess.run(["vegeta", "-version"], capture_output=True, text=True).stdout.split())
    return out if re.search(r"v\d+\.\d+", out) else pinned_vegeta()


def pinned_vegeta() -> str:
    """A `go install`ed vegeta prints no version: the one scripts/setup-bench.sh pins."""
    m = re.search(r"VEGETA_VERSION=(\S+)", (ROOT / "scripts" / "setup-bench.sh").read_text())
    return f"{m.group(1) if m else '?'} (go install by scripts/setup-bench.sh)"


def table(doc: dict) -> str:
    rows = ["| rate asked | tool | achieved /s | p50 µs | p99 µs | netprof ÷ vegeta p50 | p99 |",
            "|---|---|---|---|---|---|---|"]
    for rate in sorted({r["rate"] for r in doc["records"]}):
        med = {}
        for tool in ("netprof", "vegeta"):
            mine = [r for r in doc["records"] if r["rate"] == rate and r["tool"] == tool]
            med[tool] = {k: statistics.median(r[k] for r in mine) for k in ("achieved", "p50_us", "p99_us")}
        for tool in ("netprof", "vegeta"):
            m = med[tool]
            ratio = (f"{med['netprof']['p50_us'] / med['vegeta']['p50_us']:.2f} | "
                     f"{med['netprof']['p99_us'] / med['vegeta']['p99_us']:.2f}") if tool == "netprof" else " | "
            rows.append(f"| {rate:g} | {tool} | {m['achieved']:.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} "
                        f"| {ratio} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="uvicorn_httptools")
    ap.add_argument("--rates", default="500,1000,2000")
    ap.add_argument("-c", "--connections", type=int, default=10)
    ap.add_argument("-d", "--duration", type=float, default=5.0)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--from", dest="source", type=Path, help="tabulate a saved file; nothing runs")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.source:
        doc = json.loads(args.source.read_text())
    else:
        if not shutil.which("vegeta"):
            raise SystemExit("vegeta is missing: run `bash scripts/setup-bench.sh` (as root) first")
        args.rates = [float(r) for r in args.rates.split(",")]
        doc = measure(args)
        path = lib.save_raw(DATA / f"{_dt.date.today().isoformat()}-{args.backend}.json", doc)
        print(f"raw data: {path}", file=sys.stderr)
    intro = (f"Measured by `.venv/bin/python bench/open_loop_vs_vegeta.py --backend {doc['backend']} -r "
             f"{max(r['round'] for r in doc['records'])}`; table by {results_md.command()}; commit {doc['commit']}, "
             f"{doc['date']}: {doc['backend']} pinned to CPU 0, "
             f"{doc['connections']} connections, {doc['duration_s']:g} s per run, medians over rounds; vegeta "
             f"{doc['vegeta'] if re.search(r'v[0-9]', doc['vegeta']) else pinned_vegeta()}. "
             f"netprof's latency is from each request's intended time, vegeta's from its send.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
