"""network_ping_test's twelve backends at one scale with both framings: who starves, and what each
message costs in syscalls.

One `netprof run` (default probes: counting set in a probed sub-window) over the 12 reference backends
× `--framing message,stream`, then one markdown table from the run's own results and anomalies:
msgs/s (mean ± 95% interval over rounds), Jain's index, the share of connections that handled 95% of
the messages, idle connections, syscalls per message in compact notation, and whether the starvation
rule fired.

    .venv/bin/python bench/framing_matrix.py                 # -c 100 --pipeline 8 -r 3 -d 3, prints the table
    .venv/bin/python bench/framing_matrix.py --write         # ... and replaces its section in RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from pathlib import Path

from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.probes import per_message_notation
from netprof.profiler.model import results, schema, stats

SEED_BACKENDS = ["asyncio", "asyncio_proto", "asyncio_sock", "uvloop", "uvloop_proto", "uvloop_sock", "gevent",
                 "selector", "thread", "cpp_epoll", "cpp_poll", "cpp_th"]
SECTION = "Framing: who starves with 8 in flight (bench/framing_matrix.py)"


def table(out: Path) -> str:
    df, _, _ = results.load(out)
    cells = stats.aggregate(df)
    summary = json.loads((out / results.SUMMARY_JSON).read_text())
    starved = {(a["backend"], a["framing"]) for a in summary["anomalies"] if a["id"] == "starvation"}
    lines = ["| backend | framing | msgs/s | Jain | 95% of msgs by | idle | syscalls per message | starvation |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in cells.sort_values(["backend", "framing"]).iterrows():
        per = stats.syscalls_of(r) or {}
        lines.append(
            f"| {r['backend']} | {r['framing']} | {r['mps_mean']:,.0f} ±{r['mps_ci_pct']:.0f}% "
            f"| {stats.num(r, 'per_conn.jain') or float('nan'):.2f} "
            f"| {100 * (stats.num(r, 'per_conn.active_share') or float('nan')):.0f}% "
            f"| {stats.num(r, 'per_conn.idle') or 0:.0f} | {per_message_notation(per) if per else '–'} "
            f"| {'**fires**' if (r['backend'], r['framing']) in starved else '–'} |")
    failed = df[df["status"] != "ok"] if "status" in df else df.iloc[0:0]
    for _, r in schema.normalize(failed).iterrows():
        lines.append(f"| {r['backend']} | {r['framing']} | FF: {str(r.get('error'))[:80]} | | | | | |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("backends", nargs="*", default=SEED_BACKENDS)
    p.add_argument("-c", "--connections", default="100")
    p.add_argument("--pipeline", default="8")
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("-d", "--duration", type=float, default=3.0)
    p.add_argument("--write", action="store_true", help="replace this benchmark's section in bench/RESULTS.md")
    args = p.parse_args()
    out = Path("runs") / f"framing-matrix-{time.strftime('%Y%m%d-%H%M%S')}"
    argv = [str(Path(sys.executable).with_name("netprof")), "run", *args.backends, "-c", args.connections,
            "--pipeline", args.pipeline, "--framing", "message,stream", "-r", str(args.rounds),
            "-d", str(args.duration), "--out", str(out)]
    started = time.monotonic()
    rc = subprocess.run(argv, stdout=subprocess.DEVNULL).returncode
    wall = time.monotonic() - started
    body = table(out)
    intro = (f"{command()} — {_dt.date.today()}, `netprof run` exit {rc}, wall {wall:.0f} s; "
             f"`{' '.join(argv[1:])}`; results in `{out}`.")
    publish(SECTION, intro, body, args.write)
    return rc


if __name__ == "__main__":
    sys.exit(main())
