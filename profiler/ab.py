"""`netprof ab A B [C…]`: did my change make it faster? Paired cells on warm servers, to a stated precision.

Each variant's server starts once and stays warm (`--fresh`: restarted for every pair); one loader plays
the load against each in turn, in pairs whose order alternates (A B, B A, …: ABBA blocks), each cell a
real `cell.run_cell` with the run's instruments; a speed canary on the backend's CPU times the host
through every cell. After each pair the ratio's interval is re-estimated (`paired`), and the run stops
when it is within ±`--precision` or at `--max-time`. The answer is `compare`'s document (base = variant
A, one comparison per other variant, one cell), so its pages, why-sentence and --fail-if apply as they
are, plus an "ab" object saying how it was measured (docs/ab.md).

This module sits above the report layer: it drives cells (the run layer) and hands what they measured to
`compare` and `compare_report`. The statistics are `paired`'s, pure and below the run layer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from netprof.backends import registry as backend_registry
from netprof.probes import registry as instrument_registry
from netprof.profiler.analysis import compare
from netprof.profiler.core import atomic, runlock, units
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.procs import LineTimeout, ManagedProcess, ProcessError, ProcessGroup, parse_cpus
from netprof.profiler.kit.rule_registry import Thresholds
from netprof.profiler.model import paired, results, stats
from netprof.profiler.model.results import ResultsStore
from netprof.profiler.report import compare_report
from netprof.profiler.run import evidence, interpreters, servers
from netprof.profiler.run import meta as meta_mod
from netprof.profiler.run import turns as turns_mod
from netprof.profiler.run.cell import CellEnv, run_cell
from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.loader_client import Loader
from netprof.profiler.run.plan import (
    RunConfig,
    check_zmq_client,
    closed_loop_only,
    loader_cpus,
    parse_io_uring,
    validate,
)
from netprof.profiler.run.runner import STOP, close_instruments, cost_and_close, open_instruments
from netprof.profiler.run.warm import WarmServer

AB_JSON = "ab.json"
TURNS_PARQUET = "turns.parquet"  # turns: every round's messages per variant
PRIME = "\u2032"  # the second of two identical variants is "selector′"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# The figures judged per pair (stats' names), then each syscall and io_uring operation per message when probes
# ran. Positive ones are judged on log ratios; counts that can be 0 (context switches, syscalls) on differences.
JUDGED = ("msgs_per_sec", "lat_us.p50", "lat_us.p99", "cpu_us_per_msg.user", "cpu_us_per_msg.sys", stats.CPU_TOTAL,
          "ctx_switches_per_msg", stats.SYSCALLS_TOTAL, stats.KERNEL_OPS_TOTAL)
PROBED_TOTALS = (stats.SYSCALLS_TOTAL, stats.KERNEL_OPS_TOTAL)  # a probed cell pair's figures: these and each op
LOG_JUDGED = ("msgs_per_sec", "lat_us.p50", "lat_us.p99", "cpu_us_per_msg.user", "cpu_us_per_msg.sys",
              stats.CPU_TOTAL)
METRICS = LOG_JUDGED  # what --metric may name: the stopping rule reads a log-ratio interval
LIMITS = {"window": (0.2, 60.0), "warmup": (0.0, 60.0), "max_time": (1.0, 24 * 3600.0), "precision": (1e-4, 0.5)}
CANARY_SLACK_S = 120.0  # the canary outlives the planned run by this much at most (it is bounded by itself too)
MAX_STALLS = 3  # cells in a row in which a live server answered nothing end the run: it hangs
CANARY_START_S = 30.0  # how long the canary may take to give its first sample (an interpreter starting)
CANARY_WAIT_S = 1.0  # how long to wait after a cell for the canary's samples of its last span
METHODS = ("turns", "cells")
METHOD_TURNS = (f"Turns on warm servers (netprof ab): one loader held every variant's connections and served them "
                f"one variant at a time, in turns of {turns_mod.TURN_S:g} s in rounds A B, B A, … (blocks of --window "
                f"seconds, one loader run each); every variant's server was restarted every {{gen_blocks}} blocks "
                f"(a generation), after a warm-up of at least {{gen_warmup:g}} s. Per round d = log(NEW's {{many}}) − "
                f"log(BASE's) over two turns a tenth of a second apart (the host's speed, which moves every 0.3-3 s, "
                f"is nearly the same for both); per generation the mean d; NEW/BASE = exp of the mean over "
                f"generations with its {paired.CONFIDENCE:.0%} Student-t interval (two starts of one server differ: "
                f"the generations are the replicates). Latency and CPU {{per}}: per block each variant's share "
                f"(its target's latency; its server's /proc CPU over the block divided by its {{many}}), averaged "
                f"per generation and paired the same way. Syscalls {{per}} (with probes): short probed cells "
                f"after the blocks, in pairs BASE, NEW then NEW, BASE. The verdict is the t-test of d: significant "
                f"when p < {paired.ALPHA}. The run stopped when the --metric interval was within ±--precision (a rule "
                f"on the spread only) or at --max-time. docs/ab.md has the formulas.")
METHOD = (f"Paired cells on warm servers (netprof ab): each variant's server started once and stayed warm "
          f"(--fresh: restarted every pair), and cells alternated in pairs BASE, NEW then NEW, BASE on one loader. "
          f"Per pair d = log(NEW) − log(BASE) (NEW − BASE for counts {{per}} that may be 0); NEW/BASE = exp of "
          f"the mean d with its {paired.CONFIDENCE:.0%} Student-t interval, adjusted for the host's speed (OLS of d "
          f"on the pair's Δlog of the speed canary's loop time on the backend CPU, with an intercept: the ratio at "
          f"equal speed) once there are {paired.MIN_ADJUSTED} pairs. Pairs with a cell whose canary ran "
          f"{paired.SLOW:.0%} or more slower than the median cell are dropped (the host was disturbed). The verdict "
          f"is the t-test of d: significant when p < {paired.ALPHA}. The run stopped when the --metric interval was "
          f"within ±--precision (a rule on the spread only) or at --max-time. docs/ab.md has the formulas.")


# ---------------------------------------------------------------------------------------------
# The plan: variants and settings, checked before anything starts

@dataclass(frozen=True)
class Variant:
    letter: str  # A, B, …: how --env names it
    label: str  # the variant's name in every table, and its rows' tag
    cfg: RunConfig  # validated; its one server is cfg.backends[0]; extra_dims tag = label

    @property
    def server(self) -> str:
        return self.cfg.backends[0]

    @property
    def kind(self) -> str:
        return self.cfg.server(self.server).kind


@dataclass
class AbPlan:
    variants: list[Variant]
    window: float
    warmup: float
    precision: float  # half-width of the ratio's interval, as a share (0.01 = ±1%)
    metric: str
    max_time: float
    fresh: bool = False
    aa: bool = False
    fail_if: str = ""
    wait: bool = False
    min_pairs: int = paired.MIN_PAIRS
    flamegraph: bool = False  # a sampling round per variant after the pairs, and the differential flamegraph
    method: str = "cells"  # "turns": blocks of turns on one loader (turns.py); "cells": paired cells

    @property
    def base(self) -> RunConfig:
        return self.variants[0].cfg

    @property
    def rate(self) -> float:
        """The open-loop rate both variants are sent (--rate), requests/s; 0 = closed loop."""
        return float((self.base.extra_dims.get("rate") or [0])[0])


def parse_precision(text: str) -> float:
    """'1%' or '0.01' → 0.01."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise InputError(f"--precision '{text}' is not a share: give e.g. 1% (or 0.01) for an interval of "
                         "±1%") from None
    _check("precision", value, "--precision")
    return value


