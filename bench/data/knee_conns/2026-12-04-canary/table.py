"""The table of bench/RESULTS.md's "the knee against the host's slow stretches" from this directory's knee.json files:
`python3 table.py`. Per run: knee / its own ceiling (share) / tries the host slowed (knee.SLOWED: the canary's slowest
0.3 s ≥ 1.35x its usual) that failed, of all its tries / rates that passed only on a try after such failures (without
the rule, their first three tries failed: the rate would have failed). A pool of 10 that ran out: its highest rate met
and where the loader ran out."""

import json
import sys
from pathlib import Path

SLOWED = 1.35
ARMS = ("default", "c10", "pool10")


def cell(doc: dict) -> str:
    tries = [a for p in doc["probes"] for a in p["attempts"]]
    slowed = sum(not a["met"] and (a["slowed"] or 0) >= SLOWED for a in tries)
    saved = sum(p["met"] and all(not a["met"] for a in p["attempts"][:3]) for p in doc["probes"])
    ceiling = doc["ceiling"]["msgs_per_sec"]
    if doc["knee"] is None:
        lo = doc["bounds"][0]
        out = doc.get("loader_ran_out") or doc.get("host_ran_out") or {}
        head = f"{lo:,.0f}/s met, ran out at {out.get('rate', 0):,.0f}/s / {ceiling:,.0f}/s ({lo / ceiling:.2f})"
    else:
        head = f"{doc['knee']:,.0f}/s / {ceiling:,.0f}/s ({doc['knee_share_of_ceiling']:.2f})"
    return f"{head} / {slowed} of {len(tries)} / {saved}"


def main() -> None:
    here = Path(__file__).parent
    rounds = sorted({int(f.stem.split("-")[1]) for f in here.glob("*-*.json")})
    print("| round (order) | default | `-c 10` | `--max-connections 10` | default ÷ `-c 10` | default ÷ pool of 10 |")
    print("|---|---|---|---|---|---|")
    for i in rounds:
        docs = {a: json.loads((here / f"{a}-{i}.json").read_text()) for a in ARMS if (here / f"{a}-{i}.json").exists()}
        if len(docs) < 3:
            print(f"round {i} incomplete", file=sys.stderr)
            continue
        order = ", ".join(ARMS[(i + k) % 3] for k in range(3))
        d = docs["default"]["knee"] or 0
        c10 = docs["c10"]["knee"]
        pool = docs["pool10"]["knee"] or docs["pool10"]["bounds"][0]
        print(f"| {i} ({order}) | {cell(docs['default'])} | {cell(docs['c10'])} | {cell(docs['pool10'])} | "
              f"{d / c10:.2f} | {d / pool:.2f} |" if c10 and pool else f"| {i} | incomplete |")


main()
