"""How well the loader keeps an open-loop schedule, and what it costs (issue 34's second acceptance line):
at 50k requests/s over 100 connections against cpp_epoll, the p99 of how late requests on a free
connection went out, and the loader's CPU per message (from /proc, the rows' loader_cpu) against a
closed-loop run at about the same rate (think time sized to it).

    .venv/bin/python bench/open_loop_schedule.py -r 5 [--write]
    .venv/bin/python bench/open_loop_schedule.py --from bench/data/open_loop_schedule/FILE.json [--write]

The two arms alternate (open, closed, closed, open, ...) so a speed regime of the host falls on both.
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

ROOT = Path(__file__).resolve().parent.parent
NETPROF = ROOT / ".venv" / "bin" / "netprof"
DATA = ROOT / "bench" / "data" / "open_loop_schedule"
HEADING = "Open loop: the loader's schedule at 50k requests/s"
# 100 connections at 500/s each: a round trip of ~25 µs plus this think time is 2 ms.
ARMS = {"open": ["--rate", "50k"], "closed": ["--think", "fixed:1975"]}


def one(arm: str, seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ols-") as scratch:
        res = subprocess.run([str(NETPROF), "run", "cpp_epoll", "-c", "100", "-d", f"{seconds:g}", "-r", "1",
                              "--no-probes", "--json", "--wait", "--out", f"{scratch}/o", *ARMS[arm]],
                             capture_output=True, text=True, timeout=seconds + 120)
    if res.returncode != 0:
        raise SystemExit(f"{arm}: netprof run failed ({res.returncode}): {res.stderr.strip()[-1500:]}")
    row = json.loads(res.stdout)["runs"][0]
    cpu = row["loader_cpu"]
    rec = {"arm": arm, "msgs_per_sec": row["msgs_per_sec"], "loader_cpu_frac": cpu["cpu_frac"],
           "loader_us_per_msg": cpu["cpu_frac"] * 1e6 / row["msgs_per_sec"], "lat_p99_us": row["lat_us"]["p99"]}
    if arm == "open":
        ol = row["open_loop"]
        rec |= {"schedule_late_p50_us": ol["schedule_late_us.p50"], "schedule_late_p99_us": ol["schedule_late_us.p99"],
                "behind_share": ol["behind_share"], "loader_late": ol["loader_late"]}
    return rec


def table(doc: dict) -> str:
    recs = doc["records"]
    o = [r for r in recs if r["arm"] == "open"]
    c = [r for r in recs if r["arm"] == "closed"]

    def med(rs, k):
        return statistics.median(r[k] for r in rs)

    ratio = med(o, "loader_us_per_msg") / med(c, "loader_us_per_msg")
    lates = ", ".join(f"{r['schedule_late_p99_us']:.0f}" for r in o)
    return "\n".join([
        "| arm | msgs/s | loader CPU µs/msg | schedule lateness p50 / p99 µs | behind share |",
        "|---|---|---|---|---|",
        f"| open, --rate 50k | {med(o, 'msgs_per_sec'):.0f} | {med(o, 'loader_us_per_msg'):.2f} | "
        f"{med(o, 'schedule_late_p50_us'):.1f} / {med(o, 'schedule_late_p99_us'):.1f} | {med(o, 'behind_share'):.4f} |",
        f"| closed, --think fixed:1975 | {med(c, 'msgs_per_sec'):.0f} | {med(c, 'loader_us_per_msg'):.2f} | – | – |",
        "", f"Medians over {len(o)} rounds per arm. Open ÷ closed loader CPU per message: {ratio:.2f} (target ≤ 1.20); "
        f"schedule lateness p99 per round: {lates} µs "
        f"(target < 50)."])


def main() -> int:
    ap = lib.cli(__doc__, rounds=5)
    ap.add_argument("-d", "--duration", type=float, default=5.0)
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        records = []
        for i in range(args.rounds):
            for arm in (("open", "closed") if i % 2 == 0 else ("closed", "open")):
                records.append(one(arm, args.duration) | {"round": i + 1})
                print(records[-1], file=sys.stderr)
        doc = lib.keep("open_loop_schedule", DATA, duration_s=args.duration, records=records)
    intro = (f"Measured by `.venv/bin/python bench/open_loop_schedule.py -r {len(doc['records']) // 2}`; table by "
             f"{results_md.command()}; commit {doc['commit']}, {doc['date']}: cpp_epoll, 100 connections, "
             f"{doc['duration_s']:g} s windows, no probes, arms alternating.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