def _check(name: str, value: float, option: str) -> None:
    lo, hi = LIMITS[name]
    if not lo <= value <= hi:
        raise InputError(f"{option} {value:g} is out of range: use {lo:g} … {hi:g}")


def _per_variant_pythons(text: str, kinds: list[str]) -> list[str]:
    """--python: one value = every built-in variant; a comma list = one per variant, in order ('' = netprof's
    own). A --cmd variant runs its own interpreter: its entry must be empty."""
    values = [v.strip() for v in text.split(",")] if text.strip() else [""]
    if len(values) == 1:
        values = [values[0] if k == "builtin" else "" for k in kinds]
    if len(values) != len(kinds):
        raise InputError(f"--python gives {len(values)} interpreters for {len(kinds)} variants: give one (every "
                         "built-in variant) or one per variant in order, e.g. --python 3.12,3.13")
    for letter, value, kind in zip(LETTERS, values, kinds):
        if value and kind != "builtin":
            raise InputError(f"--python for variant {letter}: a --cmd runs its own interpreter; put it in the command "
                             f"(or leave its place empty: --python ,{value})")
    return values


def _per_variant_io_uring(values: list[str], kinds: list[str]) -> list[str]:
    """--io-uring: one value = every variant; a comma list = one per variant, in order."""
    if len(values) == 1:
        return values * len(kinds)
    if len(values) != len(kinds):
        raise InputError(f"--io-uring gives {len(values)} values for {len(kinds)} variants: give one (every variant) "
                         "or one per variant in order, e.g. --io-uring on,off")
    return values


_TARGETED = re.compile(r"(?P<letter>[A-Z]):(?P<rest>.*)", re.S)


def _per_variant_env(items: list[str], kinds: list[str]) -> list[dict[str, str]]:
    """--env NAME=VALUE (every --cmd variant) or --env B:NAME=VALUE (variant B only). A name cannot hold ':',
    so a letter and ':' before the first '=' can only be a target."""
    env: list[dict[str, str]] = [{} for _ in kinds]
    for item in items:
        m = _TARGETED.fullmatch(item)
        if m and "=" not in item.split(":", 1)[0]:
            i = LETTERS.index(m["letter"])
            if i >= len(kinds):
                raise InputError(f"--env {item}: there is no variant {m['letter']} (variants: "
                                 f"{', '.join(LETTERS[:len(kinds)])})")
            if kinds[i] != "cmd":
                raise InputError(f"--env {item}: variant {m['letter']} is a built-in backend; --env sets a --cmd "
                                 "server's environment")
            env[i].update(servers.parse_env([m["rest"]]))
        else:
            pair = servers.parse_env([item])
            if "cmd" not in kinds:
                raise InputError("--env sets the environment of a --cmd server: give --cmd, or drop --env")
            for i, k in enumerate(kinds):
                if k == "cmd":
                    env[i].update(pair)
    return env


