"""What an ab run is: its variants, method, window and stopping rule, checked before anything starts."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from netprof.backends import registry as backend_registry
from netprof.probes import registry as instrument_registry
from netprof.profiler.analysis import fail_if as fail_if_rules
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import metrics, paired
from netprof.profiler.run import servers
from netprof.profiler.run import turns as turns_mod
from netprof.profiler.run.plan import (
    RunConfig,
    check_zmq_client,
    closed_loop_only,
    parse_io_uring,
    validate,
)

AB_JSON = "ab.json"
TURNS_PARQUET = "turns.parquet"  # turns: every round's messages per variant
PRIME = "\u2032"  # the second of two identical variants is "selector′"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# The figures judged per pair (model/metrics.py's names), then each syscall and io_uring operation per message when
# probes ran. Positive ones are judged on log ratios; counts that can be 0 (context switches, syscalls) on differences.
JUDGED = ("msgs_per_sec", "lat_us.p50", "lat_us.p99", "cpu_us_per_msg.user", "cpu_us_per_msg.sys", metrics.CPU_TOTAL,
          "ctx_switches_per_msg", metrics.SYSCALLS_TOTAL, metrics.KERNEL_OPS_TOTAL)
PROBED_TOTALS = (metrics.SYSCALLS_TOTAL, metrics.KERNEL_OPS_TOTAL)  # a probed cell pair's figures: these and each op
LOG_JUDGED = ("msgs_per_sec", "lat_us.p50", "lat_us.p99", "cpu_us_per_msg.user", "cpu_us_per_msg.sys",
              metrics.CPU_TOTAL)
METRICS = LOG_JUDGED  # what --metric may name: the stopping rule reads a log-ratio interval
LIMITS = {"window": (0.2, 60.0), "warmup": (0.0, 60.0), "max_time": (1.0, 24 * 3600.0), "precision": (1e-4, 0.5)}
CANARY_SLACK_S = 120.0  # the canary outlives the planned run by this much at most (it is bounded by itself too)
MAX_STALLS = 3  # cells in a row in which a live server answered nothing end the run: it hangs
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
    fail_if_rules.parse_fail_if(fail_if)  # a malformed rule fails now, not after the measurement
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
