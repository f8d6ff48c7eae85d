"""Headline numbers no probe can touch (issue 23), measured in cells paired on one backend process.

One backend process, one loader and one compiled counting set per backend; cells alternate (ABBA)
between netprof's default (the counting set attached in the probed sub-window, headline from the
rest) and --no-probes (one window, nothing attached), through the same `cell.run_cell` that
`netprof run --attach` uses.

Why paired, and why covariates: this host's throughput moves with how fast the hypervisor runs the
backend's CPU, at times in regimes of 0.3-3 s (0.1 s slices of one window at about 0.8, 1.1 or 1.2
of the mean: bench/host_regimes.py). Separate `netprof run`s (bench/probe_window.py) carry that, plus a new process each
time, into every ratio: ±10% a round, so a 1% effect would take hundreds of rounds. Here the ratio
comes from pairs of cells a few seconds apart on the same processes, and is also estimated by
regression on what the host did in each cell's headline spans (the loader's own event times), none
of which the probes or the load can move (see `covariates`): the backend CPU's speed, timed by
bench/speed_canary.py (a syscall-free loop), and with --noise how busy each CPU's neighbour was
(ANCOVA: log msgs/s = a + log(ratio)·[default] + b·covariates). The paired ratio is printed beside it.

    .venv/bin/python bench/probe_window_paired.py -r 30                 # selector, cpp_epoll, asyncio_sock
    .venv/bin/python bench/probe_window_paired.py -r 30 --noise 0.25    # with bench/bystander.py
    .venv/bin/python bench/probe_window_paired.py -r 20 --raw a.json    # keep every cell's data
    .venv/bin/python bench/probe_window_paired.py --from a.json b.json  # pool runs and analyse them again
    .venv/bin/python bench/probe_window_paired.py --arms default,no-probes,split selector
    ... --write                                                         # and its section in RESULTS.md

--arms adds "split": the loader splits the window as by default, but nothing attaches. default ÷ split
is what the probes do to the headline; split ÷ no-probes what the split alone does (the loader's
per-phase bookkeeping, and taking the headline from the window's edges).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from probe_window import add_load_arguments, neighbours  # bench/ is sys.path[0]: these run as files
from results_md import command, publish
from scipy import stats as sps

from netprof.probes.instrument import Instrument
from netprof.profiler.ab import RecordingLoader
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.model.paired import disturbed, headline_spans, loop_ns
from netprof.profiler.run import interpreters, servers
from netprof.profiler.run.cell import CellEnv, run_cell, start_server
from netprof.profiler.run.plan import Cell, RunConfig, loader_cpus

SECTION = "Probe window, paired and adjusted for the host (bench/probe_window_paired.py)"
DEFAULT, NONE, SPLIT = "default", "no-probes", "split"
ARMS = (DEFAULT, NONE, SPLIT)
BACKEND_CPU = 0  # netprof's --backend-cpu default; the loader runs on the other CPU
CPUS = (0, 1)  # a neighbour on each (--noise)


class NeverAttached(Instrument):
    """A sub-window instrument that never attaches: the loader still splits the window (probe_share,
    guards) and the cell takes its headline from the unprobed part, with nothing attached (the "split" arm)."""

    name = "split"
    sub_window = True
    attached = False  # type: ignore[assignment]  # a constant, where real instruments ask their probes

    @classmethod
    def open(cls, cfg) -> NeverAttached:
        return cls()

    def target(self, pid: int) -> None:
        pass

    def attach(self) -> None:
        pass

    def detach(self) -> None:
        pass

    def snapshot(self) -> None:
        return None

    def row(self, row: dict, first, last, counted) -> list[dict]:
        return []

    def close(self) -> None:
        pass


def busy_share(bursts: np.ndarray, spans: list[tuple[float, float]]) -> float:
    """The share of `spans` a neighbour was in a burst (bursts: rows of monotonic start, end)."""
    busy = sum(float(np.clip(np.minimum(bursts[:, 1], t1) - np.maximum(bursts[:, 0], t0), 0, None).sum())
               for t0, t1 in spans)
    return busy / sum(t1 - t0 for t0, t1 in spans)


@contextlib.contextmanager
def canary(path: Path, seconds: float):
    """bench/speed_canary.py on the backend's CPU for the block, its samples into `path`."""
    kid = subprocess.Popen([sys.executable, str(Path(__file__).with_name("speed_canary.py")), "--cpu",
                            str(BACKEND_CPU), "--out", str(path), "--seconds", str(seconds)])
    try:
        yield
    finally:
        kid.terminate()
        kid.wait(timeout=10)