def _labels(names: list[str]) -> list[str]:
    """Names made distinct: a repeat gets a prime per earlier one ('selector', 'selector′')."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        out.append(n + PRIME * seen.get(n, 0))
        seen[n] = seen.get(n, 0) + 1
    return out


WINDOW_S = 0.3  # closed loop: short cells fall in the host's speed regimes (0.3-3 s) together more often
RATE_REQUESTS = 2000  # open loop: requests per window at least, so that a p99 stands on 20 of them
BLOCK_S = 2.0  # turns: a loader run of 20 turns (9 rounds of two variants), its connect and warm-up ~10% of it
# Turns: the servers are restarted every GEN_BLOCKS blocks, and the interval is over these generations: two
# starts of one server differ (A/A here: one pair of processes 0.8% apart for a whole run, another -0.4%), which
# rounds of one pair of processes cannot show. The first block of a generation warms up GEN_WARMUP_S at least.
GEN_BLOCKS = 3
GEN_WARMUP_S = 1.0
PROBE_PAIRS = 3  # turns with probes: probed cell pairs after the blocks (syscall counts per message barely vary)


def default_window(extra_dims: dict, method: str = "cells") -> float:
    """--window when not given: turns, BLOCK_S; cells, 0.3 s, or under --rate long enough for RATE_REQUESTS
    requests."""
    if method == "turns":
        return BLOCK_S
    rate = (extra_dims.get("rate") or [0])[0]
    return max(WINDOW_S, RATE_REQUESTS / rate) if rate else WINDOW_S


def choose_method(asked: str, rate: bool, fresh: bool, zmq: bool, mixed: bool = False) -> str:
    """--method, or by default turns where the loader can serve them (closed loop, warm servers, variants it
    drives alike: `zmq`, ZeroMQ variants on libzmq's closed-loop-only sockets; `mixed`, variants the loader
    drives by different transports, which one loader run with turns cannot)."""
    if asked and asked not in METHODS:
        raise InputError(f"--method '{asked}' is not one of {', '.join(METHODS)}")
    why_not = ("--rate (turns are closed-loop load)" if rate else "--fresh (turns need every server warm at once)"
               if fresh else "ZeroMQ variants under --zmq-client libzmq (add --zmq-client native for turns)" if zmq
               else "TCP and ZeroMQ variants together (one loader run drives one transport)" if mixed else "")
    if asked == "turns" and why_not:
        raise InputError(f"--method turns does not go with {why_not}: drop --method turns (cells are used)")
    return asked or ("cells" if why_not else "turns")


def plan(template: RunConfig, names: list[str], cmds: list[str], *, cmd_names: list[str] | None = None,
         python: str = "", env_items: list[str] | None = None, io_uring: str = "on", aa: bool = False,
         fresh: bool = False,
         window: float | None = None, precision: float = 0.01, metric: str = "", max_time: float = 300.0,
         fail_if: str = "", wait: bool = False, ready_regex: str = "", ready_timeout: float = servers.READY_TIMEOUT,
         as_root: bool = False, flamegraph: bool = False, method: str = "") -> AbPlan:
    """The variants (built-in `names` first, then the --cmd templates, in order) over the settings both sides
    share (`template`: connections, pipeline, protocol, msize, …), each validated as a run of its own."""
    cmd_names = list(cmd_names or [])
    kinds = ["builtin"] * len(names) + ["cmd"] * len(cmds)
    rings = parse_io_uring(io_uring)["io_uring"]
    if len(kinds) == 1 and len(rings) == 2 and not aa:  # one server, with io_uring and without: two variants of it
        kinds, names, cmds, cmd_names = kinds * 2, names * 2, cmds * 2, cmd_names * 2
    if aa:
        if len(kinds) != 1:
            raise InputError(f"--aa runs one variant against itself; {len(kinds)} were given: give one, "
                             "e.g. netprof ab selector --aa")
        kinds, names, cmds = kinds * 2, names * 2, cmds * 2
        cmd_names = cmd_names * 2
    elif len(kinds) < 2:
        raise InputError("netprof ab compares at least two variants: e.g. netprof ab selector asyncio_sock, or "
                         "--cmd 'python old.py --port {port}' --cmd 'python new.py --port {port}'; "
                         "one against itself: --aa")
    if len(kinds) > len(LETTERS):
        raise InputError(f"netprof ab takes at most {len(LETTERS)} variants")
    if len(cmd_names) > len(cmds):
        raise InputError("more --name than --cmd: give one --name per --cmd, in the same order")
    if len(template.connections) != 1 or len(template.pipeline) != 1 or len(template.framings) != 1:
        raise InputError("netprof ab compares one cell: give one value of -c, --pipeline and --framing")
    rate = list(template.extra_dims.get("rate") or [])
    if len(rate) > 1:
        raise InputError("netprof ab compares one cell: give one --rate (e.g. --rate 5000)")
    # Under --rate both variants are sent the same schedule: throughput is the rate whatever the change,
    # so the figure that can move is latency (issue 33).
    metric = metric or ("lat_us.p99" if rate else "msgs_per_sec")
    if metric not in METRICS:
        raise InputError(f"--metric '{metric}' is not one netprof ab stops on: use one of {', '.join(METRICS)}")
    known = set(backend_registry.names(include_test_only=True))  # an unknown name is refused below (validate)
    check_zmq_client(template, None)  # the method depends on it; whether it drives a variant: below
    builtin = dataclasses.replace(template, backends=[n for n in names if n in known])
    transports = {builtin.loader_transport(n) for n in builtin.backends} | ({"tcp"} if cmds else set())
    method = choose_method(method, bool(rate), fresh, zmq=bool(closed_loop_only(builtin)), mixed=len(transports) > 1)
    window = default_window(template.extra_dims, method) if window is None else window
    _check("window", window, "--window")
    if method == "turns" and turns_mod.whole_turns(window) <= len(kinds):
        raise InputError(f"--window {window:g}: with turns it is a whole number of {turns_mod.TURN_S:g} s turns, more "
                         f"than one round of the {len(kinds)} variants (e.g. --window {BLOCK_S:g})")
    _check("warmup", template.warmup, "--warmup")
    _check("max_time", max_time, "--max-time")
    _check("precision", precision, "--precision")
    compare.parse_fail_if(fail_if)  # a malformed rule fails now, not after the measurement
    pythons = _per_variant_pythons(python, kinds)
    rings = _per_variant_io_uring(rings, kinds)
    envs = _per_variant_env(list(env_items or []), kinds)
    specs: list[servers.ServerSpec | None] = []
    for i, kind in enumerate(kinds):
        if kind == "builtin":
            specs.append(None)
            continue
        j = i - len(names)
        if servers.PORT_PLACEHOLDER not in cmds[j]:
            raise InputError(f"--cmd '{cmds[j]}' has no {servers.PORT_PLACEHOLDER}: put it where the port goes "
                             "(netprof ab starts each variant's server on a free port of its own)")
        specs.append(servers.from_cmd(cmds[j], cmd_names[j] if j < len(cmd_names) else "", ready_regex, "",
                                      as_root, ready_timeout, envs[i]))
    raw = [names[i] if s is None else s.name for i, s in enumerate(specs)]
    # the same server with io_uring and without: named by it rather than by a prime
    labels = _labels([r + ("-nouring" if rings[i] == "off" and raw.count(r) > 1 else "") for i, r in enumerate(raw)])
    variants = []
    for i, (spec, label) in enumerate(zip(specs, labels)):
        cfg = dataclasses.replace(
            template, backends=[] if spec else [raw[i]], own=[spec] if spec else [], pythons=[pythons[i]],
            env=[f"{k}={v}" for k, v in (spec.env if spec else ())],
            extra_dims={**template.extra_dims, "tag": [label], "io_uring": [rings[i]]},
            duration=window if method == "cells" else WINDOW_S,  # turns: the probed cells' window
            rounds=1, evidence_only=False, stacks=False, flamegraph=False, pin=True, pin_both=False)
        variants.append(Variant(LETTERS[i], label, validate(cfg, whole_run=False)))
    check_zmq_client(template, [b for v in variants for b in v.cfg.zmq_servers()])
    protocols = {v.cfg.protocol for v in variants}
    if len(protocols) > 1:
        raise InputError(f"the variants speak different protocols ({', '.join(sorted(protocols))}): compare like "
                         "with like (--protocol applies to --cmd variants)")
    return AbPlan(variants, window, template.warmup, precision, metric, max_time, fresh, aa, fail_if, wait,
                  flamegraph=flamegraph, method=method)


def missing_capability(p: AbPlan) -> str | None:
    """Why the run's instruments cannot work here (one line), or None."""
    for inst in instrument_registry.wanted(p.base):
        if why := inst.missing(p.base):
            return why
    return None


# ---------------------------------------------------------------------------------------------
# The processes: canary, loader, the variants' servers

