"""What a CPU filler at the lowest priority does to an open-loop measurement on this host (issue 49: why `make
test` does not run its measure-nothing tests in the measuring pass's idle time). selector under `--rate 2000` over
10 connections, alone and beside one busy loop per CPU at the idle scheduling class (`chrt --idle 0`) or at nice 19,
and beside the idle-class loops with the run itself (controller, backend, loader) at SCHED_FIFO 1 (`chrt -f 1`):
latency from the intended send (p50, p99) and how late the loader sent (schedule lateness p50, p99).

    .venv/bin/python bench/background_filler.py -r 2 [--write]
    .venv/bin/python bench/background_filler.py --from bench/data/background_filler/FILE.json [--write]

The arms alternate (alone, idle, alone, nice, alone, idle + FIFO, ...) so a speed regime of the host falls on all of
them.
"""

from __future__ import annotations

import json
import os
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
DATA = ROOT / "bench" / "data" / "background_filler"
HEADING = "A lowest-priority CPU filler and open-loop latency"
# Per arm: the filler's policy (a busy loop on each CPU, below every ordinary task), and the run's own (as root).
ARMS = {"alone": (None, []), "idle class": (["chrt", "--idle", "0"], []), "nice 19": (["nice", "-n", "19"], []),
        "idle class, the run at SCHED_FIFO 1": (["chrt", "--idle", "0"], ["chrt", "-f", "1"])}
ORDER = ("alone", "idle class", "alone", "nice 19", "alone", "idle class, the run at SCHED_FIFO 1")
SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"


def one(arm: str, seconds: float) -> list[dict]:
    fillers = []
    prefix, run_prefix = ARMS[arm]
    if prefix is not None:
        for cpu in range(os.cpu_count() or 1):
            fillers.append(subprocess.Popen([*prefix, "taskset", "-c", str(cpu), sys.executable, "-c",
                                             SPIN.format(s=2 * seconds + 30)]))
        time.sleep(0.2)
    try:
        with tempfile.TemporaryDirectory(prefix="bgf-") as scratch:
            res = subprocess.run([*run_prefix, str(NETPROF), "run", "selector", "-c", "10", "--rate", "2000",
                                  "-d", f"{seconds:g}", "-r", "2", "--warmup", "0.5", "--no-probes", "--no-report",
                                  "--json", "--wait", "--out", f"{scratch}/o"],
                                 capture_output=True, text=True, timeout=4 * seconds + 120)
    finally:
        for f in fillers:
            f.kill()
            f.wait()
    if res.returncode != 0:
        raise SystemExit(f"{arm}: netprof run failed ({res.returncode}): {res.stderr.strip()[-1500:]}")
    out = []
    for row in json.loads(res.stdout)["runs"]:
        ol = row["open_loop"]
        out.append({"arm": arm, "msgs_per_sec": row["msgs_per_sec"], "lat_p50_us": row["lat_us"]["p50"],
                    "lat_p99_us": row["lat_us"]["p99"], "schedule_late_p50_us": ol["schedule_late_us.p50"],
                    "schedule_late_p99_us": ol["schedule_late_us.p99"], "loader_late": ol["loader_late"]})
    return out


def table(doc: dict) -> str:
    lines = ["| filler | windows | msgs/s | latency p50 / p99 µs | schedule lateness p50 / p99 µs | "
             "requests sent over 1 ms late |", "|---|---|---|---|---|---|"]
    for arm in ARMS:
        rs = [r for r in doc["records"] if r["arm"] == arm]
        if not rs:
            continue

        def med(k, rs=rs):
            return statistics.median(r[k] for r in rs)

        lines.append(f"| {arm if ARMS[arm][0] else 'none'} | {len(rs)} | {med('msgs_per_sec'):.0f} | "
                     f"{med('lat_p50_us'):.0f} / {med('lat_p99_us'):.0f} | "
                     f"{med('schedule_late_p50_us'):.0f} / {med('schedule_late_p99_us'):.0f} | "
                     f"{med('loader_late'):.0f} |")
    lines += ["", "Medians over the windows of each arm (two windows a run, one run per arm per round)."]
    return "\n".join(lines)


def main() -> int:
    ap = lib.cli(__doc__, rounds=2)
    ap.add_argument("-d", "--duration", type=float, default=2.0)
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        records = []
        for i in range(args.rounds):
            for arm in ORDER:
                for rec in one(arm, args.duration):
                    records.append(rec | {"round": i + 1})
                    print(records[-1], file=sys.stderr)
        doc = lib.keep("background_filler", DATA, duration_s=args.duration, records=records)
    intro = (f"Measured by `.venv/bin/python bench/background_filler.py -r {max(r['round'] for r in doc['records'])}`; "
             f"table by {results_md.command()}; commit {doc['commit']}, {doc['date']}: selector (CPU 0) under "
             f"`--rate 2000` over 10 connections, {doc['duration_s']:g}-s windows, no probes; the filler a busy "
             "loop on each CPU.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