def measure(backend: str, args: argparse.Namespace) -> list[dict]:
    """`args.rounds` rounds of the arms against one process of `backend`: one record per cell."""
    from netprof.probes.counting import Counting, CountingProbes

    base = RunConfig(backends=[backend], connections=[args.connections], duration=args.duration, rounds=1)
    interp = interpreters.prepare("")
    records = []
    probes = CountingProbes(track_children=True, attached=False)
    try:
        with ProcessGroup() as group:
            server = start_server(group, Cell(backend, args.connections, 1, 0), CellEnv(base, None, interp))
            spec = servers.attached(server.pid, f"{server.host}:{server.port}", name=backend)
            cfg = dataclasses.replace(base, own=[spec])
            arms = {DEFAULT: (Counting(probes),), NONE: (), SPLIT: (NeverAttached(),)}
            loader = RecordingLoader.start(group, cpus=loader_cpus(base))
            for rnd in range(1, args.rounds + 1):
                # Each arm first in turn, and the order reversed every other round (ABBA for two arms):
                # drift falls on every arm alike.
                k = (rnd - 1) // 2 % len(args.arms)
                order = args.arms[k:] + args.arms[:k]
                for variant in order if rnd % 2 else order[::-1]:
                    v_cfg = dataclasses.replace(cfg, probes=bool(arms[variant]))
                    cell = next(v_cfg.combinations(rnd))
                    out = run_cell(cell, CellEnv(v_cfg, loader, interp, instruments=arms[variant]))
                    if not out.ok:
                        raise SystemExit(f"{backend} {variant} round {rnd}: {out.row['error']}")
                    records.append({"round": rnd, "variant": variant, "row": out.row,
                                    "spans": headline_spans(loader.events)})
                    print(f"round {rnd} {backend:<12} {variant:<9} {out.row['msgs_per_sec']:>9,.0f} msgs/s",
                          file=sys.stderr, flush=True)
            loader.stop()
    finally:
        probes.close()
    return records


def covariates(spans: list[tuple[float, float]], samples: np.ndarray,
               bursts: dict[int, np.ndarray]) -> dict[str, float]:
    """What the host did in a cell's headline spans that neither the probes nor the load can move: the
    backend CPU's speed (log of the canary's loop time there; the backend keeps that CPU busy in every
    arm) and, on a noisy host, the share of the time each CPU's neighbour was busy (its bursts follow
    its own clock). Not the loader CPU's canary: when the backend is the slower side, a faster backend
    keeps the loader busier and that canary waits longer (asyncio_sock: r = +0.5 with msgs/s), so it
    would answer to the load, and could absorb an effect of the probes."""
    return ({"log loop0": math.log(loop_ns(samples, spans))}
            | {f"busy{c}": busy_share(bursts[c], spans) for c in bursts})


@dataclasses.dataclass
class LogRatio:
    """An estimate of log(ratio), its standard error and degrees of freedom."""

    log: float
    se: float
    dof: float

    def interval(self) -> str:
        """'0.9996 (0.9844 … 1.0150)': the ratio and its 95% interval."""
        half = sps.t.ppf(0.975, self.dof) * self.se
        return f"{math.exp(self.log):.4f} ({math.exp(self.log - half):.4f} … {math.exp(self.log + half):.4f})"


def mark_disturbed(records: list[dict]) -> None:
    """Sets each record's "disturbed" (paired.SLOW); `records`: one backend's cells of one run."""
    flags = disturbed([math.exp(r["covariates"]["log loop0"]) for r in records])
    for r, flag in zip(records, flags):
        r["disturbed"] = flag


def paired_log_ratio(records: list[dict], arm: str, base: str) -> LogRatio:
    """The mean of the rounds' log(arm ÷ base) over the rounds that have both."""
    by_round: dict[int, dict[str, float]] = {}
    for r in records:
        by_round.setdefault(r["round"], {})[r["variant"]] = math.log(r["row"]["msgs_per_sec"])
    pairs = [v[arm] - v[base] for v in by_round.values() if arm in v and base in v]
    return LogRatio(statistics.mean(pairs), statistics.stdev(pairs) / math.sqrt(len(pairs)), len(pairs) - 1)