class Canary:
    """`python -I -m netprof.profiler.core.canary` on the backend's CPU for the whole run (through the run's
    ProcessGroup); a thread keeps its samples (monotonic s, loop ns) as they come."""

    def __init__(self, proc: ManagedProcess) -> None:
        self.proc = proc
        self._samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="canary", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, group: ProcessGroup, cpu: int, seconds: float) -> Canary:
        argv = [sys.executable, "-I", "-m", "netprof.profiler.core.canary", "--cpu", str(cpu),
                "--seconds", f"{seconds:.0f}"]
        return cls(group.spawn("canary", argv, cpus=[cpu]))

    def _read(self) -> None:
        while True:
            try:
                line = self.proc.readline(1.0)
            except LineTimeout:
                continue
            except (OSError, ValueError):  # the pipe closed under us at the end of the run
                return
            if line is None:
                return
            try:
                t, ns = line.split()
                sample = (float(t), float(ns))
            except ValueError:
                continue
            with self._lock:
                self._samples.append(sample)

    def samples(self, until: float, wait: float = CANARY_WAIT_S) -> np.ndarray:
        """Every sample so far, once one at or after `until` (monotonic) has come or `wait` has passed."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                done = bool(self._samples) and self._samples[-1][0] >= until
                if done or time.monotonic() >= deadline or not self.proc.alive():
                    return np.array(self._samples, dtype=float).reshape(-1, 2)
            time.sleep(0.02)

    def wait_started(self, timeout: float = CANARY_START_S) -> None:
        """Until its first sample: its own start-up (an interpreter on the backend's CPU) must not fall in a
        measured cell. ProcessError when it gives none in time."""
        deadline = time.monotonic() + timeout
        while not self.count():
            if not self.proc.alive() or time.monotonic() > deadline:
                raise ProcessError(f"the speed canary gave no sample within {timeout:g} s"
                                   + (f": {tail}" if (tail := self.proc.stderr_tail()) else ""))
            time.sleep(0.05)

    def close(self) -> None:
        """Stop it and let the reader see its end of file (before the group closes the pipe under it)."""
        self.proc.signal_group(signal.SIGTERM)
        self._thread.join(timeout=5)

    def count(self) -> int:
        with self._lock:
            return len(self._samples)


class RecordingLoader(Loader):
    """The run's loader, keeping the last run's events: their `t` (the loader's monotonic clock, the
    canary's too) bound the spans a cell's headline came from."""

    events: list[dict]

    def run(self, req, on_event=None, timeout=None):
        self.events = []

        def record(evt: dict) -> None:
            self.events.append(evt)
            if on_event is not None:
                on_event(evt)

        return super().run(req, on_event=record, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# What each cell gives, and the pairs

@dataclass
class CellRecord:
    variant: int
    pair: int
    t: float  # the window's middle (monotonic)
    figures: dict[str, float]  # the judged columns this cell has
    probed: bool
    canary_ns: float
    row: dict


def figures(row: dict) -> dict[str, float]:
    """The judged columns of one row (stats.per_round derives CPU and syscall totals)."""
    df = stats.per_round(pd.DataFrame([results.flatten(row)]))
    r = df.iloc[0]
    cols = [c for c in JUDGED if c in df] + sorted(c for c in df.columns if c.startswith(stats.KERNEL_OP_PREFIXES))
    return {c: v for c in cols if (v := stats.num(r, c)) is not None}


def _value(rec: CellRecord, col: str) -> float | None:
    """A probed cell that never made a syscall (or io_uring operation) has no column for it: that is 0, not
    unknown."""
    if col in rec.figures:
        return rec.figures[col]
    return 0.0 if rec.probed and col.startswith(stats.KERNEL_OP_PREFIXES) else None


@dataclass
class Stall:
    """A cell in which a live server answered nothing."""

    why: str


@dataclass
class Pairs:
    """One comparison's pairs: (base cell, new cell, order)."""

    new: int  # the variant index
    items: list[tuple[CellRecord, CellRecord, str]] = field(default_factory=list)
    stalled: int = 0  # pairs lost to a cell in which a live server answered nothing

    def dropped(self) -> list[bool]:
        return paired.dropped_pairs([(b.canary_ns, n.canary_ns) for b, n, _ in self.items])

    def kept(self) -> list[tuple[CellRecord, CellRecord, str]]:
        return [p for p, drop in zip(self.items, self.dropped()) if not drop]

    def values(self, col: str) -> tuple[list[float], list[float], list[float]]:
        """One figure over the kept pairs that have it: base values, new values, each pair's Δlog canary."""
        base, new, x = [], [], []
        for b, n, _ in self.kept():
            vb, vn = _value(b, col), _value(n, col)
            if vb is None or vn is None:
                continue
            base.append(vb)
            new.append(vn)
            x.append(math.log(n.canary_ns / b.canary_ns) if b.canary_ns > 0 and n.canary_ns > 0 else math.nan)
        return base, new, x

    def judge(self, col: str) -> dict | None:
        """`paired.judge` of one figure over the kept pairs that have it; None when none does."""
        base, new, x = self.values(col)
        if not base:
            return None
        return paired.judge(base, new, x, log=col in LOG_JUDGED and min(base + new) > 0)

    def columns(self) -> list[str]:
        have = {c for b, n, _ in self.items for c in (*b.figures, *n.figures)}
        return [c for c in JUDGED if c in have] + sorted(c for c in have if c.startswith(stats.KERNEL_OP_PREFIXES))


def converged(pairs: Pairs, metric: str, precision: float, min_pairs: int) -> bool:
    """The stopping rule (paired.converged) on the --metric's log ratios of one comparison."""
    base, new, x = pairs.values(metric)
    if not base or min(base + new) <= 0:
        return False
    d = np.log(new) - np.log(base)
    return paired.converged(paired.estimate(d, x), precision, min_pairs)


def _generation_records(gen: dict, g: int, t: float) -> list[CellRecord]:
    """Turns: one record per variant for generation `g` (the servers' processes between two restarts): its
    msgs/s is the geometric mean over the generation's rounds of its turns' messages ÷ the turn (so NEW/BASE
    is exp of the mean per-round log ratio), its other figures the mean over the generation's blocks."""
    rounds = np.log(np.asarray(gen["rounds"], dtype=float))
    out = []
    for i in range(rounds.shape[1]):
        blocks = [b[i].figures for b in gen["blocks"]]
        figs = {c: float(np.mean([f[c] for f in blocks if c in f])) for c in {c for f in blocks for c in f}}
        figs["msgs_per_sec"] = float(np.exp(rounds[:, i].mean())) / turns_mod.TURN_S
        out.append(CellRecord(i, g, t, figs, False, math.nan, gen["blocks"][-1][i].row))
    return out


# ---------------------------------------------------------------------------------------------
# The run

@dataclass
class AbOutcome:
    out_dir: Path
    doc: dict | None = None
    failed: str | None = None  # why the measurement ended early (a cell failed, a server died)
    interrupted: bool = False


def execute(p: AbPlan, argv: list[str], console: Console, out_dir: str = "") -> AbOutcome:
    """Run the pairs under the machine's run lock and write the results directory; `console`: progress
    (stderr)."""
    with runlock.run_lock(wait=p.wait):
        return _Session(p, console).run(argv, out_dir)


class _Session:
    def __init__(self, p: AbPlan, console: Console) -> None:
        self.p, self.console = p, console
        self.records: list[CellRecord] = []
        self.comparisons = [Pairs(j) for j in range(1, len(p.variants))]
        self.stop_reason, self.stop_text = "", ""
        self.started = time.monotonic()
        self.elapsed = 0.0
        self.canary: Canary | None = None
        # --flamegraph: per variant index, its sampled cell (variant directory, cell slug) or why there is none
        self.flames: dict[int, tuple[Path, str] | str] = {}
        self.turn_rows: list[dict] = []  # turns: every round's messages per variant (turns.parquet)
        self.gens: list[dict] = []  # turns: per generation (the servers' processes), its blocks' records and rounds
        self.probed_pairs = 0  # turns with probes: probed cell pairs after the blocks

    def run(self, argv: list[str], out_dir: str) -> AbOutcome:
        p = self.p
        out = Path(out_dir) if out_dir else runlock.unique_out_dir()
        store = ResultsStore(out)
        lcpus = loader_cpus(p.base)
        config = p.base.to_dict() | {"loader_cpus_effective": lcpus, "out_dir": str(out),
                                     "ab": {"variants": [v.label for v in p.variants], "window": p.window,
                                            "precision": p.precision, "metric": p.metric, "max_time": p.max_time,
                                            "fresh": p.fresh}}
        meta = meta_mod.collect(argv, config)
        store.write_meta(meta)
        outcome = AbOutcome(out)
        instruments: list = []
        warm: list[WarmServer] = []
        cpu = (parse_cpus(p.base.backend_cpu) or [0])[0]
        try:  # Ctrl-C anywhere, even while an interpreter is prepared or the probes compile: what ran is kept
            interps = self._interpreters()
            meta["interpreters"] = [i.describe() for i in interps]
            store.write_meta(meta)
            instruments = open_instruments(p.base)
            warm = [WarmServer(v.label, v.cfg, i) for v, i in zip(p.variants, interps)]
            with ProcessGroup() as group, contextlib.ExitStack() as stack:
                for w in warm:
                    stack.callback(w.stop)
                # turns: the rounds' two turns see the same host; a canary on the backend CPU would only take
                # CPU from the servers there
                if p.method == "cells":
                    self.canary = Canary.start(group, cpu, p.max_time + CANARY_SLACK_S)
                try:
                    loader = RecordingLoader.start(group, cpus=lcpus, threads=p.base.loader_threads)
                    assert isinstance(loader, RecordingLoader)
                    outcome.failed = self._pairs(warm, loader, instruments, store, interps)
                    if p.method == "turns" and instruments and not outcome.failed:
                        outcome.failed = self._probed_pairs(warm, loader, instruments, store, interps)
                    if p.flamegraph and not outcome.failed:
                        self._flamegraphs(warm, loader, interps, out)
                finally:
                    if self.canary is not None:
                        self.canary.close()
                cost_and_close(instruments, meta)  # what each costs on this host, as `run` records it
        except KeyboardInterrupt:
            outcome.interrupted = True
            self.stop_reason, self.stop_text = "interrupted", "interrupted (Ctrl-C)"
        finally:
            close_instruments(instruments)
            store.write_meta({**meta, "host_after": meta_mod.host_load()})
        self.elapsed = time.monotonic() - self.started
        if self.turn_rows:
            with atomic.open_atomic(out / TURNS_PARQUET, "wb") as f:
                pd.DataFrame(self.turn_rows).to_parquet(f, index=False)
        if any(c.items for c in self.comparisons):
            outcome.doc = self.document(out, warm)
            outcome.doc["artifacts"] = {**compare_report.render(outcome.doc, out), "ab_json": str(out / AB_JSON)}
            atomic.write_text(out / AB_JSON, json.dumps(outcome.doc, indent=1, default=str))
        return outcome

    def _interpreters(self) -> list[Interpreter]:
        found: dict[str, Interpreter] = {}
        for v in self.p.variants:
            spec = v.cfg.pythons[0]
            if spec not in found:
                with self.console.status(f"preparing the backends' environment for --python {spec} (cached after "
                                         "the first run)") if spec else contextlib.nullcontext():
                    found[spec] = interpreters.prepare(spec)
        return [found[v.cfg.pythons[0]] for v in self.p.variants]

    def _pairs(self, warm: list[WarmServer], loader: RecordingLoader, instruments, store: ResultsStore,
               interps: list[Interpreter]) -> str | None:
        """Pairs until the interval is narrow enough or the time is up; why it ended early, or None."""
        p = self.p
        progress = Progress(TextColumn("[bold]{task.description}"), TextColumn("{task.fields[live]}"), BarColumn(),
                            TimeElapsedColumn(), console=self.console, transient=True,
                            disable=not self.console.is_terminal)
        with progress:
            task = progress.add_task(escape(f"ab {' vs '.join(v.label for v in p.variants)}"), total=p.max_time,
                                     live="")
            if self.canary is not None:
                self.canary.wait_started()
            for w in warm:
                try:
                    w.start(loader)
                except ProcessError as e:
                    return self._failed(f"the {w.label} server did not start: {e}")
            self.started = time.monotonic()  # --max-time counts from the first pair: start-up is not measuring
            pair_s = 0.0
            k = stalls = 0
            while True:
                elapsed = time.monotonic() - self.started
                if k and all(converged(c, p.metric, p.precision, p.min_pairs) for c in self.comparisons):
                    self.stop_reason = "precision"
                    self.stop_text = f"the {p.metric} interval is within ±{p.precision:.1%}"
                    return None
                if k and elapsed + pair_s > p.max_time:
                    self.stop_reason, self.stop_text = "max-time", f"--max-time {p.max_time:g} s reached"
                    return None
                if STOP.is_set():
                    raise KeyboardInterrupt
                k += 1
                t0 = time.monotonic()
                # turns: a new generation of the servers' processes every GEN_BLOCKS blocks
                new_gen = p.method == "turns" and bool(self.gens) and len(self.gens[-1]["blocks"]) == GEN_BLOCKS
                if (p.fresh and k > 1) or new_gen:
                    for w in warm:
                        w.stop()
                    # the start order alternates too: a server started second is not always the same variant
                    for w in warm if k % 2 else warm[::-1]:
                        try:
                            w.start(loader)
                        except ProcessError as e:
                            return self._failed(f"the {w.label} server did not start: {e}")
                if p.method == "turns":
                    failed = self._block(warm, k, loader, store, interps)
                    if isinstance(failed, Stall):
                        stalls += 1
                        if stalls >= MAX_STALLS:
                            return self._failed(f"{failed.why}, {stalls} blocks in a row")
                    elif failed:
                        return self._failed(failed)
                    else:
                        stalls = 0
                for comp in self.comparisons if p.method == "cells" else ():
                    got = self._cell_pair(comp, k, warm, loader, instruments, store, interps)
                    if isinstance(got, Stall):
                        # a live server that answered nothing in a window: the host took its CPU (or it hangs,
                        # which MAX_STALLS in a row says); the pair is lost, and counted
                        comp.stalled += 1
                        stalls += 1
                        if stalls >= MAX_STALLS:
                            return self._failed(f"{got.why}, {stalls} cells in a row")
                    elif isinstance(got, str):
                        return self._failed(got)
                    else:
                        stalls = 0
                        comp.items.append(got)
                pair_s = time.monotonic() - t0
                line = self._live(k)
                progress.update(task, completed=min(time.monotonic() - self.started, p.max_time), live=escape(line))
                if not self.console.is_terminal:
                    self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _block(self, warm: list[WarmServer], k: int, loader: RecordingLoader, store: ResultsStore,
               interps: list[Interpreter]) -> Stall | str | None:
        """Turns: block `k` (turns.run_block), its rows written at once, added to the current generation (the
        servers' current processes), whose pair it updates. A Stall when a variant answered nothing in its
        turns; a string when the block failed."""
        p = self.p
        cfgs = [w.cfg for w in warm if w.cfg is not None]
        assert len(cfgs) == len(warm)  # every server is up (started before the block)
        first = not self.gens or len(self.gens[-1]["blocks"]) == GEN_BLOCKS
        warmup = max(p.warmup, GEN_WARMUP_S) if first else p.warmup
        # Which variant is the loader's target (even connections, first turn) rotates block by block: a place
        # that favoured one would favour each in turn
        perm = [(j + k) % len(warm) for j in range(len(warm))]
        block = turns_mod.run_block([cfgs[j] for j in perm], [interps[j] for j in perm], loader, k, p.window,
                                    warmup)
        if block.error:
            gone = next((f for w in warm if (f := w.failure())), None)
            return f"block {k}: {gone or block.error}"
        block = turns_mod.unpermute(block, perm)
        for w, row, per_conn in zip(warm, block.rows, block.per_conn):
            w.as_started(row)
            store.add(row, per_conn, {}, None)
        if silent := [p.variants[i].label for i, row in enumerate(block.rows) if row["status"] != "ok"]:
            for comp in self.comparisons:
                comp.stalled += 1
            return Stall(f"{', '.join(silent)} answered nothing in its turns of block {k}")
        if first:
            self.gens.append({"blocks": [], "rounds": []})
        gen, g = self.gens[-1], len(self.gens)
        mid = (block.t_start + block.t_stop) / 2
        recs = [CellRecord(i, k, mid, figures(row), False, math.nan, row) for i, row in enumerate(block.rows)]
        self.records.extend(recs)
        gen["blocks"].append(recs)
        span = len(warm) * turns_mod.TURN_S
        for r, rnd in enumerate(block.rounds):
            t = block.t_start + (r + 0.5) * span
            for i, m in enumerate(rnd.messages):
                self.turn_rows.append({"generation": g, "block": k, "round": r, "t_s": round(t - self.started, 3),
                                       "variant": p.variants[i].label, "turn": rnd.order.index(i), "messages": m,
                                       "msgs_per_sec": m / turns_mod.TURN_S,
                                       "latency_mean_us": rnd.latency_mean_us[i]})
            if all(rnd.messages):
                gen["rounds"].append(rnd.messages)
            else:  # a turn with no reply: no ratio (the host took the CPU, or a server hung)
                for comp in self.comparisons:
                    comp.stalled += 1
        if not gen["rounds"]:
            return None
        gen_recs = _generation_records(gen, g, mid)
        for comp in self.comparisons:
            pair = (gen_recs[0], gen_recs[comp.new], f"generation {g}")
            if comp.items and comp.items[-1][2] == pair[2]:
                comp.items[-1] = pair  # the generation so far, replaced as its blocks come
            else:
                comp.items.append(pair)
        return None

    def _probed_pairs(self, warm: list[WarmServer], loader: RecordingLoader, instruments, store: ResultsStore,
                      interps: list[Interpreter]) -> str | None:
        """Turns with probes: PROBE_PAIRS pairs of short probed cells per comparison after the blocks, for the
        syscalls per message (the counting set follows one server at a time); their other figures are the
        blocks'. Why it failed, or None."""
        k0 = max((r.pair for r in self.records), default=0)
        for j in range(1, PROBE_PAIRS + 1):
            for comp in self.comparisons:
                got = self._cell_pair(comp, k0 + j, warm, loader, instruments, store, interps)
                if isinstance(got, str):
                    return self._failed(got)
                if isinstance(got, Stall):
                    continue
                for rec in got[:2]:
                    rec.figures = {c: v for c, v in rec.figures.items()
                                   if c.startswith(stats.KERNEL_OP_PREFIXES) or c in PROBED_TOTALS}
                comp.items.append(got)
                self.probed_pairs += 1
        return None

    def _cell_pair(self, comp: Pairs, k: int, warm: list[WarmServer], loader: RecordingLoader, instruments,
                   store: ResultsStore, interps: list[Interpreter]) -> tuple[CellRecord, CellRecord, str] | Stall | str:
        """Pair `k` of one comparison: the base's and the new variant's cells, A B for odd `k`, B A for even;
        (base, new, order), or the first cell's Stall or failure."""
        order = (0, comp.new) if k % 2 else (comp.new, 0)
        got = {}
        for i in order:
            rec = self._cell(warm[i], i, k, loader, instruments, store, interps[i])
            if isinstance(rec, (Stall, str)):
                return rec
            got[i] = rec
        return got[0], got[comp.new], "".join(self.p.variants[i].letter for i in order)

    def _flamegraphs(self, warm: list[WarmServer], loader: RecordingLoader, interps: list[Interpreter],
                     out: Path) -> None:
        """--flamegraph: after the pairs, one sampling round per variant on its warm server (as `run
        --flamegraph` adds one per cell), into variants/<letter>/flamegraphs/<cell>/."""
        for i, (v, w) in enumerate(zip(self.p.variants, warm)):
            if w.cfg is None:
                self.flames[i] = "its server was not running"
                continue
            self.console.print(f"flamegraph: sampling {v.label}", markup=False, highlight=False)
            vdir = atomic.make_subdir(out, f"variants/{v.letter}")
            entry = evidence.flamegraph_round(next(v.cfg.combinations(0)), CellEnv(w.cfg, loader, interps[i]), vdir)
            self.flames[i] = (vdir, Path(entry["dir"]).name) if entry.get("oncpu_folded") else \
                "; ".join(entry.get("notes") or ["no on-CPU stacks were sampled"])

    def _flame_diff(self, comp: Pairs, cell: dict, out: Path) -> dict | None:
        """The differential flamegraph of a comparison whose figures changed (compare.flame_diff), from the two
        variants' sampling rounds; None without --flamegraph or a notable change."""
        b, n = self.flames.get(0), self.flames.get(comp.new)
        if not (isinstance(b, tuple) and isinstance(n, tuple)):
            return None
        base, new = self.p.variants[0], self.p.variants[comp.new]
        return compare.flame_diff((*b, base.label), (*n, new.label), cell, out, comp.new)

    def _failed(self, why: str) -> str:
        self.stop_reason, self.stop_text = "failed", why
        return why

    def _cell(self, server: WarmServer, i: int, k: int, loader: RecordingLoader, instruments, store: ResultsStore,
              interp: Interpreter) -> CellRecord | Stall | str:
        """One cell of variant `i` in pair `k`, its row written at once; a string says why it failed."""
        v = self.p.variants[i]
        assert server.cfg is not None
        cell = next(v.cfg.combinations(k))
        out = run_cell(cell, CellEnv(server.cfg, loader, interp, instruments=tuple(instruments)))
        server.as_started(out.row)
        store.add(out.row, out.per_conn_messages, out.conn_rows, out.timeline)
        if not out.ok:
            gone = server.failure()
            why = f"{v.label}, pair {k}: {gone or out.row.get('error')}"
            return Stall(why) if not gone and str(out.row.get("error")).startswith("stalled") else why
        spans = paired.headline_spans(loader.events)
        canary = paired.loop_ns(self.canary.samples(until=spans[-1][1]), spans) if spans and self.canary else math.nan
        mid = (spans[0][0] + spans[-1][1]) / 2 if spans else time.monotonic()
        rec = CellRecord(i, k, mid, figures(out.row), bool(out.row.get("probes")), canary, out.row)
        self.records.append(rec)
        return rec

    def _live(self, k: int) -> str:
        """'pair 7: msgs_per_sec B/A 0.512× [0.498, 0.527] ±2.9% (target ±1.0%), 0 dropped, 11 s' (the
        --metric as given)."""
        p, parts = self.p, []
        for comp in self.comparisons:
            c = comp.judge(p.metric)
            name = f"{p.variants[comp.new].letter}/A"
            if c is None or c["ratio_lo"] is None:
                parts.append(f"{name} {c['ratio']:.3f}× (no interval yet)" if c else f"{name} – (no pair yet)")
                continue
            half = max(c["ratio_hi"] / c["ratio"], c["ratio"] / c["ratio_lo"]) - 1
            parts.append(f"{name} {c['ratio']:.3f}× [{c['ratio_lo']:.3f}, {c['ratio_hi']:.3f}] ±{half:.1%}")
        dropped = sum(sum(c.dropped()) for c in self.comparisons)
        unit = f"block {k}, generation {len(self.gens)}" if p.method == "turns" else f"pair {k}"
        return (f"{unit}: {p.metric} " + "; ".join(parts) + f" (target ±{p.precision:.1%}), {dropped} dropped, "
                f"{time.monotonic() - self.started:.0f} s")

    # -----------------------------------------------------------------------------------------
    # The document

    def document(self, out: Path, warm: list[WarmServer]) -> dict:
        p = self.p
        base = p.variants[0]
        checks = compare.parse_fail_if(p.fail_if)
        loader_frac = _loader_fracs(self.records, p.variants)
        limit = Thresholds().loader_saturated  # the loader_bottleneck rule's
        saturated = {label: f for label, f in loader_frac.items() if f is not None and f >= limit}
        short = _short_of_rate(self.records, p.variants, p.rate)
        protocol = base.cfg.protocol  # one for all variants (plan refuses a mix): req/s for HTTP (units)
        comparisons, ab_comps = [], []
        for comp in self.comparisons:
            new = p.variants[comp.new]
            kept, dropped = comp.kept(), comp.dropped()
            metrics = {}
            for col in comp.columns():
                c = comp.judge(col)
                if c is not None:
                    metrics[col] = compare.describe(col, compare.json_ready(c), protocol)
            label = f"{base.label} → {new.label} c={base.cfg.connections[0]}" + (
                f" pipeline {base.cfg.pipeline[0]}" if base.cfg.pipeline[0] != 1 else "") + (
                f" at {p.rate:,.0f}/s" if p.rate else "")
            cell = {"connections": base.cfg.connections[0], "pipeline": base.cfg.pipeline[0], "protocol": protocol,
                    "label": label,
                    "rounds": {"base": len(kept), "new": len(kept), "base_failed": 0, "new_failed": 0},
                    "metrics": metrics}
            cell["verdict"] = _verdict(metrics, p)
            cell["why"] = compare.why(label, metrics, protocol)
            cell["flamegraph_diff"] = self._flame_diff(comp, cell, out)
            warnings = _warnings(saturated, sum(dropped), len(comp.items), p.fresh, comp.stalled) + [
                f"{label_} did not keep up with {p.rate:,.0f} requests/s (achieved {got:,.0f}/s, median over its "
                "cells): its latency is its backlog growing through each window, not its service time"
                for label_, got in short.items() if label_ in (base.label, new.label)]
            comparisons.append({"new": {"path": str(out), "name": new.label}, "matched_on": ["connections", "pipeline"],
                                "compared_across": {"variant": [base.label, new.label]}, "warnings": warnings,
                                "unmatched": {"base_only": [], "new_only": []}, "cells": [cell]})
            head = metrics.get(p.metric, {})
            ab_comps.append({
                "new": new.label, "pairs": len(comp.items), "kept": len(kept), "dropped": int(sum(dropped)),
                "stalled": comp.stalled,
                "estimator": head.get("estimator"), "canary_shift": compare.json_ready(comp_canary_shift(comp)),
                "pairs_detail": [_pair_record(b, n, order, drop, self.started, p.variants)
                                 for (b, n, order), drop in zip(comp.items, dropped)]})
            if p.method == "turns":  # each generation's rounds, for the plot beneath the generations
                per_gen = _round_ratios(self.turn_rows, base.label, new.label)
                for (b, _, order), rec in zip(comp.items, ab_comps[-1]["pairs_detail"]):
                    if order.startswith("generation"):  # not the probed cell pairs after the blocks
                        rec["rounds"] = per_gen.get(b.pair, [])
        doc: dict = {
            "schema": compare.SCHEMA,
            "method": {"text": (METHOD_TURNS if p.method == "turns" else METHOD).format(
                           gen_blocks=GEN_BLOCKS, gen_warmup=GEN_WARMUP_S, per=units.per_unit(protocol),
                           many=units.exchanges(protocol)), "alpha": paired.ALPHA,
                       "confidence": paired.CONFIDENCE,
                       "min_rounds": compare.MIN_ROUNDS, "test": "paired Student t-test of the per-pair differences",
                       "interval": "Student t on the per-pair log ratios (differences for counts), "
                                   + ("a pair being a generation of the servers (turns)" if p.method == "turns" else
                                      "adjusted for the speed canary by OLS once there are enough pairs")},
            "base": {"path": str(out), "name": base.label},
            "comparisons": comparisons,
            "fail_if": {"checks": [c.text for c in checks], "breaches": []},
            "artifacts": {},
            "ab": {
                "variants": [{"letter": v.letter, "label": v.label, "server": v.server, "kind": v.kind,
                              "python": v.cfg.pythons[0], "command": v.cfg.server(v.server).template or None}
                             for v in p.variants],
                "aa": p.aa, "measured": "fresh" if p.fresh else "warm", "method": p.method,
                "turn_s": turns_mod.TURN_S if p.method == "turns" else None,
                "probed_pairs": self.probed_pairs if p.method == "turns" else None,
                "measured_text": ("fresh servers: every variant's server restarted before each pair" if p.fresh
                                  else f"warm servers served in turns of {turns_mod.TURN_S:g} s on one loader (A B, "
                                  f"B A, …), restarted every {GEN_BLOCKS} blocks (generations, the interval's units)"
                                  if p.method == "turns"
                                  else "warm servers: each variant's server started once and kept for every pair"),
                "server_starts": {w.label: w.starts for w in warm},
                "window_s": p.window, "warmup_s": p.warmup, "metric": p.metric, "precision": p.precision,
                "metric_log": p.metric in LOG_JUDGED,  # pairs_detail's d[metric]: a log ratio, else NEW − BASE
                "rate": p.rate or None, "arrivals": p.base.arrivals if p.rate else None,
                "short_of_rate": short,
                "max_time_s": p.max_time, "min_pairs": p.min_pairs, "elapsed_s": round(self.elapsed, 2),
                "stop": {"reason": self.stop_reason, "text": self.stop_text},
                "slow_canary_share": paired.SLOW, "canary_samples": self.canary.count() if self.canary else 0,
                "loader_bound": bool(saturated), "loader_cpu_frac": loader_frac,
                "comparisons": ab_comps,
                # --flamegraph: each variant's sampled cell (relative directory) or why there is none
                "flamegraphs": {p.variants[i].label: str(f[0].relative_to(out) / "flamegraphs" / f[1])
                                if isinstance(f, tuple) else f for i, f in sorted(self.flames.items())} or None,
            },
        }
        doc["fail_if"]["breaches"] = compare.breaches(doc, checks)
        doc["method"]["text"] += " This run: " + "; ".join(x.strip() for x in summary_lines(doc))[len("ab: "):] + "."
        return doc


def comp_canary_shift(comp: Pairs) -> dict:
    """The canary's own NEW/BASE ratio over the kept pairs: the adjustment assumes no variant slows the canary,
    so this should hold 1."""
    loops = [(b.canary_ns, n.canary_ns) for b, n, _ in comp.kept() if b.canary_ns > 0 and n.canary_ns > 0]
    if len(loops) < 2:
        return {}
    c = paired.judge([b for b, _ in loops], [n for _, n in loops])
    return {"ratio": c["ratio"], "ratio_lo": c["ratio_lo"], "ratio_hi": c["ratio_hi"], "p": c["p"]}


def _round_ratios(rows: list[dict], base: str, new: str) -> dict[int, list[list[float]]]:
    """Turns: each round's NEW/BASE ratio of messages, by generation, as [t_s, ratio] (turns.parquet's rows
    paired up); a round where either side got nothing has none."""
    rounds: dict[tuple[int, int, int], dict] = {}
    for r in rows:
        rounds.setdefault((r["generation"], r["block"], r["round"]), {"t_s": r["t_s"]})[r["variant"]] = r["messages"]
    out: dict[int, list[list[float]]] = {}
    for (g, _, _), m in sorted(rounds.items()):
        if m.get(base) and m.get(new):
            out.setdefault(g, []).append([m["t_s"], round(m[new] / m[base], 5)])
    return out


def _pair_record(b: CellRecord, n: CellRecord, order: str, dropped: bool, t0: float, variants: list[Variant]) -> dict:
    d = {}
    for col in sorted(set(b.figures) | set(n.figures)):
        vb, vn = _value(b, col), _value(n, col)
        if vb is None or vn is None:
            continue
        d[col] = math.log(vn / vb) if col in LOG_JUDGED and vb > 0 and vn > 0 else vn - vb
    return compare.json_ready({"pair": b.pair, "t_s": round((b.t + n.t) / 2 - t0, 3), "order": order,
                               "dropped": dropped, "canary_ns": {"base": b.canary_ns, "new": n.canary_ns}, "d": d})


def _verdict(metrics: dict, p: AbPlan) -> str:
    """The cell's verdict: throughput's; under --rate (throughput is the schedule's) the stopping metric's,
    said as faster/slower (a lower latency or CPU per message is faster)."""
    if not p.rate:
        return metrics.get("msgs_per_sec", {}).get("verdict", "not measured")
    m = metrics.get(p.metric)
    if m is None:
        return "not measured"
    if m["verdict"] in ("higher", "lower"):
        return "faster" if m["better"] else "slower"
    return m["verdict"]


# A variant whose median cell achieved less than this share of --rate was overloaded.
KEPT_UP = 0.95


def _short_of_rate(records: list[CellRecord], variants: list[Variant], rate: float) -> dict[str, float]:
    """Under --rate: the variants that did not keep up (label → median achieved requests/s)."""
    if not rate:
        return {}
    achieved = _medians(records, variants, lambda row: row.get("msgs_per_sec"))
    return {label: m for label, m in achieved.items() if m is not None and m < KEPT_UP * rate}


def _loader_fracs(records: list[CellRecord], variants: list[Variant]) -> dict[str, float | None]:
    """Each variant's median loader CPU share (of its CPUs) over its cells."""
    return _medians(records, variants, lambda row: (row.get("loader_cpu") or {}).get("cpu_frac"))


def _medians(records: list[CellRecord], variants: list[Variant], get) -> dict[str, float | None]:
    """label → the median of `get(row)` over the variant's cells (None: no cell had it)."""
    out: dict[str, float | None] = {}
    for i, v in enumerate(variants):
        vals = [float(x) for r in records if r.variant == i and (x := get(r.row)) is not None]
        out[v.label] = float(np.median(vals)) if vals else None
    return out


def _warnings(saturated: dict[str, float], dropped: int, pairs: int, fresh: bool, stalled: int) -> list[str]:
    out = []
    if stalled:
        out.append(f"{stalled} pair(s) lost: a live server answered nothing in a cell's window (the host took its CPU)")
    for label, frac in saturated.items():
        out.append(f"the loader, not the servers, set the pace: it used {frac:.0%} of its CPU in {label}'s cells, so "
                   "a server-side change can be invisible here (give the loader more CPUs, or use fewer connections)")
    if dropped:
        out.append(f"{dropped} of {pairs} pairs dropped: a cell ran with the backend CPU's canary "
                   f"≥{paired.SLOW:.0%} slower than the median cell (the host was disturbed)")
    if fresh:
        out.append("--fresh: servers restarted before every pair, so this compares cold processes")
    return out


def summary_lines(doc: dict) -> list[str]:
    """What the terminal adds to compare's pages: how the answer was measured and why it stopped."""
    ab = doc["ab"]
    load = (f"open loop at {ab['rate']:,.0f} requests/s ({ab['arrivals']} arrivals), judged on {ab['metric']}; "
            if ab.get("rate") else "")
    windows = (f"{ab['window_s']:g} s blocks after {ab['warmup_s']:g} s warm-up each"
               + (f", then {ab['probed_pairs']} probed cell pairs for the syscalls" if ab.get("probed_pairs") else "")
               if ab.get("method") == "turns" else f"{ab['window_s']:g} s windows after {ab['warmup_s']:g} s warm-up")
    lines = [f"ab: {ab['measured_text']}; {load}{windows}; stopped after {ab['elapsed_s']:.0f} s: {ab['stop']['text']}"]
    for c in ab["comparisons"]:
        kept = (f"{c['kept']} pairs (generations of the servers, then the probed cell pairs)"
                if ab.get("method") == "turns"
                else f"{c['kept']} pairs kept, {c['dropped']} dropped (host disturbed)")
        lines.append(f"  {c['new']}: {kept}; estimator: {c['estimator'] or '–'}")
    return lines


def report(doc: dict, console: Console) -> None:
    """compare's terminal pages, then the ab lines."""
    compare_report.print_doc(doc, console)
    for line in summary_lines(doc):
        console.print(escape(line), highlight=False, soft_wrap=True)

