"""What the counting probes cost the server's CPU per message, as each cell measures it (`probe_cpu_cost`: the probed
sub-window's on-CPU time per message, schedstat, against the unprobed rest's), beside what netprof's own
per-syscall cost predicts for the same cell: meta.json's `probe_cost_per_syscall.added_target_ns` × the cell's
syscalls per message ÷ its unprobed CPU per message. The set also counts context switches (a raw tracepoint on
sched_switch), which that per-syscall figure leaves out: a server that sleeps and wakes per message pays more than
predicted, by its switches per message (the table has them). At a set rate (--rate) every part of a window answers
the rate asked, so this figure, not msgs/s, is where the probes show; the report quotes it per cell.

    .venv/bin/python bench/probe_cpu_cost.py [-r 6] [--cells selector:0,selector:20000,uvicorn_httptools:10000]
        [--from RAW] [--write]

A cell is BACKEND:RATE (0: closed loop), run as `netprof run BACKEND -c 10 [--rate RATE] -d 2 -r ROUNDS`, one
netprof run per cell, in the order given.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile

import lib  # bench/ is sys.path[0]: these run as files
from results_md import command, publish

NETPROF = [str(lib.ROOT / ".venv" / "bin" / "netprof")]
DATA = lib.ROOT / "bench" / "data" / "probe_cpu_cost"
HEADING = "Probe overhead: the server's CPU per message, measured in each cell (bench/probe_cpu_cost.py)"


def run_cell(backend: str, rate: int, rounds: int) -> dict:
    """One `netprof run` of a cell: its rows' figures this benchmark reads, and the run's per-syscall cost."""
    with tempfile.TemporaryDirectory(prefix="probe-cpu-") as out:
        args = [backend, "-c", "10", "-d", "2", "-r", str(rounds), "--json", "--no-report", "--out", out]
        args += ["--rate", str(rate)] if rate else []
        done = subprocess.run([*NETPROF, "run", *args], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"netprof run {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
        summary = json.loads(done.stdout)
    rows = [{"round": r["round"], "probe_cpu_cost": r.get("probe_cpu_cost"), "probe_cost": r.get("probe_cost"),
             "syscalls_per_msg": sum((r.get("syscalls_per_msg") or {}).values()),
             "unprobed_cpu_us_per_msg": (r.get("probed") or {}).get("unprobed_cpu_us_per_msg"),
             "cpu_us_per_msg": (r.get("probed") or {}).get("cpu_us_per_msg"), "msgs_per_sec": r["msgs_per_sec"],
             "ctx_switches_per_msg": r.get("ctx_switches_per_msg")}
            for r in summary["runs"] if r["status"] == "ok"]
    return {"backend": backend, "rate": rate, "rows": rows,
            "added_target_ns": summary["meta"]["probe_cost_per_syscall"]["added_target_ns"]}


def table(cells: list[dict]) -> str:
    """One line per cell: the measured cost (mean over rounds, its 95% interval by the t quantile), the predicted
    one, and the figures it rests on."""
    from scipy import stats  # bench only: netprof's own code keeps scipy out of the run

    lines = ["| cell | rounds | measured: probed ÷ unprobed CPU per message − 1 | per round, spread (SD) | "
             "predicted from the syscalls alone: ns per syscall × syscalls per message ÷ CPU per message | "
             "syscalls per message | context switches per message | unprobed CPU per message |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        rows = [r for r in c["rows"] if r["probe_cpu_cost"] is not None and r["unprobed_cpu_us_per_msg"]]
        costs = [100 * r["probe_cpu_cost"] for r in rows]
        n = len(costs)
        mean = statistics.fmean(costs) if costs else math.nan
        sd = statistics.stdev(costs) if n > 1 else math.nan
        half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
        sys_per = statistics.fmean(r["syscalls_per_msg"] for r in rows) if rows else math.nan
        cpu = statistics.fmean(r["unprobed_cpu_us_per_msg"] for r in rows) if rows else math.nan
        switches = statistics.fmean(r.get("ctx_switches_per_msg") or 0.0 for r in rows) if rows else math.nan
        predicted = 100 * c["added_target_ns"] / 1e3 * sys_per / cpu if rows else math.nan
        where = f"{c['backend']} c=10, " + (f"{c['rate']:,}/s" if c["rate"] else "closed loop")
        lines.append(f"| {where} | {n} | {mean:+.1f}% ± {half:.1f} | {sd:.1f} points | {predicted:+.1f}% "
                     f"({c['added_target_ns']:.0f} ns) | {sys_per:.2f} | {switches:.2f} | {cpu:.1f} µs |")
    return "\n".join(lines)


def main() -> None:
    ap = lib.cli(__doc__, rounds=6)
    ap.add_argument("--cells", default="selector:0,selector:20000,uvicorn_httptools:10000",
                    help="BACKEND:RATE,… (RATE 0: closed loop)")
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        cells = []
        for spec in args.cells.split(","):
            backend, rate = spec.split(":")
            print(f"measuring {backend} at {rate or 'closed loop'}", file=sys.stderr)
            cells.append(run_cell(backend, int(rate), args.rounds))
        doc = lib.keep("probe_cpu_cost", DATA, cells=cells, argv=sys.argv[1:])
    measured = " ".join(["bench/probe_cpu_cost.py", *doc.get("argv", [])])
    intro = (f"{command()} (raw: `bench/data/probe_cpu_cost/`, measured by `{measured}` {doc['date']} at "
             f"{doc['commit']}). Each "
             "cell's `probe_cpu_cost` (the report's probe sentence and probe-cost table) against the cost netprof's "
             "per-syscall measure predicts for it.")
    publish(HEADING, intro, table(doc["cells"]), args.write)


if __name__ == "__main__":
    main()
