"""One loader host against two (`--loader-hosts lab2` vs `lab2,lab3`), the same server and connections
(issue 36: "a two-loader run matches a one-loader run of the same total connections within noise").

In the lab (scripts/lab.sh: network-namespace hosts with a real sshd each, all on this machine's two
CPUs), the two arms alternate in ABBA blocks, one `netprof run selector -c C -d D -r 1` per cell, and the
ratio two/one of msgs/s and of p99 is given per block pair with its mean and a t-interval over the pairs.
The lab is brought up (3 hosts) if none is, and taken down again if this script brought it up.

    sudo .venv/bin/python bench/multihost_loaders.py --blocks 4
    sudo .venv/bin/python bench/multihost_loaders.py --raw bench/data/multihost/$(date +%F).json
    .venv/bin/python bench/multihost_loaders.py --from bench/data/multihost/2026-11-26.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lib

ROOT = lib.ROOT
NETPROF = ROOT / ".venv" / "bin" / "netprof"
LAB = ROOT / "scripts" / "lab.sh"
CFG = "/run/netprof-lab/ssh_config"
ARMS = {"one": "lab2", "two": "lab2,lab3"}


def _t975(dof: int) -> float:
    from scipy import stats  # deferred: only the summary needs it

    return float(stats.t.ppf(0.975, dof))


def cell(hosts: str, connections: int, duration: float, work: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=work))
    out.rmdir()
    res = subprocess.run([str(NETPROF), "run", "selector", "-c", str(connections), "-d", str(duration), "-r", "1",
                          "--warmup", "0.5", "--no-probes", "--json", "--loader-hosts", hosts, "--ssh-config", CFG,
                          "-o", str(out)], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        sys.exit(f"netprof run failed: {res.stderr.strip().splitlines()[-1:]}")
    row = json.loads(res.stdout)["runs"][0]
    return {"msgs_per_sec": row["msgs_per_sec"], "p99_us": row["lat_us"]["p99"], "p50_us": row["lat_us"]["p50"],
            "connected": row["connected"], "idle": row["per_conn"]["idle"],
            "skew_s": (row.get("loaders") or {}).get("window_skew_s")}


def measure(blocks: int, connections: int, duration: float) -> dict:
    brought_up = not os.path.exists(CFG)
    if brought_up:
        subprocess.run(["bash", str(LAB), "up", "3"], check=True, capture_output=True)
    cells = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for b in range(blocks):
                order = ["one", "two", "two", "one"] if b % 2 == 0 else ["two", "one", "one", "two"]
                for arm in order:
                    got = cell(ARMS[arm], connections, duration, Path(work))
                    cells.append({"block": b, "arm": arm, **got})
                    print(f"block {b + 1}/{blocks} {arm}: {got['msgs_per_sec']:,.0f} msgs/s, p99 {got['p99_us']} µs",
                          flush=True)
    finally:
        if brought_up:
            subprocess.run(["bash", str(LAB), "down"], capture_output=True)
    return {"when": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "commit": lib.commit(),
            "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
            "settings": {"backend": "selector", "connections": connections, "duration_s": duration,
                         "blocks": blocks, "probes": False},
            "cells": cells}


def summary(doc: dict) -> str:
    by_block: dict[int, dict[str, list[dict]]] = {}
    for c in doc["cells"]:
        by_block.setdefault(c["block"], {}).setdefault(c["arm"], []).append(c)
    lines = [f"multihost loaders, {doc['when']}, commit {doc['commit']}: selector -c {doc['settings']['connections']}, "
             f"{doc['settings']['duration_s']} s cells, no probes, {doc['settings']['blocks']} ABBA blocks"]
    for metric in ("msgs_per_sec", "p99_us"):
        ratios = [statistics.mean(c[metric] for c in b["two"]) / statistics.mean(c[metric] for c in b["one"])
                  for b in by_block.values()]
        m = statistics.mean(ratios)
        half = _t975(len(ratios) - 1) * statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else 0
        lines.append(f"  {metric}: two/one {m:.3f} [{m - half:.3f}, {m + half:.3f}] "
                     f"(per block: {', '.join(f'{r:.3f}' for r in ratios)})")
    two = [c for c in doc["cells"] if c["arm"] == "two"]
    connected = [c["connected"] for c in two]
    lines.append(f"  two-loader cells: connected {min(connected)}..{max(connected)}, "
                 f"idle connections max {max(c['idle'] for c in two)}, window skew max "
                 f"{max(c['skew_s'] or 0 for c in two) * 1e3:.2f} ms")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("-c", "--connections", type=int, default=100)
    p.add_argument("-d", "--duration", type=float, default=2.0)
    p.add_argument("--raw", type=Path, help="also write the raw cells here (never over an earlier file)")
    p.add_argument("--from", dest="from_", type=Path, help="print the summary of earlier raw data")
    a = p.parse_args()
    if a.from_:
        print(summary(json.loads(a.from_.read_text())))
        return
    doc = measure(a.blocks, a.connections, a.duration)
    if a.raw:
        lib.save_raw(a.raw, doc)
    print(summary(doc))


if __name__ == "__main__":
    main()