def estimate(records: list[dict], arm: str = DEFAULT, base: str = NONE) -> dict:
    """The `arm` ÷ `base` headline ratio (default ÷ no-probes) over the rounds the host did not disturb:
    paired (the mean of the rounds' log ratios) and adjusted for the host (OLS of log msgs/s on the arm
    and each record's "covariates"); and paired over every round. Plain least squares in numpy: one
    small regression does not justify statsmodels as a dependency."""
    every = [r for r in records if r["variant"] in (arm, base)]
    spoilt = {r["round"] for r in every if r["disturbed"]}
    records = [r for r in every if r["round"] not in spoilt]
    y = np.log([r["row"]["msgs_per_sec"] for r in records])
    d = np.array([r["variant"] == arm for r in records], dtype=float)
    # The covariates, and an intercept of its own for each pooled run after the first (--from):
    # runs on other days start from other levels.
    runs = sorted({r.get("run", 0) for r in records})[1:]
    x = np.array([list(r["covariates"].values()) + [float(r.get("run", 0) == k) for k in runs] for r in records])
    paired = paired_log_ratio(records, arm, base)
    design = np.column_stack([np.ones_like(y), d, x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    dof = len(y) - design.shape[1]
    cov = (resid @ resid / dof) * np.linalg.inv(design.T @ design)
    # How much of the cell-to-cell spread the covariates (and runs) explain (the arm left out).
    xs = np.column_stack([np.ones_like(y), x])
    resid_x = y - xs @ np.linalg.lstsq(xs, y, rcond=None)[0]
    r2 = 1 - resid_x @ resid_x / ((y - y.mean()) @ (y - y.mean()))
    return {"pairs": int(paired.dof) + 1, "left_out": len(spoilt), "paired": paired,
            "adjusted": LogRatio(coef[1], math.sqrt(cov[1, 1]), dof), "r2": r2,
            "every": paired_log_ratio(every, arm, base)}


def pooled_estimate(parts: list[LogRatio]) -> LogRatio:
    """The backends' estimates of one effect, pooled by inverse variance (a fixed-effect mean: the probes
    detached in headline time would leak the same way whatever the backend)."""
    w = [1 / p.se**2 for p in parts]
    return LogRatio(sum(wi * p.log for wi, p in zip(w, parts)) / sum(w), math.sqrt(1 / sum(w)),
                    sum(p.dof for p in parts))


def measured(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Runs the rounds (with the canary, and the neighbours with --noise); each record gains its
    covariates; with --raw the records are written out for --from."""
    budget = 60 + len(args.backends) * args.rounds * len(args.arms) * (args.duration + 4)  # bounds the canary
    with tempfile.TemporaryDirectory(prefix="netprof-paired-") as tmp:
        log = f"{tmp}/bystander" if args.noise else None
        with neighbours(args.noise, log), canary(Path(tmp) / "canary.txt", budget):
            results = {b: measure(b, args) for b in args.backends}
        samples = np.loadtxt(Path(tmp) / "canary.txt", ndmin=2)  # flushed as the canary exited
        bursts = {c: np.loadtxt(f"{log}.cpu{c}", ndmin=2) for c in CPUS} if log else {}
    for recs in results.values():
        for r in recs:
            r["covariates"] = covariates(r["spans"], samples, bursts)
        mark_disturbed(recs)
    if args.raw:
        fd = os.open(args.raw, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump({"date": str(_dt.date.today()), "args": vars(args), "cells": results}, f, default=str)
    return results


def pooled(paths: list[str], args: argparse.Namespace) -> tuple[dict[str, list[dict]], list[str]]:
    """--from: the records of several --raw files, each file's rounds kept apart; `args` takes the
    settings they share (they must agree). Returns the records and the files' dates."""
    results: dict[str, list[dict]] = {}
    dates, offset = [], 0
    docs = [json.loads(Path(path).read_text()) for path in paths]
    for run, (path, doc) in enumerate(zip(paths, docs)):
        src = doc["args"]
        for key in ("connections", "duration", "noise", "arms"):
            if src[key] != docs[0]["args"][key]:
                raise SystemExit(f"--from: {path} ran with {key} {src[key]}, unlike {paths[0]}: pool like with like")
            setattr(args, key, src[key])
        for b, recs in doc["cells"].items():
            results.setdefault(b, []).extend({**r, "round": r["round"] + offset, "run": run} for r in recs)
        offset += src["rounds"]
        dates.append(doc["date"])
    args.rounds = offset
    return results, dates


def table(results: dict[str, list[dict]], arms: list[str]) -> list[str]:
    lines = ["| backend | arm ÷ no-probes | pairs (left out: host disturbed) | no-probes msgs/s "
             "| arm's headline msgs/s | ratio, paired (95% CI) | ratio adjusted for the host (95% CI) "
             "| the host explains (R²) | ratio, paired, every pair (95% CI) | probe cost measured in the cell (mean) "
             "| attached before / detached after the probed part (worst cell) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in (a for a in arms if a != NONE):
        found = []
        for b, recs in results.items():
            e = estimate(recs, arm)
            found.append(e)
            rate = {v: statistics.mean(r["row"]["msgs_per_sec"] for r in recs if r["variant"] == v)
                    for v in (arm, NONE)}
            rows = [r["row"] for r in recs if r["variant"] == arm]
            costs = [row["probe_cost"] for row in rows if row.get("probe_cost") is not None and arm == DEFAULT]
            timing = [row["probed"] for row in rows if "attach_lead_ms" in (row.get("probed") or {}) and arm == DEFAULT]
            lines.append(
                f"| {b} | {arm} | {e['pairs']} ({e['left_out']}) | {rate[NONE]:,.0f} | {rate[arm]:,.0f} "
                f"| {e['paired'].interval()} | {e['adjusted'].interval()} | {e['r2']:.2f} | {e['every'].interval()} "
                + (f"| {100 * statistics.mean(costs):+.1f}% " if costs else "| - ")
                + (f"| {min(t['attach_lead_ms'] for t in timing):.1f} ms / "
                   f"{max(t['detach_lag_ms'] for t in timing):.1f} ms |" if timing else "| - |"))
        if len(found) > 1:
            lines.append(f"| all {len(found)}, pooled | {arm} | {sum(e['pairs'] for e in found)} "
                         f"({sum(e['left_out'] for e in found)}) | | "
                         f"| {pooled_estimate([e['paired'] for e in found]).interval()} "
                         f"| {pooled_estimate([e['adjusted'] for e in found]).interval()} | "
                         f"| {pooled_estimate([e['every'] for e in found]).interval()} | | |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(ap, rounds=20)  # -r: rounds of the arms per backend
    ap.add_argument("--arms", default=f"{DEFAULT},{NONE}",
                    help=f"comma list of {', '.join(ARMS)}: split = the loader splits the window, nothing attaches")
    ap.add_argument("--raw", metavar="FILE", help="also write every cell's row, spans and covariates (a new file)")
    ap.add_argument("--from", dest="sources", nargs="+", metavar="RAW",
                    help="measure nothing: pool these --raw files (like settings) and analyse them")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.sources:
        results, dates = pooled(args.sources, args)
    else:
        args.arms = args.arms.split(",")
        if NONE not in args.arms or not set(args.arms) <= set(ARMS) or len(args.arms) < 2:
            ap.error(f"--arms: {NONE} and at least one of {DEFAULT}, {SPLIT}")
        results, dates = measured(args), [str(_dt.date.today())]
    intro = (f"{command()} — measured {', '.join(sorted(set(dates)))}, {args.connections} connections, "
             f"{args.duration:g} s windows, {args.rounds} rounds of the arms {', '.join(args.arms)} per backend "
             "(each first in turn, order reversed every other round), one backend process and one loader per "
             "backend and run. default = the counting set attached in the probed sub-window (`--probe-share 0.3`, "
             "0.1 s guards), headline from the rest; no-probes = one window, nothing attached (what --no-probes "
             "does); split = the loader splits the window as in default but nothing attaches. Ratio = the arm's "
             "headline msgs/s ÷ no-probes msgs/s; paired = geometric mean of the rounds' ratios; adjusted = the "
             "same ratio by regression on what the host did in each cell's headline spans: both CPUs' speed "
             "(bench/speed_canary.py)" + (" and the share of the time each CPU's neighbour was busy" if args.noise
                                           else "") + ".")
    if args.noise:
        intro += f" Noisy host: bench/bystander.py --duty {args.noise:g} ran throughout."
    section = SECTION + (", noisy host" if args.noise else "")
    publish(section, intro, "\n".join(table(results, args.arms)), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
