"""Who waits when a loop starves connections (issue 22): per connection, its socket queue wait (the
p90 of its reads' waits, what rows and rules use), its median and its mean wait, for the least- and
most-served tenth of the connections, beside how much each tenth was served — from one
`netprof run --sockwait`.

    .venv/bin/python bench/sockwait_starvation.py [-c 100] [--pipeline 1,4,8] [-d 3] [-r 3] [--write]
    .venv/bin/python bench/sockwait_starvation.py --from bench/data/sockwait_starvation/FILE.parquet [--write]

The run's per-connection rows (sockwait_conn.parquet) are kept in bench/data/sockwait_starvation/, the
run's settings and commit in the parquet's metadata; `--from` re-makes the table from that file.

With K messages in flight a connection's mean wait is about K over its rate (Little's law), so the
ratio of mean waits repeats the ratio of service; the slow tenth of a connection's reads shows the
starvation itself: a served connection's reads find data that arrived a few handler times ago, a
starved one's, at each turn it gets, data that waited for the loop. The median shows it only while
the starved get short turns. The table puts the ratios side by side.
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
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.profiler.model import results, stats

DATA = lib.ROOT / "bench" / "data" / "sockwait_starvation"
SECTION = "Socket waits under starvation: p90, median and mean wait per connection (bench/sockwait_starvation.py)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backends", nargs="*", default=["asyncio_sock", "uvloop_sock"])
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("--pipeline", default="1,4,8")
    ap.add_argument("-d", "--duration", type=float, default=3.0)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--from", dest="source", type=Path, help="tabulate a saved parquet; nothing runs")
    args = ap.parse_args()
    conns, meta = load(args.source) if args.source else measure(args)
    lines = table(conns)
    intro = (f"Measured by {meta['command']} — commit {meta['commit']}, {meta['date']}; table by {command()}. "
             f"{meta['connections']} connections, message framing, {meta['duration']:g} s windows, {meta['rounds']} "
             "rounds (medians over rounds; in brackets the range over rounds). Connections ranked by bytes the "
             "server read in the window; the least-served tenth's and the most-served group's figures are the "
             "medians over their connections. The most-served group is the top tenth, or fewer when fewer read "
             "half the bytes (`stats.conn_wait_split`, since 2026-11-26). Raw data: "
             f"bench/data/sockwait_starvation/{meta['file']}.")
    publish(SECTION, intro, "\n".join(lines), args.write)
    return 0


def measure(args) -> tuple[pd.DataFrame, dict]:
    """One `netprof run --sockwait` of the cells; its per-connection rows saved once under DATA."""
    with tempfile.TemporaryDirectory(prefix="netprof-bench-") as tmp:
        out = Path(tmp) / "run"
        argv = [str(Path(sys.executable).with_name("netprof")), "run", *args.backends, "-c", str(args.connections),
                "--pipeline", args.pipeline, "--framing", "message", "-d", str(args.duration), "-r", str(args.rounds),
                "--sockwait", "--wait", "-q", "--out", str(out)]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"netprof run: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        conns = results.load_sockwait_conns(out)
    if conns is None:
        raise SystemExit("the run wrote no sockwait_conn.parquet")
    now = _dt.datetime.now(_dt.UTC)
    meta = {"command": command(), "commit": lib.commit(), "date": now.isoformat(timespec="seconds"),
            "connections": args.connections, "duration": args.duration, "rounds": args.rounds,
            "file": f"{now.strftime('%Y-%m-%dT%H%M%S')}.parquet"}
    table_ = pa.Table.from_pandas(conns, preserve_index=False)
    tagged = {**(table_.schema.metadata or {}), b"netprof_bench": json.dumps(meta).encode()}
    table_ = table_.replace_schema_metadata(tagged)
    DATA.mkdir(parents=True, exist_ok=True)
    with open(DATA / meta["file"], "xb") as f:  # never over an earlier measurement
        pq.write_table(table_, f, compression="zstd")
    print(f"raw data: {DATA / meta['file']}", file=sys.stderr)
    return conns, meta


def load(path: Path) -> tuple[pd.DataFrame, dict]:
    t = pq.read_table(path)
    return t.to_pandas(), json.loads(t.schema.metadata[b"netprof_bench"])


def table(conns: pd.DataFrame) -> list[str]:
    lines = ["| backend | pipeline | served ratio (most-served/least tenth) | mean-wait ratio | median-wait ratio "
             "| p90 wait, least-served | p90 wait, most-served (how many) | p90-wait ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for (backend, pipeline), cell in conns.groupby(["backend", "pipeline"], sort=False):
        per = []
        for _, rnd in cell.groupby("round"):
            served = rnd["bytes"].tolist()
            own = stats.conn_wait_split(served, rnd["wait_us"].tolist())  # the p90: what rows and rules use
            med = stats.conn_wait_split(served, rnd["wait_p50_us"].fillna(rnd["unread_age_us"]).tolist())
            mean = stats.conn_wait_split(served, rnd["wait_mean_us"].fillna(rnd["unread_age_us"]).tolist())
            per.append((own["conn_bytes_most"] / max(own["conn_bytes_least"], 1), mean["conn_wait_ratio"],
                        med["conn_wait_ratio"], own["conn_wait_least_us"], own["conn_wait_most_us"],
                        own["conn_wait_ratio"], own["conn_most_n"]))
        mid = [statistics.median(col) for col in zip(*per)]
        lines.append(f"| {backend} | {pipeline} | ×{mid[0]:,.1f} | ×{mid[1]:,.1f} | ×{mid[2]:,.0f} ({_span(per, 2)}) "
                     f"| {mid[3] / 1e3:,.2f} ms | {mid[4]:,.0f} µs ({_span(per, 6)}) "
                     f"| ×{mid[5]:,.0f} ({_span(per, 5)}) |")
    return lines


def _span(per: list[tuple], i: int) -> str:
    return f"{min(p[i] for p in per):,.0f}–{max(p[i] for p in per):,.0f}"


if __name__ == "__main__":
    sys.exit(main())
