"""io_uring work counted beside syscalls (issue 50), measured: netprof's ring operations per message against
bpftrace's count of the kernel's own tracepoint, the same server with io_uring denied, and what the counting set
costs a server that does its I/O through a ring.

Each round, in an order rotated round by round (a speed regime of the host falls on every arm):
- `count`: `netprof run uvloop_sock cpp_uring selector -c 100 --probe-share 1` while bpftrace counts
  `io_uring:io_uring_submit_req` by pid and opcode and `sys_enter_sendto` by pid over the whole run; per server,
  netprof's ring operations per sendto (or per message, cpp_uring has no sendto) against bpftrace's;
- `onoff`: `netprof run uvloop_sock --io-uring on,off`: epoll_ctl syscalls + ring epoll_ctl per message in each;
- `cost`: `netprof run cpp_uring uvloop_sock selector --probe-share 0.5 -d 2`: the probed half's throughput
  against the unprobed half's in the same cell (the row's `probed` group), the counting set's in-run cost.

    .venv/bin/python bench/ring_counts.py -r 3 [--write]
    .venv/bin/python bench/ring_counts.py --from bench/data/ring/FILE.json [--write]
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lib
import results_md
import rounds

NETPROF = lib.ROOT / ".venv" / "bin" / "netprof"
DATA = lib.ROOT / "bench" / "data" / "ring"
HEADING = "io_uring work: netprof's ring counts against bpftrace, io_uring on and off, the cost (bench/ring_counts.py)"
SERVERS = ("uvloop_sock", "cpp_uring", "selector")
OPS = {26: "send", 27: "recv", 29: "epoll_ctl"}
BPFTRACE = ("tracepoint:io_uring:io_uring_submit_req { @ring[pid, args->opcode] = count(); } "
            "tracepoint:syscalls:sys_enter_sendto { @send[pid] = count(); }")


def netprof_argv(out: Path, *args: str) -> list[str]:
    # The CLI's entry point through the venv's interpreter (bpftrace -c execs an ELF file, not a script; -P keeps the
    # working directory off the path)
    return [str(NETPROF.parent / "python"), "-P", "-m", "netprof.profiler", "run", *args, "-r", "1", "--warmup", "0.3",
            "--no-report", "--json", "-o", str(out)]


def netprof(*args: str, tracer_out: Path | None = None) -> list[dict]:
    """The run's rows; with `tracer_out`, bpftrace counts (BPFTRACE) over it into that file: bpftrace starts the run
    itself (-c), once its probes are attached, and ends with it. Not stopped by SIGINT: bpftrace 0.17 loses one that
    does not interrupt its epoll_wait (tests/test_ring.py)."""
    with tempfile.TemporaryDirectory(prefix="ring-") as scratch:
        argv = netprof_argv(Path(scratch) / "out", *args)
        if tracer_out is not None:
            assert not any(" " in a for a in argv), argv  # bpftrace -c splits its command at spaces
            argv = ["bpftrace", "-o", str(tracer_out), "-e", BPFTRACE, "-c", " ".join(argv)]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if res.returncode != 0 or '"runs"' not in res.stdout:
        raise SystemExit(f"netprof run failed: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout)["runs"]


def count_round() -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="ring-bpftrace-") as scratch:
        maps = Path(scratch) / "maps.txt"
        rows = netprof(*SERVERS, "-c", "100", "-d", "1", "--probe-share", "1", tracer_out=maps)
        out = maps.read_text()
    ring: dict[int, dict[int, int]] = {}
    for pid, op, n in re.findall(r"@ring\[(\d+), (\d+)\]: (\d+)", out):
        ring.setdefault(int(pid), {})[int(op)] = int(n)
    sends = {int(p): int(n) for p, n in re.findall(r"@send\[(\d+)\]: (\d+)", out)}
    recs = []
    for r in rows:
        rec = {"arm": "count", "backend": r["backend"], "msgs_per_sec": r["msgs_per_sec"],
               "ring_per_msg": r["ring_per_msg"], "sendto_per_msg": r["syscalls_per_msg"].get("sendto", 0)}
        recs.append(rec)
    # bpftrace's processes: uvloop_sock's is the one with EPOLL_CTL submissions, cpp_uring's the one with RECV
    for rec in recs:
        want = {"uvloop_sock": 29, "cpp_uring": 27}.get(rec["backend"])
        pids = [p for p, ops in ring.items() if want in ops and (want != 29 or 27 not in ops)] if want else []
        if pids:
            pid = max(pids, key=lambda p: ring[p][want])
            rec["bpftrace"] = {OPS.get(op, str(op)): n for op, n in ring[pid].items()} | {"sendto": sends.get(pid, 0)}
    return recs


def onoff_round() -> list[dict]:
    return [{"arm": "onoff", "io_uring": r["io_uring"], "msgs_per_sec": r["msgs_per_sec"],
             "epoll_ctl_sys": r["syscalls_per_msg"].get("epoll_ctl", 0),
             "epoll_ctl_ring": r["ring_per_msg"].get("epoll_ctl", 0)}
            for r in netprof("uvloop_sock", "-c", "100", "-d", "1", "--probe-share", "1", "--io-uring", "on,off")]


def cost_round() -> list[dict]:
    return [{"arm": "cost", "backend": r["backend"], "msgs_per_sec": r["msgs_per_sec"],
             "probed_msgs_per_sec": (r.get("probed") or {}).get("msgs_per_sec"), "probe_cost": r.get("probe_cost"),
             "ring_cpu_us_per_msg": r.get("ring_cpu_us_per_msg")}
            for r in netprof(*SERVERS, "-c", "100", "-d", "2", "--probe-share", "0.5")]


ARMS = {"count": count_round, "onoff": onoff_round, "cost": cost_round}


def med(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})" if xs else "–"


def table(doc: dict) -> str:
    recs = doc["records"]
    lines = ["| server | netprof ring ops per message | bpftrace ring ops per message (its own sendto count as the "
             "message count where the server sends with sendto) | ratio |", "|---|---|---|---|"]
    for name, op in (("uvloop_sock", "epoll_ctl"), ("cpp_uring", "recv"), ("cpp_uring", "send")):
        ours, theirs = [], []
        for r in recs:
            if r["arm"] == "count" and r["backend"] == name and "bpftrace" in r:
                b = r["bpftrace"]
                if name == "uvloop_sock":  # per sendto on both sides (one sendto per message)
                    ours.append(r["ring_per_msg"].get(op, 0) / r["sendto_per_msg"])
                    theirs.append(b.get(op, 0) / b["sendto"])
        if name == "cpp_uring":  # no sendto: netprof's per message; bpftrace's RECV against its SEND count
            ours = [r["ring_per_msg"].get(op, 0) for r in recs if r["arm"] == "count" and r["backend"] == name]
            theirs = [r["bpftrace"].get(op, 0) / r["bpftrace"].get("send" if op == "recv" else "recv", 1)
                      for r in recs if r["arm"] == "count" and r["backend"] == name and "bpftrace" in r]
        ratio = [a / b for a, b in zip(ours, theirs) if b]
        lines.append(f"| {name} {op} | {med(ours)} | {med(theirs)} | {med(ratio)} |")
    sel = [max(r["ring_per_msg"].values(), default=0) for r in recs
           if r["arm"] == "count" and r["backend"] == "selector"]
    lines += ["", f"selector's largest ring figure per message: {med(sel)}.", "",
              "| uvloop_sock | msgs/s | epoll_ctl syscalls per message | ring epoll_ctl per message | both |",
              "|---|---|---|---|---|"]
    for mode in ("on", "off"):
        rs = [r for r in recs if r["arm"] == "onoff" and r["io_uring"] == mode]
        both = [r["epoll_ctl_sys"] + r["epoll_ctl_ring"] for r in rs]
        lines.append(f"| io_uring {mode} | {med([r['msgs_per_sec'] for r in rs])} "
                     f"| {med([r['epoll_ctl_sys'] for r in rs])} | {med([r['epoll_ctl_ring'] for r in rs])} "
                     f"| {med(both)} |")
    lines += ["", "| server | probed ÷ unprobed msgs/s (same cell) | io_uring threads' CPU µs per message |",
              "|---|---|---|"]
    for name in SERVERS:
        rs = [r for r in recs if r["arm"] == "cost" and r["backend"] == name]
        ratio = [r["probed_msgs_per_sec"] / r["msgs_per_sec"] for r in rs
                 if r["probed_msgs_per_sec"] and r["msgs_per_sec"]]
        lines.append(f"| {name} | {med(ratio)} | {med([r['ring_cpu_us_per_msg'] for r in rs])} |")
    lines += ["", f"Medians (min–max) over {doc['rounds']} rounds."]
    return "\n".join(lines)


def main() -> int:
    args = lib.cli(__doc__, rounds=3).parse_args()
    doc = lib.earlier(args)
    if doc is None:
        records = rounds.rotated_records(list(ARMS), args.rounds, lambda arm: ARMS[arm]())
        doc = lib.keep("ring_counts", DATA, rounds=args.rounds, records=records)
    intro = (f"Measured by `.venv/bin/python bench/ring_counts.py -r {doc['rounds']}`; "
             f"table by {results_md.command()}; "
             f"commit {doc['commit']}, {doc['date']}: servers on CPU 0, the loader on CPU 1, 100 connections, 1-s "
             "windows (2-s for the cost, half of it probed).")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
