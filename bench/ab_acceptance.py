"""netprof ab, measured (issue 33's acceptance): does it resolve a slowdown of a few percent, does its
interval hold 1 when nothing changed, and how often does it cry wolf?

    .venv/bin/python bench/ab_acceptance.py slowdown [--noise 0.25]   # spin_echo 0 ns vs 100 ns per message
    .venv/bin/python bench/ab_acceptance.py aa --repeats 20            # the same --cmd twice, 20 times
    .venv/bin/python bench/ab_acceptance.py builtins                   # asyncio_sock vs uvloop_sock
    .venv/bin/python bench/ab_acceptance.py --from bench/data/ab/*.json [--write]

Every experiment is one real `netprof ab ... --json` (100 connections, `--max-time 150`; the method is ab's
default, turns since 2026-11-27: pairs are generations of the servers' processes), its document kept
whole in bench/data/ab/ (`--from` re-makes the tables from those files, nothing runs). `--noise D` runs
bench/bystander.py (one neighbour per CPU, busy D of the time) for the length of the experiment. The slowdown
check compares ab's ratio of msgs/s with the ratio the variants' CPU time per message predicts (from /proc,
the rows' cpu_us_per_msg_total): a backend that is the busy side serves 1 CPU ÷ (CPU per message).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lib
import results_md

ROOT = Path(__file__).resolve().parent.parent
NETPROF = ROOT / ".venv" / "bin" / "netprof"
PYTHON = ROOT / ".venv" / "bin" / "python"
DATA = ROOT / "bench" / "data" / "ab"
SPIN_ECHO = ROOT / "bench" / "spin_echo.py"
HEADING = "netprof ab: a 100 ns slowdown, A/A controls and two built-in backends"
# Acceptance (issue 33): a slowdown resolved with its interval inside (0.80, 0.995) and entirely below 1; every
# interval at most 3 points wide; A/A intervals hold 1; at most 2 significant A/A verdicts in 20.
WIDTH_MAX = 0.03
SLOW_RANGE = (0.80, 0.995)


def spin_cmd(ns: int) -> str:
    return f"{PYTHON} -I {SPIN_ECHO} --spin-ns {ns} --port {{port}}"


def experiment_argv(kind: str, max_time: float, method: str = "") -> list[str]:
    common = ["-c", "100", "--max-time", f"{max_time:g}", "--json", "--wait", *(["--method", method] if method else [])]
    if kind == "slowdown":
        return ["ab", "--cmd", spin_cmd(0), "--name", "spin0", "--cmd", spin_cmd(100), "--name", "spin100", *common]
    if kind == "aa":
        return ["ab", "--cmd", spin_cmd(0), "--name", "spin0", "--aa", *common]
    if kind == "builtins":
        return ["ab", "asyncio_sock", "uvloop_sock", *common]
    raise SystemExit(f"unknown experiment {kind!r}")


def run_one(kind: str, max_time: float, noise: float, label: str, method: str = "") -> Path:
    """One `netprof ab`; its document and how it was run go to bench/data/ab/<date>-<label>.json."""
    argv = experiment_argv(kind, max_time, method)
    bystander = None
    if noise:
        bystander = subprocess.Popen([str(PYTHON), str(ROOT / "bench" / "bystander.py"), "--duty", str(noise),
                                      "--seconds", str(max_time + 120)], start_new_session=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ab-bench-") as scratch:
        res = subprocess.run([str(NETPROF), *argv, "--out", f"{scratch}/out"], capture_output=True, text=True,
                             timeout=max_time + 300)
    elapsed = time.monotonic() - t0
    if bystander is not None:
        os.killpg(bystander.pid, signal.SIGTERM)
        bystander.wait()
    if res.returncode not in (0, 1):
        raise SystemExit(f"{kind}: netprof ab exited {res.returncode}: {res.stderr.strip()[-2000:]}")
    doc = json.loads(res.stdout)
    path = DATA / f"{_dt.date.today().isoformat()}-{label}.json"
    record = {"benchmark": "ab_acceptance", "experiment": kind, "noise": noise, "argv": argv,
              "commit": lib.commit(), "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
              "loadavg_after": list(os.getloadavg()), "wall_s": round(elapsed, 1), "doc": doc}
    lib.save_raw(path, record, indent=None)
    print(f"{label}: {summary_line(record)}", file=sys.stderr)
    return path


def _metric(doc: dict, name: str) -> dict:
    return doc["comparisons"][0]["cells"][0]["metrics"].get(name) or {}


def summary_line(rec: dict) -> str:
    doc = rec["doc"]
    m = _metric(doc, "msgs_per_sec")
    comp = doc["ab"]["comparisons"][0]
    width = 100 * (m["ratio_hi"] - m["ratio_lo"])
    return (f"{m['ratio']:.4f} [{m['ratio_lo']:.4f}, {m['ratio_hi']:.4f}] width {width:.2f} pts, "
            f"{m['verdict']}, {comp['kept']} pairs kept of {comp['pairs']}, stop {doc['ab']['stop']['reason']} "
            f"after {doc['ab']['elapsed_s']:.0f} s")


def cpu_prediction(doc: dict) -> float:
    """The msgs/s ratio the CPU time per message predicts: base CPU/msg ÷ new CPU/msg (NaN if missing)."""
    c = _metric(doc, "cpu_us_per_msg_total")
    base, new = c.get("mean_base"), c.get("mean_new")
    return base / new if base and new else math.nan


def table(records: list[dict]) -> str:
    rows = ["| experiment | method | noise | NEW/BASE msgs/s [95%] | width | verdict | by CPU/msg | pairs kept | stop "
            "| commit |", "|---|---|---|---|---|---|---|---|---|---|"]
    for rec in records:
        doc = rec["doc"]
        m = _metric(doc, "msgs_per_sec")
        comp = doc["ab"]["comparisons"][0]
        names = " vs ".join(v["label"] for v in doc["ab"]["variants"])
        # documents before turns (2026-11-26) have no method: they were cells
        rows.append(f"| {rec['experiment']} ({names}) | {doc['ab'].get('method', 'cells')} | {rec['noise'] or '-'} | "
                    f"{m['ratio']:.4f} "
                    f"[{m['ratio_lo']:.4f}, {m['ratio_hi']:.4f}] | {100 * (m['ratio_hi'] - m['ratio_lo']):.2f} | "
                    f"{m['verdict']} | {cpu_prediction(doc):.4f} | {comp['kept']}/{comp['pairs']} | "
                    f"{doc['ab']['stop']['reason']}, {doc['ab']['elapsed_s']:.0f} s | {rec['commit']} |")
    return "\n".join(rows)


def _method(rec: dict) -> str:
    return rec["doc"]["ab"].get("method", "cells")  # documents before turns (2026-11-26) were cells


def verdicts(records: list[dict]) -> list[str]:
    """The acceptance lines, per method."""
    out = []
    for method in sorted({_method(r) for r in records}, reverse=True):  # turns first
        mine = [r for r in records if _method(r) == method]
        for rec in mine:
            m = _metric(rec["doc"], "msgs_per_sec")
            width = m["ratio_hi"] - m["ratio_lo"]
            if rec["experiment"] == "slowdown":
                ok = SLOW_RANGE[0] <= m["ratio"] <= SLOW_RANGE[1] and m["ratio_hi"] < 1 and width <= WIDTH_MAX
                out.append(f"{method}: slowdown, noise {rec['noise'] or 0}: {'met' if ok else 'NOT met'} (ratio "
                           f"{m['ratio']:.4f}, interval below 1: {m['ratio_hi'] < 1}, width {100 * width:.2f} pts)")
        aa = [r for r in mine if r["experiment"] == "aa"]
        if aa:
            ms = [_metric(r["doc"], "msgs_per_sec") for r in aa]
            sig = sum(1 for m in ms if m.get("significant"))
            held = sum(1 for m in ms if m["ratio_lo"] <= 1 <= m["ratio_hi"])
            wide = max(m["ratio_hi"] - m["ratio_lo"] for m in ms)
            out.append(f"{method}: A/A: {held} of {len(aa)} intervals hold 1; {sig} significant verdicts (at most 2 "
                       f"in 20 wanted); widest {100 * wide:.2f} pts")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", nargs="?", choices=["slowdown", "aa", "builtins"])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-time", type=float, default=150.0)
    ap.add_argument("--noise", type=float, default=0.0, help="bystanders' duty (0: none)")
    ap.add_argument("--method", default="", help="netprof ab --method (default: ab's own)")
    ap.add_argument("--from", dest="sources", nargs="+", type=Path, help="tabulate saved documents; nothing runs")
    ap.add_argument("--write", action="store_true", help="put the section into RESULTS.md (with --from)")
    args = ap.parse_args()
    if args.sources:
        records = [json.loads(p.read_text()) for p in args.sources]
        intro = (f"{results_md.command()}. Each line is one `netprof ab` at 100 connections, `--max-time 150` (the "
                 f"repeated A/A runs: 45), "
                 f"default `--precision 1%` (stops when the 95% interval is within ±1%), counting probes on; raw "
                 f"documents in `bench/data/ab/`. \"by CPU/msg\": the msgs/s ratio the two variants' CPU time per "
                 f"message (/proc) predicts for a backend that is the busy side.")
        results_md.publish(HEADING, intro, table(records) + "\n\n" + "\n".join(f"- {v}" for v in verdicts(records)),
                           args.write)
        return 0
    if not args.experiment:
        ap.error("name an experiment (slowdown, aa, builtins) or give --from")
    stamp = time.strftime("%H%M%S")
    for i in range(args.repeats):
        tags = ("-noise" if args.noise else "") + (f"-{args.method}" if args.method else "")
        label = f"{args.experiment}{tags}-{stamp}-{i + 1:02d}"
        run_one(args.experiment, args.max_time, args.noise, label, args.method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
