"""How precisely the loader's turns (PROTOCOL.md, "Turns") measure two servers' throughput ratio on this host
(issue 33's lever): two bench/spin_echo.py servers (`--spin-ns A` and `--spin-ns B`) pinned to CPU 0, one
loader on CPU 1 holding 100 connections to each and serving them in turns of `--turn` s (A B, B A, …),
in loader runs ("blocks") of `--block` s until `--seconds` of windows. Per round of two turns (one of
each server), d = log(B's messages) − log(A's); B/A = exp(mean d) with its 95% Student-t interval (the
rounds of a block are neighbours in time: the interval of the mean over all rounds assumes them
independent, which the A/A repeats check). With `--noise D`, bench/bystander.py (one neighbour per CPU, busy
D of the time) runs throughout, as in the ab acceptance. Also prints the interval after 45 s and 150 s of
windows, the widths issue 33 asks for.

    .venv/bin/python bench/ab_turns.py --a 0 --b 0                  # A/A
    .venv/bin/python bench/ab_turns.py --a 0 --b 100 --noise 0.25   # a 100 ns slowdown among bystanders
    .venv/bin/python bench/ab_turns.py --from bench/data/ab_turns/FILE.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.model import paired
from netprof.profiler.run import turns
from netprof.profiler.run.loader_client import Loader, RunRequest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
DATA = ROOT / "bench" / "data" / "ab_turns"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def interval(d: list[float]) -> dict:
    """B/A = exp(mean d) with the 95% Student-t interval (paired.paired_mean's), and its width in points."""
    est = paired.paired_mean(d)
    half = est.half(0.95)
    lo, hi = math.exp(est.value - half), math.exp(est.value + half)
    return {"rounds": est.n, "ratio": math.exp(est.value), "lo": lo, "hi": hi, "width_pts": (hi - lo) * 100,
            "sd_d": est.se * math.sqrt(est.n)}


def rounds_of(stats: dict) -> list[dict]:
    """turns.rounds_of (complete rounds before the last turn, an even number), as the rounds this file keeps."""
    return [{"a": r.messages[0], "b": r.messages[1], "a_lat_us": r.latency_mean_us[0], "b_lat_us": r.latency_mean_us[1],
             "order": "AB" if r.order[0] == 0 else "BA"} for r in turns.rounds_of(stats["turns"], 2)]


def measure(args) -> dict:
    blocks, bystander = [], None
    with ProcessGroup() as group:
        ports = {}
        for name, ns in (("a", args.a), ("b", args.b)):
            ports[name] = free_port()
            group.spawn(f"spin-{name}", [str(PYTHON), "-I", str(ROOT / "bench" / "spin_echo.py"), "--port",
                                         str(ports[name]), "--spin-ns", str(ns)], cpus=[0])
        time.sleep(0.5)  # both listening (spin_echo prints nothing); a refused connect is retried anyway
        if args.noise:
            bystander = subprocess.Popen([str(PYTHON), str(ROOT / "bench" / "bystander.py"), "--duty",
                                          str(args.noise), "--seconds", str(args.seconds * 3 + 120)],
                                         start_new_session=True)
        try:
            loader = Loader.start(group, cpus=[1])
            done = 0.0
            while done < args.seconds:
                req = RunRequest(target=f"127.0.0.1:{ports['a']}", alternate=[f"127.0.0.1:{ports['b']}"],
                                 turn=args.turn, connections=2 * args.connections, duration=args.block,
                                 warmup=args.warmup)
                s = loader.run(req)
                blocks.append({"t_start": s["t_start"], "rounds": rounds_of(s),
                               "cpu_frac": s["loader_cpu"]["cpu_frac"]})
                done += args.block
                d = [math.log(r["b"] / r["a"]) for b in blocks for r in b["rounds"] if r["a"] and r["b"]]
                iv = interval(d)
                print(f"{done:5.0f} s: B/A {iv['ratio']:.4f} [{iv['lo']:.4f}, {iv['hi']:.4f}] "
                      f"width {iv['width_pts']:.2f} pts over {iv['rounds']} rounds", file=sys.stderr, flush=True)
        finally:
            if bystander is not None:
                os.killpg(bystander.pid, signal.SIGTERM)
                bystander.wait()
    return {"benchmark": "ab_turns", "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "commit": _commit(), "a_spin_ns": args.a, "b_spin_ns": args.b, "noise": args.noise, "turn_s": args.turn,
            "block_s": args.block, "warmup_s": args.warmup, "connections_each": args.connections, "blocks": blocks}


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def summary(doc: dict) -> str:
    """The interval after 45 s, 150 s and all of the windows (rounds in time order)."""
    per_block = len(doc["blocks"][0]["rounds"]) if doc["blocks"] else 0  # 49 before turns.rounds_of, 48 since
    d_all = [math.log(r["b"] / r["a"]) for b in doc["blocks"] for r in b["rounds"] if r["a"] and r["b"]]
    lines = [f"ab_turns {doc['date']} commit {doc['commit']}: spin {doc['a_spin_ns']} ns vs {doc['b_spin_ns']} ns, "
             f"noise {doc['noise']}, turns of {doc['turn_s']} s, blocks of {doc['block_s']} s "
             f"({per_block} rounds each), {doc['connections_each']} connections each"]
    for secs in (45, 150, None):
        n = len(d_all) if secs is None else int(secs / doc["block_s"]) * per_block
        if n > len(d_all) or n < 3:
            continue
        iv = interval(d_all[:n])
        lines.append(f"  {'all' if secs is None else f'{secs} s'} ({iv['rounds']} rounds): B/A {iv['ratio']:.4f} "
                     f"[{iv['lo']:.4f}, {iv['hi']:.4f}], width {iv['width_pts']:.2f} pts, sd of d {iv['sd_d']:.3f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=int, default=0, help="server A's busy ns per message")
    ap.add_argument("--b", type=int, default=0, help="server B's busy ns per message")
    ap.add_argument("--noise", type=float, default=0.0, help="bystanders' duty (0: none)")
    ap.add_argument("--turn", type=float, default=0.1)
    ap.add_argument("--block", type=float, default=10.0, help="seconds of window per loader run")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--seconds", type=float, default=150.0, help="seconds of windows in all")
    ap.add_argument("-c", "--connections", type=int, default=100, help="connections to each server")
    ap.add_argument("--raw", type=Path, help="write the rounds here (JSON), for --from")
    ap.add_argument("--from", dest="source", type=Path, help="print the summary of a --raw file; nothing runs")
    args = ap.parse_args()
    if args.source:
        doc = json.loads(args.source.read_text())
    else:
        doc = measure(args)
        if args.raw:
            args.raw.parent.mkdir(parents=True, exist_ok=True)
            args.raw.write_text(json.dumps(doc) + "\n")
    print(summary(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
