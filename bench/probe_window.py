"""Headline numbers no probe can touch (issue 23): a default run's headline msgs/s (the unprobed part
of each cell's window) against a --no-probes run's, interleaved, plus the probes' cost each cell
measured on itself (probed sub-window vs the rest).

Each round runs every backend twice, once per variant, in alternating order; a ratio is taken within
a round and the rounds' ratios are averaged (this machine varies ±10% between minutes). Separate runs
carry that spread into every ratio; bench/probe_window_paired.py pairs cells on one backend process
and takes the host's speed out, for intervals of about ±1% instead of ±5-10%.

    .venv/bin/python bench/probe_window.py                       # selector, cpp_epoll, asyncio_sock; 5 rounds
    .venv/bin/python bench/probe_window.py --write               # ... and replace its section in RESULTS.md
    .venv/bin/python bench/probe_window.py --noise 0.25 --write  # the same on a noisy host (own section)

--noise D runs bench/bystander.py for the whole benchmark: one neighbour per CPU, busy a share D of
the time with bursts of system calls (the kind of host where the counting set costs most, and where
throughput drifts between minutes).

--edges measures the design itself, with no probe anywhere: the loader splits each window into the same
phases (one-shot `netprof-loader --probe-share 0.3 --probe-guard 0.1`, backend pinned to CPU 0, loader
on CPU 1) and nothing attaches. The unprobed part ÷ the whole window says whether taking the headline
from the window's edges biases it; the probed part ÷ the unprobed part is what a cell reports as the
probes' cost when there are none: the noise floor of that per-cell figure.

    .venv/bin/python bench/probe_window.py --edges -r 12 --write [--noise 0.25]

--aa adds the control for the ratio itself: a second --no-probes run in every round (the three runs in
rotating order), whose ratio to the first is what this host does to two identical runs; the table
gains that A/A column, to judge the default's ratios against.

    .venv/bin/python bench/probe_window.py --aa -r 24 --noise 0.25 --write [backends]

--probe-args gives the default variant more probe options; `--probe-args=--syscall-time` (every syscall
timed: the probes cost about twice as much in the probed part) checks that a costlier probe set still
leaves the headline alone: were any of its cost in headline time, the ratio would fall with it.

    .venv/bin/python bench/probe_window.py --probe-args=--syscall-time -r 12 --write
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.profiler.model import stats
from netprof.profiler.model.stats import summarize

SECTION = "Probe window: headline throughput with and without probes (bench/probe_window.py)"
NOISY = "Probe window on a noisy host (bench/probe_window.py --noise)"
EDGES = "Probe window with no probe attached: the phases' own spread (bench/probe_window.py --edges)"
EDGES_NOISY = "Probe window with no probe attached, noisy host (bench/probe_window.py --edges --noise)"
AA_NOISY = "Probe window with an A/A control, noisy host (bench/probe_window.py --aa --noise)"
SHARE, GUARD = 0.3, 0.1  # netprof's defaults (plan.RunConfig.probe_share, cell.PROBE_GUARD_S)
VARIANTS = {"no-probes": ["--no-probes"], "default": []}
AGAIN = "no-probes again"  # --aa: the control run


@contextlib.contextmanager
def neighbours(duty: float, log: str | None = None):
    """bench/bystander.py for the block's duration (nothing when duty is 0); `log`: its --log PREFIX."""
    if not duty:
        yield
        return
    p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("bystander.py")), "--duty", str(duty),
                          "--seconds", "3600", *(["--log", log] if log else [])])
    try:
        yield
    finally:
        p.terminate()
        p.wait(timeout=10)


def add_load_arguments(ap: argparse.ArgumentParser, rounds: int) -> None:
    """The options both probe-window benchmarks take: which backends, the load, how many rounds, noise."""
    ap.add_argument("backends", nargs="*", default=["selector", "cpp_epoll", "asyncio_sock"])
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("-d", "--duration", type=float, default=4.0)
    ap.add_argument("-r", "--rounds", type=int, default=rounds)
    ap.add_argument("--noise", type=float, default=0.0, metavar="D",
                    help="run a noisy neighbour per CPU, busy a share D of the time (bench/bystander.py)")


