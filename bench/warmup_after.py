"""What `--warmup-after served` changes at 1000 connections: the same cells with the warm-up begun once every
connection is up (connected, the default) and once each has had one request answered (served).

A loop that accepts one connection per turn (libuv: uvloop, uvicorn) or one whose accepting thread waits for the GIL
among hundreds of busy handler threads (`thread`) drains its listen queue slowly under load: with the default the
window opens with connections still queued, and its msgs/s is that of the connections it had taken in. Per backend
and setting (netprof's defaults otherwise: 5 s windows after 1 s of warm-up, probes on), each a `netprof run -r 1` in
rotated rounds: msgs/s (req/s for HTTP), the server's listen queue when the window opened, the connections that
exchanged nothing in the window, Jain's fairness index, p99, and the loader's setup (served: the first exchange's
time in it).

    .venv/bin/python bench/warmup_after.py -r 3 [--write]
    .venv/bin/python bench/warmup_after.py --from bench/data/warmup_after/FILE.json [--write]

`--matrix BASE SERVED`: the 1000-connection cells of two committed runs side by side (a run directory each, its
results.parquet): BASE with the default, SERVED the same cells with `--warmup-after served` (the echo reference
report bench/reports/modern/ and bench/data/warmup_after/2026-12-06-modern-served/).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lib
import results_md
import rounds

from netprof.profiler.model import stats

NETPROF = lib.ROOT / ".venv" / "bin" / "netprof"
DATA = lib.ROOT / "bench" / "data" / "warmup_after"
HEADING = "1000 connections, warm-up after connected or served (bench/warmup_after.py)"
MATRIX_HEADING = "The echo reference report at 1000 connections, warm-up after served (bench/warmup_after.py --matrix)"
BACKENDS = ("thread", "uvloop", "uvicorn_httptools")
SETTINGS = ("connected", "served")
# The commit both committed runs of --matrix were made at, for runs whose meta.json has no netprof_source (before
# 2026-12-06 evening).
MATRIX_COMMIT = "605da6f"
CONNECTIONS = 1000


def one(pair: tuple[str, str]) -> list[dict]:
    backend, after = pair
    with tempfile.TemporaryDirectory(prefix="netprof-bench-") as tmp:
        p = subprocess.run([str(NETPROF), "run", backend, "-c", str(CONNECTIONS), "-r", "1", "--warmup-after", after,
                            "--wait", "-q", "--no-report", "--json", "--out", str(Path(tmp) / "run")],
                           capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"netprof run {backend} --warmup-after {after}: exit {p.returncode}: {p.stderr[-500:]}")
    (row,) = json.loads(p.stdout)["runs"]
    first = row.get("served_first") or {}
    return [{"backend": backend, "warmup_after": after, "protocol": row["protocol"],
             "msgs_per_sec": row["msgs_per_sec"], "accept_queue_at_start": row["accept_queue_at_start"],
             "idle": row["per_conn"]["idle"], "jain": row["per_conn"]["jain"], "p99_us": row["lat_us"]["p99"],
             "setup_s": row["setup_s"], "served_first_s": first.get("s"), "unserved": first.get("unserved")}]


def _mean(recs: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in recs)


def table(doc: dict) -> str:
    lines = ["| backend | warm-up after | msgs/s (req/s) | listen queue at window open | idle connections | Jain | "
             "p99 | setup (first exchange) |", "|---|---|---|---|---|---|---|---|"]
    for backend in BACKENDS:
        for after in SETTINGS:
            rs = [r for r in doc["records"] if (r["backend"], r["warmup_after"]) == (backend, after)]
            if not rs:
                continue
            mean, ci = rounds.interval([r["msgs_per_sec"] for r in rs])
            first = (f" ({_mean(rs, 'served_first_s'):.2f} s, {max(r['unserved'] for r in rs)} unserved at most)"
                     if after == "served" else "")
            lines.append(f"| {backend} | {after} | {mean:,.0f} ± {ci:,.0f} | "
                         f"{', '.join(str(r['accept_queue_at_start']) for r in rs)} | "
                         f"{', '.join(str(r['idle']) for r in rs)} | {_mean(rs, 'jain'):.2f} | "
                         f"{_mean(rs, 'p99_us') / 1e3:.1f} ms | {_mean(rs, 'setup_s'):.2f} s{first} |")
    lines += ["", "msgs/s: mean ± 95% interval over the rounds; queue and idle: each round's; Jain, p99 and setup: "
              "means (uvicorn_httptools' in requests)."]
    return "\n".join(lines)


def _made(run: Path) -> tuple[str, str]:
    """When a run began, to the minute ("2026-12-06 15:38"), and the commit netprof was built from, from its
    meta.json."""
    meta = json.loads((run / "meta.json").read_text())
    return meta["started"][:16].replace("T", " "), meta.get("netprof_source") or MATRIX_COMMIT


def matrix_table(base: Path, served: Path) -> str:
    """Per backend and pipeline at 1000 connections: Jain, idle connections and the listen queue when the window
    opened (means over the rounds), and msgs/s, under the default and with --warmup-after served."""
    import pandas as pd

    a, b = (stats.aggregate(pd.read_parquet(d / "results.parquet")) for d in (base, served))
    both = a[a["connections"] == CONNECTIONS].merge(b[b["connections"] == CONNECTIONS], on=["backend", "pipeline"],
                                                    suffixes=("", "_s"))
    lines = ["| backend | in flight | Jain (default → served) | idle connections | listen queue at window open | "
             "msgs/s (default → served) |", "|---|---|---|---|---|---|"]
    for _, r in both.sort_values(["backend", "pipeline"]).iterrows():
        lines.append(f"| {r['backend']} | {r['pipeline']} | {r['per_conn.jain']:.2f} → {r['per_conn.jain_s']:.2f} | "
                     f"{r['per_conn.idle']:.0f} → {r['per_conn.idle_s']:.0f} | "
                     f"{r['accept_queue_at_start']:.0f} → {r['accept_queue_at_start_s']:.0f} | "
                     f"{r['mps_mean']:,.0f} → {r['mps_mean_s']:,.0f} |")
    return "\n".join(lines + ["", "Means over each run's rounds; the runs were made one after the other, not paired: "
                               "throughput differences of ~10% are the host's (RESULTS.md, \"Host regimes\")."])


def main() -> int:
    ap = lib.cli(__doc__, rounds=3)
    ap.add_argument("--matrix", nargs=2, type=Path, metavar=("BASE", "SERVED"))
    args = ap.parse_args()
    if args.matrix:
        base, served = args.matrix
        (when_base, src_base), (when_served, src_served) = _made(base), _made(served)
        made = (f"{when_base} and {when_served}, both at commit {src_base}" if src_base == src_served else
                f"{when_base} at commit {src_base} and {when_served} at commit {src_served}")
        intro = (f"Table by {results_md.command()}: {base}, made by `bench/reference_report.py modern` (its meta.json: "
                 f"`-c 10,100,1000 --pipeline 1,8 -r 2 -d 2 --warmup 0.5`), against {served}, the same servers "
                 "`-c 1000 --pipeline 1,8 -r 2 -d 2 --warmup 0.5 --warmup-after served` (its meta.json), made "
                 f"{made}.")
        results_md.publish(MATRIX_HEADING, intro, matrix_table(base, served), args.write)
        return 0
    doc = lib.earlier(args)
    if doc is None:
        pairs = [(b, a) for b in BACKENDS for a in SETTINGS]
        records = rounds.rotated_records(pairs, args.rounds, one)
        doc = lib.keep("warmup_after", DATA, rounds=args.rounds, connections=CONNECTIONS, records=records)
    intro = (f"Measured by `.venv/bin/python bench/warmup_after.py -r {doc['rounds']}`; table by "
             f"{results_md.command()}; commit {doc['commit']}, {doc['date']}: each backend × setting a `netprof run "
             f"BACKEND -c {doc['connections']} -r 1 --warmup-after SETTING` (5 s window after 1 s of warm-up, probes "
             "on), in rotated rounds. Raw data: bench/data/warmup_after/.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
