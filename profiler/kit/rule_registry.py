"""The rules' registry: what a rule receives (`Context`), what it returns (`Anomaly`), its thresholds
(`Thresholds`), the `@rule` decorator that records each rule and its metadata in one place, and
`detect`, which runs them all and merges what describes a backend rather than one cell (`consolidate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from netprof.profiler.model import results, schema, stats


@dataclass(frozen=True)
class Thresholds:
    # starvation: fair service gives Jain ≈ 1 and active_share ≈ 0.95
    starvation_jain: float = 0.8            # fair service measures 0.97–1.00 here, starved 0.5 and below
    starvation_active_share: float = 0.5
    starvation_min_connections: int = 4      # below this, shares are too coarse to judge
    starvation_idle_share: float = 0.05      # connections that got no message at all in the window
    # threads runnable but waiting for a CPU, on average (sched.runq_mean): the scheduler's order decides who is served
    # (cpp_th at 1000 connections, 8 in flight: 554-1001 of its 1001 threads, 2026-12-06; a loop alone on its core: ~0)
    starvation_runq_mean: float = 2.0
    # ... and the turns on the CPU themselves uneven: the p5 thread had fewer than this share of the median's turns
    # (cpp_th over 2 s: 0 of 3; socketserver, whose threads mostly wake to find the GIL taken: 30 of 36)
    sched_even_turns: float = 0.5
    # ... and the GIL named where its waits show: futex calls per message (socketserver at 1000 connections, 8 in
    # flight: 0.63-1.37, its turns even; `thread` 0.01-0.11, cpp_th none)
    gil_futex_per_msg: float = 0.3
    # accepts per message above this are a server's design (a connection per request: gunicorn_sync), not a backlog
    accept_per_msg: float = 0.05
    # eager read: epoll_ctl/msg below this fraction of what register-per-read implies
    eager_read_fraction: float = 0.25
    # ... and reads per message at least this: the eager path reads one message per call (`sock_recv(64)`); fewer
    # are a transport's buffer taking several at once (anyio on asyncio at 1000 connections, 8 in flight: 0.61)
    eager_read_reads: float = 0.9
    sock_recv_model_epoll_ctl: float = 2.0   # add_reader + remove_reader around every waiting read
    # readiness churn: register/unregister per read
    readiness_churn_epoll_ctl: float = 1.5
    poll_handle_epoll_ctl: float = 4.5       # uvloop: a libuv poll handle made and closed per read (6 epoll_ctl)
    batched_reads: float = 0.5               # reads per message below this: one read takes several pipelined ones
    # io_uring work: the ring's share of the kernel operations per message (syscalls + submissions) that makes
    # syscall counts alone misleading (uvloop_sock: 0.9 of 6.9 epoll_ctl, 11% of all its operations)
    ring_work_share: float = 0.05
    # allocator churn: mmap + munmap + mremap + brk per message
    mmap_churn: float = 0.5
    mmap_triple: float = 0.3                 # each of mmap/mremap/munmap per message: a buffer cycled every 3rd message
    # lock contention
    futex_per_msg: float = 1.0
    futex_critical: float = 5.0
    involuntary_per_msg: float = 0.5
    migrations_per_msg: float = 0.05
    # CPU split (informational): share of backend CPU time spent in user space
    kernel_dominated_user_frac: float = 0.4
    user_dominated_user_frac: float = 0.7
    # the loader (the instrument) is saturated
    loader_saturated: float = 0.9
    backend_idle_busy_frac: float = 0.8      # backend busy below this while the loader is saturated: critical
    # latency tail
    tail_ratio: float = 20.0                 # p999 / p50
    tail_warning_factor: float = 5.0         # a tail this × tail_ratio (100× the median) warns with no cause found
    # throughput collapse as connections grow
    collapse_drop: float = 0.5               # msgs/s falls below (1 - drop) × peak
    collapse_syscall_growth: float = 1.2     # syscalls/msg past this × the peak's: a new pattern, not round noise
    collapse_busy_drop: float = 0.8          # backend busy below this × the peak's: it waits rather than works
    # noisy cells
    noisy_cv: float = stats.NOISY_CV
    noisy_cv_warning: float = 0.25
    # machine busy: a round this far below its cell's best round, neither backend nor loader busy
    machine_busy_drop: float = 0.15
    machine_busy_core: float = 0.9           # "busy": this share of a core (backend) / of its CPUs (loader)
    # connections lost (reset, timed out, refused) in a round that otherwise succeeded
    connection_errors_min: int = 1           # lost connections in one round that raise the anomaly
    connection_errors_critical: float = 0.01  # share of a round's connections lost: critical above
    # --breakdown (probes/breakdown/): the slowest 1%'s largest part is named when it is at least this share
    # of their time and the tail is at least tail_cause_min_us long (shorter tails are the loopback's µs)
    tail_cause_share: float = 0.5
    tail_cause_min_us: float = 500.0
    # loader_queue: a ZeroMQ cell under libzmq whose parts fall short of the loader's round trip by this share
    loader_queue_share: float = 0.05
    # --sockwait (probes/sockwait.py): where each message waited
    wait_starvation_ratio: float = 100.0     # least-served tenth's median wait ÷ the most-served tenth's
    hol_min_handler_us: float = 200.0        # a handler this long is the application's work, not loop overhead
    hol_wait_handler_ratio: float = 3.0      # median queue wait ≥ this × median handler time
    hol_min_in_flight: int = 2               # fewer messages in flight: none can wait behind another's handler
    # ... and handlers ran one after another: requests in a handler at once (Little's law: msgs/s × mean
    # handler time) at most this. Far above it the "handler" time is the loop's turn coming round
    # between a read and its answer (uvloop_sock at 8 in flight: 50 at once), not work that blocks.
    hol_max_overlap: float = 2.0
    busy_wait_p50_us: float = 1000.0         # "loop busy elsewhere": median queue wait at least this ...
    busy_wait_handler_ratio: float = 10.0    # ... and this × the median handler time
    busy_beyond_round: float = 3.0           # mean wait ≥ this × one round of the other messages: stalls
    # a round whose probes attached late or detached past the guard by more than this (ms)
    probe_spill_ms: float = 1.0
    # --rate (open loop): a server behind its schedule, and the bend of the latency–throughput curve
    overload_shortfall: float = 0.05         # achieved below (1 − this) × the target rate
    overload_behind_share: float = 0.01      # or more than this share of requests waited for their connection
    overload_growth: float = 2.0             # ... and p99 grew this much from the window's first slice to its last
    # ... or the requests still queued in the loader at the window's end were this long of the rate's schedule (s):
    # longer than this kind of host stops a busy CPU (PAUSE_REF: up to 13.5 ms), so the server's, not a pause's
    overload_backlog_s: float = 0.02
    knee_factor: float = 3.0                 # the bend: p99 this × its value at the lowest rate
    knee_change: float = 0.25                # a per-message figure that moved this much (relative) is evidence
    knee_share_drop: float = 0.02            # ... at a rate whose achieved share fell this much below the lowest's
    knee_waited_rise: float = 0.05           # ... or whose share of requests that waited in the loader rose this much
    knee_cpu_busy: float = 0.9               # the knee's limit is the server's CPU when it was busy this share of one
    knee_cpu_near: float = 0.8               # ... or this share, at a rate above the knee's busy knee_cpu_busy
    knee_loader_cpu: float = 0.9             # ... the loader's when its CPUs were this busy (before the server's)
    knee_runqueue_share: float = 0.25        # ... the run queue when this share of the slowest 1%'s time was there
    knee_runq_threads: float = 1.0           # ... or (no --breakdown) this many of its threads waited for a CPU
    knee_batching_drop: float = 0.5          # ... the loop's batching when its waits per message fell by this share
    knee_blocked_busy: float = 0.5           # ... and its turns blocked off the CPU when it was busy less than this
    loader_late_min: float = 1               # requests the loader itself sent late (past its threshold), per round
    # ... a warning when more than this share of the sent requests were late, or its p99 lateness passed the
    # threshold; below, an info (a loader at nice 19 beside a benchmark on 2 CPUs: 9 of 1,500 late, p99 0.3 ms)
    loader_late_warning_share: float = 0.01


THRESHOLDS = Thresholds()
SEVERITIES = ("critical", "warning", "info")


@dataclass
class Anomaly:
    id: str
    cell: dict  # what it is about: schema.finding_cell (connections None: the backend as a whole)
    severity: str
    title: str
    explanation: str
    evidence: dict = field(default_factory=dict)

    @classmethod
    def at(cls, row, id: str, severity: str, title: str, explanation: str, evidence: dict) -> Anomaly:
        """An anomaly about the cell of `row`; evidence without its empty entries."""
        return cls(id, schema.finding_cell(row), severity, title, explanation,
                   {k: v for k, v in evidence.items() if v not in (None, [], {})})

    def to_dict(self) -> dict:
        """The JSON summary's anomaly: the contract's keys in its order, then the rest of the cell."""
        return {"id": self.id, **{k: self.cell[k] for k in schema.FINDING_KEYS}, "severity": self.severity,
                "title": self.title, "explanation": self.explanation, "evidence": self.evidence,
                **{k: self.cell[k] for k in schema.FINDING_MORE_KEYS}}


# ---------------------------------------------------------------------------------------------
# Context: everything a rule may look at.

@dataclass
class Context:
    df: pd.DataFrame
    cells: pd.DataFrame
    per_conn: pd.DataFrame | None = None
    meta: dict = field(default_factory=dict)
    out_dir: Path | None = None
    t: Thresholds = THRESHOLDS
    # what several rules derive alike, derived once per detect (a knee run's cells as its verdict reads them: four
    # open-loop rules read them, each read costs knee.json and an aggregate)
    memo: dict = field(default_factory=dict)

    def same_cell(self, row, **changes) -> pd.DataFrame:
        """Cells of the table equal to `row` on every dimension except `changes` (None: any value)."""
        return schema.select(self.cells, row, **changes)

    def stacks(self, row, syscalls: tuple[str, ...], top: int = 2) -> list[dict]:
        """Top user stacks of these syscalls from stacks/<cell slug>.json, if collected."""
        if self.out_dir is None:
            return []
        try:  # read as every results file is: no link followed
            doc = results.read_json(self.out_dir, f"stacks/{schema.cell_slug(row)}.json", {})
        except (OSError, ValueError):  # InputError (a link, another user's file) too: no evidence from it
            return []
        if not isinstance(doc, dict):
            return []
        found = []
        for name in syscalls:
            for s in (doc.get(name) or [])[:top]:
                found.append({"syscall": name, "count": s.get("count"), "frames": list(s.get("frames", []))[:12]})
        return found

    def conn_counts(self, row) -> np.ndarray | None:
        pc = self.per_conn
        if pc is None or pc.empty:
            return None
        counts = schema.select(schema.normalize(pc), row)["messages"].to_numpy(dtype=float)
        return counts if counts.size else None


# ---------------------------------------------------------------------------------------------
# Registry

Rule = Callable[[Context], list[Anomaly]]


@dataclass(frozen=True)
class RuleMeta:
    id: str
    consolidate: bool = False  # one card per backend (SERVER_KEYS), not per cell: how the backend behaves
    plots: tuple[str, ...] = ()  # the report's plots that show it, the main one first
    section: str | None = None  # the report's section that shows it ("sockwait": where the round trip went)
    needs_cells: bool = True  # False: it runs also when no cell was measured (every round failed)


RULES: dict[str, Rule] = {}  # in the order findings of one severity are listed
META: dict[str, RuleMeta] = {}


def rule(id: str, consolidate: bool = False, plots: tuple[str, ...] = (), section: str | None = None,
         needs_cells: bool = True) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[id] = fn
        META[id] = RuleMeta(id, consolidate, tuple(plots), section, needs_cells)
        return fn
    return register


def place(module: str, after: str) -> None:
    """List the rules registered by `module` right after those of `after` (a module's dotted name): RULES'
    order is the order findings of one severity are listed. An instrument's rules are found by name after
    the topic modules' (probes/registry.parts) and say where they belong (their module's LISTED_AFTER)."""
    mine = [id for id, fn in RULES.items() if fn.__module__ == module]
    rest = [id for id in RULES if id not in mine]
    at = max((i + 1 for i, id in enumerate(rest) if RULES[id].__module__ == after), default=len(rest))
    order = rest[:at] + mine + rest[at:]
    moved = {id: RULES[id] for id in order}
    RULES.clear()
    RULES.update(moved)


def detect(df: pd.DataFrame, per_conn: pd.DataFrame | None = None, meta: dict | None = None,
           out_dir: str | Path | None = None, thresholds: Thresholds = THRESHOLDS,
           cells: pd.DataFrame | None = None) -> list[dict]:
    """Run every rule; anomalies as dicts, most severe first (then by rule order, backend, connections)."""
    ctx = Context(df=df, cells=stats.aggregate(df) if cells is None else cells, per_conn=per_conn, meta=meta or {},
                  out_dir=Path(out_dir) if out_dir else None, t=thresholds)
    found: list[Anomaly] = []
    for id, fn in RULES.items():
        if ctx.cells.empty and META[id].needs_cells:
            continue
        found.extend(fn(ctx))
    say_closed_loop(found, ctx.cells)
    found = consolidate(found)
    order = list(RULES)
    found.sort(key=lambda a: (SEVERITIES.index(a.severity), order.index(a.id), a.cell["backend"],
                              a.cell["connections"] if isinstance(a.cell["connections"], int) else 0))
    return [_jsonable(a.to_dict()) for a in found]


def say_closed_loop(found: list[Anomaly], cells: pd.DataFrame) -> None:
    """Among open-loop cells (a knee's ceiling beside its rates, or `--rate` beside a closed loop compared), a
    closed-loop cell's findings say so: the rules name a cell by schema.cell_phrase, which without a rate reads as
    any cell ('uvicorn_httptools at 10 connections' → '..., closed loop')."""
    open_ = schema.at_rate(cells)
    if not open_.any() or open_.all():
        return
    for a in found:
        if a.cell["connections"] is None or a.cell.get("rate"):
            continue
        # not where the phrase begins an open-loop cell's ('... at 10 connections, at 2,000/s')
        plain = re.compile(re.escape(schema.cell_phrase(a.cell)) + r"(?!, at \d)")
        said = schema.cell_phrase(a.cell, closed=True)
        a.title, a.explanation = plain.sub(said, a.title), plain.sub(said, a.explanation)


def consolidate(found: list[Anomaly]) -> list[Anomaly]:
    """Merge a consolidated rule's anomalies per rule and server (SERVER_KEYS): the most severe instance
    (then one with stacks, then the largest scale, then the highest rate) keeps its text; the other cells are
    listed."""
    groups: dict = {}
    for a in found:
        key = (a.id, *(a.cell[k] for k in schema.SERVER_KEYS)) if META[a.id].consolidate else id(a)
        groups.setdefault(key, []).append(a)
    out = []
    for same in groups.values():
        rep = min(same, key=lambda a: (SEVERITIES.index(a.severity), not a.evidence.get("stacks"),
                                       -(a.cell["connections"] or 0), a.cell["pipeline"] or 1,
                                       -(a.cell.get("rate") or 0)))
        out.append(also_at(rep, [a for a in same if a is not rep]))
    return out


ALSO_AT_IN_TITLE = 6  # the other cells a title names; the evidence names them all (a knee tries a dozen rates)


def also_at(rep: Anomaly, others: list[Anomaly]) -> Anomaly:
    """`rep`, its title and evidence naming the other cells the same finding covers ("also at 10, 100")."""
    cells = [a.cell for a in others if a.cell["connections"] is not None]
    if cells:
        labels = [schema.scale_phrase(c, rep.cell) for c in sorted(
            cells, key=lambda c: (c["pipeline"] or 1, c["connections"], c.get("rate") or 0))]
        rep.evidence["also at (connections ×in flight, rate)"] = ", ".join(labels)
        more = len(labels) - ALSO_AT_IN_TITLE
        shown = ", ".join(labels[:ALSO_AT_IN_TITLE]) + (f" and {more} more" if more > 0 else "")
        rep.title += f" (also at {shown})"
    return rep


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    return v