def one(backend: str, args: argparse.Namespace, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="netprof-bench-") as tmp:
        argv = [str(Path(sys.executable).with_name("netprof")), "run", backend, "-c", str(args.connections),
                "-d", str(args.duration), "-r", "1", "--wait", "--json", "--out", f"{tmp}/run", *extra]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"{backend} {extra}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        (row,) = json.loads(p.stdout)["runs"]
        return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(ap, rounds=5)
    ap.add_argument("--edges", action="store_true",
                    help="no probes at all: the loader's phases against each other (see the docstring)")
    ap.add_argument("--aa", action="store_true",
                    help="a second --no-probes run in every round: the ratio's own spread (the A/A column)")
    ap.add_argument("--probe-args", default="", metavar="ARGS",
                    help="more netprof options for the default variant, e.g. --probe-args=--syscall-time")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with neighbours(args.noise):
        return edges(args) if args.edges else measure(args)


def phases_once(backend: str, args: argparse.Namespace) -> dict:
    """One one-shot loader run with the default phase split and nothing attached: its stats."""
    from netprof.profiler.core.procs import ProcessGroup

    loader = str(Path(sys.executable).with_name("netprof-loader"))
    with ProcessGroup() as group:
        be = group.spawn(f"backend-{backend}", [sys.executable, "-m", "netprof.backends", backend,
                                                "--host", "127.0.0.1", "--port", "0"], cpus="0")
        port = be.wait_line("ready", 30).split()[2]
        p = subprocess.run([loader, "--target", f"127.0.0.1:{port}", "-c", str(args.connections),
                            "-d", str(args.duration), "--probe-share", str(SHARE), "--probe-guard", str(GUARD),
                            "--cpus", "1", "--json"], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise SystemExit(f"{backend}: loader exit {p.returncode}: {p.stderr.strip()[-300:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])


def edges(args: argparse.Namespace) -> int:
    whole: dict[str, list[float]] = {b: [] for b in args.backends}
    edge: dict[str, list[float]] = {b: [] for b in args.backends}  # unprobed part ÷ whole window
    floor: dict[str, list[float]] = {b: [] for b in args.backends}  # 1 − probed ÷ unprobed: a "probe cost"
    for rnd in range(args.rounds):
        for b in args.backends:
            s = phases_once(b, args)
            u, p = s["phases"]["unprobed"]["msgs_per_sec"], s["phases"]["probed"]["msgs_per_sec"]
            whole[b].append(s["msgs_per_sec"])
            edge[b].append(u / s["msgs_per_sec"])
            floor[b].append(stats.probe_cost(u, p))
            print(f"round {rnd + 1} {b}: unprobed/whole {edge[b][-1]:.4f}, "
                  f"'probe cost' with no probes {100 * floor[b][-1]:+.1f}%", file=sys.stderr)
    lines = ["| backend | whole-window msgs/s | unprobed part ÷ whole window (95% CI) | sd of one cell "
             "| \"probe cost\" with no probe attached (95% CI) | sd of one cell |", "|---|---|---|---|---|---|"]
    for b in args.backends:
        e, f = summarize(edge[b]), summarize(floor[b])
        lines.append(f"| {b} | {statistics.mean(whole[b]):,.0f} | {e['mean']:.4f} ±{e['ci']:.4f} | {e['std']:.4f} "
                     f"| {100 * f['mean']:+.1f}% ±{100 * f['ci']:.1f}% | {100 * f['std']:.1f}% |")
    intro = (f"{command()} — {_dt.date.today()}, {args.connections} connections, {args.duration:g} s windows, "
             f"{args.rounds} rounds; the one-shot loader splits each window as netprof does by default "
             f"(`--probe-share {SHARE:g} --probe-guard {GUARD:g}`) and no probe is attached. Probe cost as a "
             "report computes it: 1 − probed ÷ unprobed msgs/s of the same window.")
    if args.noise:
        intro += f" Noisy host: bench/bystander.py --duty {args.noise:g} ran throughout."
    publish(EDGES_NOISY if args.noise else EDGES, intro, "\n".join(lines), args.write)
    return 0


def measure(args: argparse.Namespace) -> int:
    ratios: dict[str, list[float]] = {b: [] for b in args.backends}
    costs: dict[str, list[float]] = {b: [] for b in args.backends}
    # When the probes really attached before / detached after the probed sub-window (ms), per round.
    leads: dict[str, list[float]] = {b: [] for b in args.backends}
    lags: dict[str, list[float]] = {b: [] for b in args.backends}
    # How far apart the default run's unprobed parts were (the cell's own noise floor), per round.
    drifts: dict[str, list[float]] = {b: [] for b in args.backends}
    extra = shlex.split(args.probe_args)  # a list for argv: no shell sees it
    variants = {**VARIANTS, "default": [*VARIANTS["default"], *extra], **({AGAIN: ["--no-probes"]} if args.aa else {})}
    rates: dict[str, dict[str, list[float]]] = {b: {v: [] for v in variants} for b in args.backends}
    aa: dict[str, list[float]] = {b: [] for b in args.backends}  # --aa: again ÷ no-probes, per round
    for rnd in range(args.rounds):
        for b in args.backends:
            names = list(variants)
            order = names[rnd % len(names):] + names[:rnd % len(names)]  # each variant first in turn
            got = {v: one(b, args, variants[v]) for v in order}
            for v, row in got.items():
                rates[b][v].append(row["msgs_per_sec"])
            ratios[b].append(got["default"]["msgs_per_sec"] / got["no-probes"]["msgs_per_sec"])
            if args.aa:
                aa[b].append(got[AGAIN]["msgs_per_sec"] / got["no-probes"]["msgs_per_sec"])
            if got["default"].get("probe_cost") is not None:
                costs[b].append(got["default"]["probe_cost"])
            timing = got["default"].get("probed") or {}
            if got["default"].get("unprobed_drift") is not None:
                drifts[b].append(got["default"]["unprobed_drift"])
            if "attach_lead_ms" in timing:
                leads[b].append(timing["attach_lead_ms"])
                lags[b].append(timing["detach_lag_ms"])
            print(f"round {rnd + 1} {b}: ratio {ratios[b][-1]:.3f}, cell's probe cost "
                  f"{100 * costs[b][-1] if costs[b] else float('nan'):+.1f}%"
                  + (f", A/A ratio {aa[b][-1]:.3f}" if args.aa else ""), file=sys.stderr)
    # The median beside the mean: one round that another process on the machine disturbed moves the
    # mean by several percent either way; the median says what a typical round shows.
    lines = ["| backend | no-probes msgs/s | default headline msgs/s | headline ratio (95% CI) | median ratio "
             "| probe cost measured in the cell (mean, range) | the cell's unprobed parts apart (mean) "
             "| attached before / detached after the probed part (worst round) |"
             + (" A/A ratio (95% CI), median |" if args.aa else ""), "|---|---|---|---|---|---|---|---|"
             + ("---|" if args.aa else "")]
    for b in args.backends:
        s = summarize(ratios[b])
        lines.append(f"| {b} | {statistics.mean(rates[b]['no-probes']):,.0f} "
                     f"| {statistics.mean(rates[b]['default']):,.0f} "
                     f"| {s['mean']:.3f} ±{s['ci']:.3f} | {statistics.median(ratios[b]):.3f} "
                     f"| {100 * statistics.mean(costs[b]):+.1f}% "
                     f"({100 * min(costs[b]):+.1f} … {100 * max(costs[b]):+.1f}%) "
                     + (f"| {100 * statistics.mean(drifts[b]):.1f}% " if drifts[b] else "| - ")
                     + (f"| {min(leads[b]):.1f} ms / {max(lags[b]):.1f} ms |" if leads[b] else "| - |")
                     + (f" {summarize(aa[b])['mean']:.3f} ±{summarize(aa[b])['ci']:.3f}, "
                        f"{statistics.median(aa[b]):.3f} |" if args.aa else ""))
    intro = (f"{command()} — {_dt.date.today()}, {args.connections} connections, {args.duration:g} s per run, "
             f"{args.rounds} interleaved rounds; default = `--probe-share 0.3` (probes attached in the middle 30% "
             "of each window, 0.1 s guards on either side of it that count in neither part; headline figures "
             "from the rest). Ratio = default headline msgs/s ÷ --no-probes "
             "msgs/s of the same round. Probe cost = 1 − probed/unprobed msgs/s inside the default run's own cell "
             "(what the report quotes); beside it, how far apart the same cell's two unprobed parts (before and "
             "after the probed part) were: its noise floor with no probe attached (the row's unprobed_drift).")
    if args.noise:
        intro += (f" Noisy host: bench/bystander.py --duty {args.noise:g} ran throughout (one neighbour per CPU "
                  "making bursts of system calls).")
    if extra:
        intro += (f" The default variant also ran with `{args.probe_args}`: a costlier probe set in the probed part, "
                  "the same headline time with none.")
    if args.aa:
        intro += (" A/A: a second --no-probes run in the same round (the three runs in rotating order), ÷ the "
                  "first: how far two identical runs differ here.")
        section = AA_NOISY if args.noise else SECTION + ", with an A/A control"
    else:
        section = NOISY if args.noise else SECTION
    if extra:
        section += f", default with {args.probe_args}"
    publish(section, intro, "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
