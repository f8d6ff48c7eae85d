"""A thread per connection at 1000 connections with 8 in flight each: who is served is the scheduler's (and, in
Python, the GIL's) choice, and over how long a window it evens out.

With 8 requests in flight every connection has data waiting, so every handler thread is runnable: a thousand threads
on the backend's one core. Per backend (C++ threads, `cpp_th`: no GIL; Python's `thread` and `socketserver`) and
window (2 s, netprof's default, and 10 s), each a `netprof run BACKEND -c 1000 --pipeline 8 --warmup-after served
-d D -r 1` (every connection accepted and answered once before the warm-up), in rotated rounds: msgs/s, Jain's
fairness index, the connections that exchanged nothing, and the server's threads against its core (row `sched`, from
each thread's /proc schedstat over the probed sub-window: threads waiting for the CPU on average, a turn on it and
the wait for it, turns per thread p5/p50, threads waiting with no turn at all).

    .venv/bin/python bench/thread_per_connection.py -r 3 [--write]
    .venv/bin/python bench/thread_per_connection.py --from bench/data/thread_per_connection/FILE.json [--write]
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

NETPROF = lib.ROOT / ".venv" / "bin" / "netprof"
DATA = lib.ROOT / "bench" / "data" / "thread_per_connection"
HEADING = "A thread per connection at 1000 connections: the run queue and the GIL (bench/thread_per_connection.py)"
BACKENDS = ("cpp_th", "thread", "socketserver")
WINDOWS = (2, 10)
CONNECTIONS, PIPELINE = 1000, 8


def one(pair: tuple[str, int]) -> list[dict]:
    backend, window = pair
    with tempfile.TemporaryDirectory(prefix="netprof-bench-") as tmp:
        p = subprocess.run([str(NETPROF), "run", backend, "-c", str(CONNECTIONS), "--pipeline", str(PIPELINE),
                            "--warmup-after", "served", "-d", str(window), "-r", "1", "--wait", "-q", "--no-report",
                            "--json", "--out", str(Path(tmp) / "run")],
                           capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"netprof run {backend} -d {window}: exit {p.returncode}: {p.stderr[-500:]}")
    (row,) = json.loads(p.stdout)["runs"]
    return [{"backend": backend, "window_s": window, "msgs_per_sec": row["msgs_per_sec"],
             "jain": row["per_conn"]["jain"], "idle": row["per_conn"]["idle"],
             "futex_per_msg": (row.get("syscalls_per_msg") or {}).get("futex", 0.0), **row["sched"]}]


def _mean(recs: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in recs)


def _runq(recs: list[dict]) -> float:
    """Threads waiting for the CPU, each round's capped at its threads as rows are since 2026-12-06 (stats.sched: a
    wait counts when it ends, so a window a few waits long takes in some from before it)."""
    return statistics.fmean(min(r["runq_mean"], r["threads"]) for r in recs)


def table(doc: dict) -> str:
    lines = ["| backend | window | msgs/s | Jain | idle connections | threads waiting for the CPU (of) | a turn / "
             "the wait for it | turns per thread p5 / p50 | waiting, no turn | futex per message |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for backend in BACKENDS:
        for window in WINDOWS:
            rs = [r for r in doc["records"] if (r["backend"], r["window_s"]) == (backend, window)]
            if not rs:
                continue
            mean, ci = rounds.interval([r["msgs_per_sec"] for r in rs])
            jains = ", ".join(f"{r['jain']:.2f}" for r in rs)
            lines.append(
                f"| {backend} | {window} s | {mean:,.0f} ± {ci:,.0f} | {jains} | "
                f"{', '.join(str(r['idle']) for r in rs)} | {_runq(rs):.0f} ({_mean(rs, 'threads'):.0f})"
                f" | {_mean(rs, 'turn_us'):.0f} µs / {_mean(rs, 'wait_per_turn_us') / 1e3:.0f} ms | "
                f"{_mean(rs, 'turns_p5'):.0f} / {_mean(rs, 'turns_p50'):.0f} | "
                f"{', '.join(str(r['waiting_no_turn']) for r in rs)} | {_mean(rs, 'futex_per_msg'):.3f} |")
    lines += ["", "msgs/s: mean ± 95% interval over the rounds; Jain, idle and waiting with no turn: each round's; the "
              "rest means. The threads' figures are over the probed sub-window (0.3 of the window; row `sched`)."]
    return "\n".join(lines)


def main() -> int:
    args = lib.cli(__doc__, rounds=3).parse_args()
    doc = lib.earlier(args)
    if doc is None:
        pairs = [(b, w) for b in BACKENDS for w in WINDOWS]
        records = rounds.rotated_records(pairs, args.rounds, one)
        doc = lib.keep("thread_per_connection", DATA, rounds=args.rounds, connections=CONNECTIONS,
                       pipeline=PIPELINE, records=records)
    intro = (f"Measured by `.venv/bin/python bench/thread_per_connection.py -r {doc['rounds']}`; table by "
             f"{results_md.command()}; commit {doc['commit']}, {doc['date']}: each backend × window a `netprof run "
             f"BACKEND -c {doc['connections']} --pipeline {doc['pipeline']} --warmup-after served -d WINDOW -r 1` "
             "(probes on), in rotated rounds. Raw data: bench/data/thread_per_connection/.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
