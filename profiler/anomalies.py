"""Anomaly rules: each one looks at the measured cells and, when something is off, says what it is,
why it happens and which numbers (and stacks, and source lines) prove it.

A rule is a small function registered with `@rule(id)`; it receives a `Context` (the per-cell table,
the raw rows, per-connection counts, meta, stacks) and returns `Anomaly` objects. Every threshold
lives in `Thresholds` below, so tuning happens in one place. `detect()` runs them all and returns
plain dicts (the JSON summary's `anomalies`), most severe first.
"""

from __future__ import annotations

import functools
import inspect
import math
import platform
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from netprof.profiler import results, schema, stats, units
from netprof.profiler.stats import num, syscalls_of


@dataclass(frozen=True)
class Thresholds:
    # starvation: fair service gives Jain ≈ 1 and active_share ≈ 0.95
    starvation_jain: float = 0.8            # fair service measures 0.97–1.00 here, starved 0.5 and below
    starvation_active_share: float = 0.5
    starvation_min_connections: int = 4      # below this, shares are too coarse to judge
    starvation_idle_share: float = 0.05      # connections that got no message at all in the window
    # eager read: epoll_ctl/msg below this fraction of what register-per-read implies
    eager_read_fraction: float = 0.25
    sock_recv_model_epoll_ctl: float = 2.0   # add_reader + remove_reader around every waiting read
    # readiness churn: register/unregister per read
    readiness_churn_epoll_ctl: float = 1.5
    poll_handle_epoll_ctl: float = 4.5       # uvloop: a libuv poll handle made and closed per read (6 epoll_ctl)
    # allocator churn: mmap + munmap + mremap + brk per message
    mmap_churn: float = 0.5
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
    # throughput collapse as connections grow
    collapse_drop: float = 0.5               # msgs/s falls below (1 - drop) × peak
    # noisy cells
    noisy_cv: float = stats.NOISY_CV
    noisy_cv_warning: float = 0.25
    # machine busy: a round this far below its cell's best round, neither backend nor loader busy
    machine_busy_drop: float = 0.15
    machine_busy_core: float = 0.9           # "busy": this share of a core (backend) / of its CPUs (loader)
    # connections lost (reset, timed out, refused) in a round that otherwise succeeded
    connection_errors_min: int = 1           # lost connections in one round that raise the anomaly
    connection_errors_critical: float = 0.01  # share of a round's connections lost: critical above
    # --sockwait (probes/sockwait.py): where each message waited
    wait_starvation_ratio: float = 100.0     # least-served tenth's median wait ÷ the most-served tenth's
    hol_min_handler_us: float = 200.0        # a handler this long is the application's work, not loop overhead
    hol_wait_handler_ratio: float = 3.0      # median queue wait ≥ this × median handler time
    # ... and handlers ran one after another: requests in a handler at once (Little's law: msgs/s × mean
    # handler time) at most this. Far above it the "handler" time is the loop's turn coming round
    # between a read and its answer (uvloop_sock at 8 in flight: 50 at once), not work that blocks.
    hol_max_overlap: float = 2.0
    busy_wait_p50_us: float = 1000.0         # "loop busy elsewhere": median queue wait at least this ...
    busy_wait_handler_ratio: float = 10.0    # ... and this × the median handler time
    busy_beyond_round: float = 3.0           # mean wait ≥ this × one round of the other messages: stalls


THRESHOLDS = Thresholds()
SEVERITIES = ("critical", "warning", "info")
MEMORY_SYSCALLS = ("mmap", "munmap", "mremap", "brk")
READ_SYSCALLS = ("recvfrom", "read", "recvmsg", "readv", "recvmmsg")


@dataclass
class Anomaly:
    id: str
    backend: str
    connections: int | None  # None: about the backend as a whole (evidence lists the counts)
    severity: str
    title: str
    explanation: str
    evidence: dict = field(default_factory=dict)
    pipeline: int | None = None
    interpreter: str | None = None
    framing: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def r2(v: float | None, digits: int = 2):
    return None if v is None else round(v, digits)


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


def _anomaly(row, id: str, severity: str, title: str, explanation: str, evidence: dict) -> Anomaly:
    return Anomaly(id=id, backend=str(row["backend"]), connections=int(row["connections"]), severity=severity,
                   title=title, explanation=explanation,
                   evidence={k: v for k, v in evidence.items() if v not in (None, [], {})},
                   pipeline=int(row.get("pipeline", 1) or 1), interpreter=row.get("interpreter"),
                   framing=row.get("framing"))


def where(row) -> str:
    """'asyncio_sock at 100 connections, 8 in flight (message framing)'."""
    pipe = f", {int(row['pipeline'])} in flight" if (row.get("pipeline") or 1) > 1 else ""
    framing = schema.BY_NAME["framing"].text(row.get("framing") or "own")
    framing = f" ({framing})" if framing else ""
    return f"{row['backend']} at {int(row['connections'])} connections{pipe}{framing}"


# ---------------------------------------------------------------------------------------------
# Source locations quoted as evidence (read from the stdlib of the interpreter running the report).

@functools.cache
def source_line(obj_path: str, needle: str) -> str | None:
    """'asyncio/selector_events.py:368' for the first line containing `needle` in `obj_path`
    ('module:Class.attr'), from this interpreter's stdlib; None when it is not there."""
    import importlib

    mod_name, _, attr = obj_path.partition(":")
    try:
        obj = importlib.import_module(mod_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        lines, start = inspect.getsourcelines(obj)
    except (ImportError, AttributeError, OSError, TypeError):
        return None
    start = max(start, 1)
    for i, line in enumerate(lines):
        if needle in line:
            return f"{mod_name.replace('.', '/')}.py:{start + i} (CPython {platform.python_version()}): {line.strip()}"
    return None


@functools.cache
def package_line(package: str, file: str, needle: str, after: str = "") -> str | None:
    """'uvloop/loop.pyx:805 (uvloop 0.23.0): poll._close()': the first line containing `needle` (past
    the first line containing `after`) in a file an installed package ships (uvloop ships its .pyx);
    None when it is not there."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
        roots = list(spec.submodule_search_locations or []) if spec else []
        lines = (Path(roots[0]) / file).read_text().splitlines() if roots else []
        version = importlib.metadata.version(package)
    except (ImportError, ValueError, OSError, importlib.metadata.PackageNotFoundError):
        return None
    start = next((i for i, line in enumerate(lines) if after in line), 0) if after else 0
    for i in range(start, len(lines)):
        if needle in lines[i]:
            return f"{package}/{file}:{i + 1} ({package} {version}): {lines[i].strip()}"
    return None


# ---------------------------------------------------------------------------------------------
# Registry

Rule = Callable[[Context], list[Anomaly]]
RULES: dict[str, Rule] = {}


def rule(id: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[id] = fn
        return fn
    return register


def _count(v: float) -> str:
    """A count that may be the mean of a cell's rounds: '40', or '0.3'."""
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def unanswered(r) -> tuple[dict, str]:
    """The requests the loader left waiting at the window's end, older than any it measured (the row's
    `unanswered` group), as evidence and a sentence; empty when there were none (or an older loader)."""
    n = num(r, "unanswered.count")
    if not n:
        return {}, ""
    requests, conns = _count(n), _count(num(r, "unanswered.connections") or 0)
    oldest = units.duration_us(num(r, "unanswered.max_age_us"))
    text = (f"At the window's end {requests} requests on {conns} connections were still unanswered, the oldest "
            f"for {oldest}, longer than any request the window measured: they are missing from its latency "
            "figures, so the real tail is longer (a load generator that waits for them, like wrk, reports a "
            "higher p99). ")
    ev = {"still unanswered at the window's end": f"{requests} on {conns} connections, the oldest waiting {oldest}"}
    return ev, text


# 1 -------------------------------------------------------------------------------------------
@rule("starvation")
def starvation(ctx: Context) -> list[Anomaly]:
    """A few connections got most of the messages (Jain index or active share far below fair).

    When epoll_ctl per message is far below what register-per-read implies, the reads took the
    eager path: `sock_recv` returned data that was already there without yielding to the loop."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        jain, share = num(r, "per_conn.jain"), num(r, "per_conn.active_share")
        idle = num(r, "per_conn.idle")
        if r["connections"] < t.starvation_min_connections or (jain is None and share is None):
            continue
        skewed = ((jain is not None and jain < t.starvation_jain)
                  or (share is not None and share < t.starvation_active_share))
        idle_share = (idle or 0) / r["connections"]
        if not skewed and idle_share < t.starvation_idle_share:
            continue
        n = int(r["connections"])
        ev = {"Jain index (1 = fair)": r2(jain), "share of connections that handled 95% of messages": r2(share),
              "connections serving 95% of messages": None if share is None else f"{round(share * n)} of {n}",
              "messages per connection min / p5 / p50 / p95 / max": " / ".join(
                  f"{num(r, 'per_conn.' + k) or 0:.0f}" for k in ("min", "p5", "p50", "p95", "max")),
              "idle connections": None if idle is None else int(idle)}
        counts = ctx.conn_counts(r)
        if counts is not None and counts.sum() > 0:
            ranked = np.sort(counts)[::-1]
            k = max(1, len(ranked) // 100)
            ev["top 1% of connections got"] = f"{100 * ranked[:k].sum() / ranked.sum():.0f}% of messages"
        p50, top = num(r, "per_conn.p50"), num(r, "per_conn.max")
        if share is not None and share < t.starvation_active_share:
            how = f"{ev['connections serving 95% of messages']} connections handled 95% of the messages"
        elif not skewed:
            how = (f"{int(idle or 0)} of {n} connections ({100 * idle_share:.0f}%) exchanged no message at all in the "
                   "measurement window while the others were served")
        elif p50 and top:
            how = (f"its busiest connection exchanged {top / p50:.0f}× the messages of the median one "
                   f"({top:.0f} vs {p50:.0f})")
        else:
            how = "a few connections got most of the service"
        text = f"{where(r)} served its connections very unevenly: {how}"
        text += f" (Jain {jain:.2f}; fair is ≈1). " if jain is not None else ". "
        text += eager_read_explanation(ctx, r, ev)
        waiting_ev, waiting = unanswered(r)
        ev.update(waiting_ev)
        text += waiting
        text += ("Its throughput figure therefore measures the favoured connections, not fair service: "
                 "judge this cell by its per-connection distribution, not its msgs/s.")
        found.append(_anomaly(r, "starvation", "critical" if skewed else "warning",
                              f"Connection starvation: {where(r)}", text, ev))
    return found


def eager_read_explanation(ctx: Context, r, ev: dict) -> str:
    """Why reads did not yield, when epoll_ctl/msg says they registered far less than the model implies:
    the numbers, the code path, the contrast with the same backend under strict ping-pong and under
    stream framing, and the stacks (or which view would show them)."""
    per = syscalls_of(r)
    if per is None:
        return "(No syscall counts for this cell: run with probes to see whether reads skipped the event loop.) "
    ec = per.get("epoll_ctl", 0.0)
    reads = sum(per.get(name, 0.0) for name in READ_SYSCALLS)
    same_backend = ctx.cells[(ctx.cells["backend"] == r["backend"])]
    elsewhere = [v for v in same_backend.get("syscalls_per_msg.epoll_ctl", pd.Series(dtype=float)).dropna()]
    implied = max(elsewhere, default=0.0)
    if implied < ctx.t.readiness_churn_epoll_ctl:
        family = str(r.get("family", "") or "")
        implied = ctx.t.sock_recv_model_epoll_ctl if "sock" in f"{r['backend']} {family}" else 0.0
    ev["epoll_ctl per message"] = r2(ec, 3)
    ev["read syscalls per message"] = r2(reads, 2)
    if not implied or ec >= implied * ctx.t.eager_read_fraction:
        return ""
    ev["epoll_ctl per message the register-per-read model implies"] = r2(implied, 1)
    ev["source"] = source_line("asyncio.selector_events:BaseSelectorEventLoop.sock_recv", "return sock.recv(")
    ev["mechanism"] = (f"{r['backend']}'s reads found their data already waiting and returned without yielding to the "
                       "event loop (asyncio's `sock_recv` tries `sock.recv()` first), so the coroutine that has data "
                       "keeps the loop while the other connections wait.")
    text = (f"Its reads almost never went through the event loop: {reads:.2f} read calls and {ec:.2f} epoll_ctl per "
            f"message, where registering for readiness around each read implies {implied:.1f} epoll_ctl. This is the "
            "eager-read path of asyncio's `sock_recv` (asyncio/selector_events.py): it first calls `sock.recv(n)` and, "
            "when data is already there, returns it at once — the coroutine continues without yielding to the event "
            "loop, so the connection that has data keeps the loop and the others wait. ")
    if (r.get("pipeline") or 1) > 1:
        text += (f"With {int(r['pipeline'])} messages in flight per connection the next message is almost always "
                 "already waiting: that is the trigger. ")
        fair = ctx.same_cell(r, pipeline=1)
        if not fair.empty and (j := num(fair.iloc[0], "per_conn.jain")) is not None:
            ev["Jain index of the same backend at pipeline 1"] = r2(j)
            if j >= ctx.t.starvation_jain:
                text += f"Under strict ping-pong (pipeline 1) the same backend was fair (Jain {j:.2f}). "
    if r.get("framing") == "message":
        text += ("Each receive asks for one message (`--framing message`, as network_ping_test does), so a "
                 "connection with several queued messages stays readable after every read. ")
        stream = ctx.same_cell(r, framing="stream")
        if not stream.empty and (j := num(stream.iloc[0], "per_conn.jain")) is not None:
            ev["Jain index of the same cell with stream framing"] = r2(j)
            text += (f"With `--framing stream` (one 64 KiB read drains every queued message) the same cell had "
                     f"Jain {j:.2f}. ")
    stacks = ctx.stacks(r, READ_SYSCALLS + ("epoll_ctl",))
    if stacks and any(f not in ("[unknown]", "") for s in stacks for f in s["frames"]):
        ev["stacks"] = stacks
    else:
        ev["where to see the Python frames"] = (
            "this interpreter's stacks have no frame pointers, so the evidence set cannot name Python callers"
            if stacks else "no stacks were collected (`--stacks`)") + (
            "; `--python 3.13 --flamegraph` adds the mixed Python→kernel view, which shows "
            "`sock_recv` → `__libc_recv` → `__x64_sys_recvfrom`")
    return text


# 2 -------------------------------------------------------------------------------------------
@rule("readiness_churn")
def readiness_churn(ctx: Context) -> list[Anomaly]:
    """epoll_ctl ≳ 1.5 per message: the socket is registered and unregistered around every read."""
    found = []
    for _, r in ctx.cells.iterrows():
        per = syscalls_of(r)
        ec = (per or {}).get("epoll_ctl", 0.0)
        if per is None or ec < ctx.t.readiness_churn_epoll_ctl:
            continue
        total = sum(per.values())
        reads = sum(per.get(k, 0.0) for k in READ_SYSCALLS)
        ev = {"epoll_ctl per message": r2(ec), "epoll_ctl per read": r2(ec / reads) if reads else None,
              "syscalls per message (all)": r2(total),
              "share of syscalls that are epoll_ctl": f"{100 * ec / total:.0f}%"}
        per_read = f" ({ec / reads:.1f} per read)" if reads else ""
        text = (f"{where(r)} calls epoll_ctl {ec:.1f} times per message{per_read}, {100 * ec / total:.0f}% of all its "
                "syscalls: it changes the socket's epoll registration around reads — register before a read that "
                "must wait, unregister after (`add_reader` → wait → `remove_reader`, the `sock_recv` model). "
                "Backends that keep a socket registered for its whole life (transports/protocols) pay this once "
                "per connection. ")
        if reads and ec / reads >= ctx.t.poll_handle_epoll_ctl and "uvloop" in f"{r['backend']} {r.get('family')}":
            text += UVLOOP_POLL_HANDLE
            ev["each read, call by call (uvloop on libuv)"] = UVLOOP_CALLS
            ev["ioctl per message (FIONBIO from uv_poll_init)"] = r2(per.get("ioctl"))
            ev["source"] = "; ".join(filter(None, (
                package_line("uvloop", "loop.pyx", "self._add_reader(sock, handle)", after="async def sock_recv("),
                package_line("uvloop", "loop.pyx", "poll._close()", after="cdef _remove_reader"),
                package_line("uvloop", "handles/poll.pyx", "system.EPOLL_CTL_DEL")))) or None
        peers = ctx.same_cell(r, backend=None)
        calm = [p for _, p in peers.iterrows() if p["backend"] != r["backend"] and (ps := syscalls_of(p)) is not None
                and ps.get("epoll_ctl", 0.0) < ctx.t.readiness_churn_epoll_ctl]
        if calm:  # the fastest backend here that does not churn: what the registration costs
            best = max(calm, key=lambda p: p["mps_mean"])
            best_per = syscalls_of(best)
            assert best_per is not None  # every cell in `calm` has syscall counts
            bec = best_per.get("epoll_ctl", 0.0)
            ev[f"{best['backend']} (fastest backend here without the churn)"] = (
                f"{best['mps_mean']:.0f} msgs/s, {bec:.2f} epoll_ctl per message")
            text += f"Here {best['backend']} makes {bec:.2f} epoll_ctl per message at {best['mps_mean']:.0f} msgs/s."
        ev["stacks"] = ctx.stacks(r, ("epoll_ctl",))
        found.append(_anomaly(r, "readiness_churn", "warning", f"epoll_ctl churn: {where(r)}", text, ev))
    return found


# Traced on uvloop 0.23 (bpftrace, epoll_ctl op and return value per call, one connection): the
# sequence below repeats for every message; the registration that waits goes through io_uring.
UVLOOP_POLL_HANDLE = (
    "On uvloop the count is 6 per read, not 2: `loop.sock_recv` never tries the read first, it registers a reader "
    "at once (`_add_reader`), and the reader is a libuv poll handle made for this one read and closed after it "
    "(`_remove_reader` → `poll._close()`). Each read therefore costs: `uv_poll_init` checking that the socket can "
    "be polled — epoll_ctl ADD then DEL (and an ioctl FIONBIO, the 1 ioctl per message); `uv_poll_start` first "
    "stopping the fresh handle — DEL, fails with ENOENT; the registration that actually waits, submitted through "
    "io_uring (not an epoll_ctl call); after the read `uv_poll_stop` — DEL; uvloop's own DEL right after it "
    "(its workaround for uvloop issue 61) — ENOENT; and `uv_close` stopping the handle again — DEL, ENOENT. "
    "So 1 ADD and 5 DEL per message, 3 of them failing: pure overhead of building a handle per read. uvloop's "
    "streams and protocols (`uvloop`, `uvloop_proto`) keep one libuv handle per connection and make none of these "
    "calls per message. ")
UVLOOP_CALLS = ("ADD + DEL (uv_poll_init checks the fd), DEL → ENOENT (uv_poll_start), [ADD via io_uring: the wait], "
                "DEL (uv_poll_stop), DEL → ENOENT (uvloop's own, issue 61), DEL → ENOENT (uv_close)")


# 3 -------------------------------------------------------------------------------------------
@rule("mmap_churn")
def mmap_churn(ctx: Context) -> list[Anomaly]:
    """mmap + munmap + mremap + brk ≳ 0.5 per message: the allocator goes to the kernel per message."""
    found = []
    for _, r in ctx.cells.iterrows():
        per = syscalls_of(r) or {}
        mem = {k: per.get(k, 0.0) for k in MEMORY_SYSCALLS}
        total = sum(mem.values())
        if total < ctx.t.mmap_churn:
            continue
        ev = {f"{k} per message": r2(v) for k, v in mem.items() if v}
        ev["minor page faults per message"] = r2(num(r, "faults.minor_per_msg"))
        stacks = ctx.stacks(r, MEMORY_SYSCALLS)
        ev["stacks"] = stacks
        text = (f"{where(r)} makes {total:.1f} memory-mapping syscalls per message "
                f"({' + '.join(f'{v:.2f} {k}' for k, v in mem.items() if v)}): the allocator asks the kernel for "
                "memory and gives it back for every message, and each fresh mapping costs page faults too. ")
        triple = all(mem[k] >= 0.3 for k in ("mmap", "mremap", "munmap"))
        if triple:
            ev["source"] = "; ".join(filter(None, (
                source_line("asyncio.selector_events:_SelectorTransport", "max_size ="),
                source_line("asyncio.selector_events:_SelectorSocketTransport._read_ready__data_received",
                            "recv(self.max_size)")))) or None
            text += ("The mmap + mremap + munmap triple is the signature of a receive buffer larger than glibc's mmap "
                     "threshold (128 KiB) that is shrunk and then freed: asyncio's socket transport reads with "
                     "`sock.recv(self.max_size)` where `max_size = 256 * 1024`, so each read allocates a 256 KiB bytes "
                     "object (mmap), shrinks it to the bytes actually received (mremap) and frees it (munmap). "
                     "This is a fresh process's cost: glibc raises its mmap threshold the first time a large "
                     "mmapped block is freed (a connection closing can do it), after which these buffers come from "
                     "the heap with no syscall — measured on http_asyncio, the same process served 28k requests/s "
                     "on its first 100 connections and 68k on the next 100 (bench/RESULTS.md). netprof starts a "
                     "fresh backend per cell; a long-running server may be past it (or fix the threshold with "
                     "MALLOC_MMAP_THRESHOLD_). ")
        if stacks:
            frames = " → ".join(reversed(stacks[0]["frames"][:4]))
            text += f"Top {stacks[0]['syscall']} stack: {frames}."
        else:
            text += "Run with --stacks to see which code path allocates."
        found.append(_anomaly(r, "mmap_churn", "warning", f"Memory-mapping churn: {where(r)}", text, ev))
    return found


# 4 -------------------------------------------------------------------------------------------
@rule("lock_contention")
def lock_contention(ctx: Context) -> list[Anomaly]:
    """futex ≳ 1 per message, or many involuntary switches / migrations: threads fight for a lock
    (the GIL) or for the CPU. Compares pinned and unpinned cells when the data has both."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        fx = (syscalls_of(r) or {}).get("futex", 0.0)
        inv, mig = num(r, "ctx.involuntary_per_msg"), num(r, "ctx.migrations_per_msg")
        signs = []
        if fx >= t.futex_per_msg:
            signs.append(f"{fx:.1f} futex calls per message")
        if inv is not None and inv >= t.involuntary_per_msg:
            signs.append(f"{inv:.2f} involuntary context switches per message")
        if mig is not None and mig >= t.migrations_per_msg:
            signs.append(f"{mig:.2f} CPU migrations per message")
        if not signs:
            continue
        ev = {"futex per message": r2(fx), "involuntary switches per message": r2(inv),
              "voluntary switches per message": r2(num(r, "ctx.voluntary_per_msg")),
              "migrations per message": r2(mig, 3), "pinned": bool(r.get("pinned"))}
        text = (f"{where(r)} shows {', '.join(signs)}. Each futex call is a wait or a wake on a contended lock — for "
                "Python threads, usually the GIL being handed between threads — and each involuntary switch or "
                "migration throws away a warm cache. ")
        other = ctx.same_cell(r, pinned=not bool(r.get("pinned")))
        if not other.empty:
            o = other.iloc[0]
            ofx = (syscalls_of(o) or {}).get("futex", 0.0)
            label = "not pinned" if r.get("pinned") else "pinned"
            ev[f"same cell {label}"] = f"{o['mps_mean']:.0f} msgs/s, {ofx:.2f} futex per message"
            ev["this cell"] = f"{r['mps_mean']:.0f} msgs/s"
            text += (f"The same cell {label}: {ofx:.2f} futex per message at {o['mps_mean']:.0f} msgs/s "
                     f"(here {fx:.2f} at {r['mps_mean']:.0f}). ")
        elif not r.get("pinned"):
            text += ("This run was not pinned to one CPU; network_ping_test saw 15 futex per message drop to 0.01 once "
                     "the backend was pinned (taskset). Re-run pinned (the default) to compare. ")
        ev["stacks"] = ctx.stacks(r, ("futex",))
        sev = "critical" if fx >= t.futex_critical else "warning"
        found.append(_anomaly(r, "lock_contention", sev, f"Lock/CPU contention: {where(r)}", text, ev))
    return found


# 5 -------------------------------------------------------------------------------------------
@rule("cpu_split")
def cpu_split(ctx: Context) -> list[Anomaly]:
    """Kernel- or user-dominated backend CPU (informational), one note per backend."""
    t, found = ctx.t, []
    if "cpu.user_frac" not in ctx.cells:
        return []
    for (backend, _interp), g in ctx.cells.groupby(["backend", "interpreter"], dropna=False):
        uf = g["cpu.user_frac"].dropna()
        if uf.empty:
            continue
        u = float(uf.mean())
        if t.kernel_dominated_user_frac <= u < t.user_dominated_user_frac:
            continue
        user_us = g.get("cpu_us_per_msg.user", pd.Series(dtype=float)).mean()
        sys_us = g.get("cpu_us_per_msg.sys", pd.Series(dtype=float)).mean()
        # The card speaks for all of the backend's cells: its figures are their mean, said so, and each cell's own.
        mean_of = f"mean of its {len(g)} cells" if len(g) > 1 else schema.cell_label(g.iloc[0])
        ev = {f"user share of backend CPU ({mean_of})": f"{100 * u:.0f}%",
              f"CPU per message, user / kernel ({mean_of})":
                  None if math.isnan(user_us) else f"{user_us:.1f} / {sys_us:.1f} µs",
              f"backend busy, share of one CPU ({mean_of})":
                  r2(g["cpu.busy_frac"].mean()) if "cpu.busy_frac" in g else None}
        if len(g) > 1 and not math.isnan(user_us):
            dims = [k for k in schema.varying(g) if k != "backend"]
            ev["CPU per message, user / kernel, each cell"] = "; ".join(
                f"{schema.cell_label(r, dims)}: {num(r, 'cpu_us_per_msg.user') or 0:.1f} / "
                f"{num(r, 'cpu_us_per_msg.sys') or 0:.1f} µs" for _, r in g.iterrows())
        per = [syscalls_of(r) for _, r in g.iterrows()]
        totals = [sum(p.values()) for p in per if p]
        if totals:
            ev[f"syscalls per message ({mean_of})"] = r2(float(np.mean(totals)))
        if u < t.kernel_dominated_user_frac:
            title = f"Kernel-dominated CPU: {backend}"
            text = (f"{backend} spends {100 * (1 - u):.0f}% of its CPU in the kernel (TCP stack and syscalls). Its "
                    "cost per message is set by how many syscalls it makes and how much the socket layer does per "
                    "call, so fewer syscalls per message (batching, larger reads) help more than faster Python would.")
        else:
            title = f"User-dominated CPU: {backend}"
            text = (f"{backend} spends {100 * u:.0f}% of its CPU in user space (interpreter, event loop, handler). "
                    "The kernel is not its bottleneck: less Python per message — a leaner loop (uvloop, protocols "
                    "instead of streams) or native code — is what would make it faster.")
        first = g.iloc[0]
        ev["connection counts"] = ", ".join(str(int(c)) for c in sorted(g["connections"].unique()))
        found.append(Anomaly("cpu_split", str(backend), None, "info",
                             title, text, {k: v for k, v in ev.items() if v is not None},
                             pipeline=None, interpreter=first.get("interpreter")))
    return found


# 6 -------------------------------------------------------------------------------------------
@rule("loader_bottleneck")
def loader_bottleneck(ctx: Context) -> list[Anomaly]:
    """The loader used ≳ 90% of its CPU: the figures are capped by the instrument, not the backend."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        lf = num(r, "loader_cpu.cpu_frac")
        if lf is None or lf < t.loader_saturated:
            continue
        busy = num(r, "cpu.busy_frac")
        ev = {"loader CPU (share of its CPUs)": r2(lf), "backend busy (share of one CPU)": r2(busy),
              "loader CPUs": ",".join(map(str, ctx.meta.get("pinning", {}).get("loader_cpus", []) or [])) or None}
        text = (f"The loader ran at {100 * lf:.0f}% of its CPU while measuring {where(r)}: the load generator, not "
                "the backend, may have set the pace, so this msgs/s is a lower bound of what the backend can do. ")
        sev = "warning"
        if busy is not None and busy < t.backend_idle_busy_frac:
            sev = "critical"
            text += (f"The backend was busy only {100 * busy:.0f}% of one CPU, so it was waiting for the loader. ")
        text += "Give the loader more CPUs or threads, or compare backends at a scale where it is not saturated."
        found.append(_anomaly(r, "loader_bottleneck", sev, f"Loader saturated: {where(r)}", text, ev))
    return found


# 7 -------------------------------------------------------------------------------------------
@rule("latency_tail")
def latency_tail(ctx: Context) -> list[Anomaly]:
    """p999 far above p50 (> 20×): some messages wait much longer than the typical one."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        p50, p999 = num(r, "lat_us.p50"), num(r, "lat_us.p999")
        if not p50 or p999 is None or p999 / p50 <= t.tail_ratio:
            continue
        ratio = p999 / p50
        ev = {f"latency {p} (µs)": r2(num(r, f"lat_us.{p}"), 0) for p in ("p50", "p90", "p99", "p999", "max")}
        ev["p999 / p50"] = r2(ratio, 1)
        text = (f"For {where(r)}, one message in a thousand took {ratio:.0f}× the median "
                f"({units.duration_us(p999)} vs {units.duration_us(p50)}). ")
        waiting_ev, waiting = unanswered(r)
        ev.update(waiting_ev)
        text += waiting
        causes = []
        jain = num(r, "per_conn.jain")
        idle = num(r, "per_conn.idle") or 0
        if jain is not None and jain < t.starvation_jain:
            causes.append(f"connections are starved (Jain {jain:.2f}): the waiting ones make the tail")
        elif idle / r["connections"] >= t.starvation_idle_share:
            causes.append(f"{int(idle)} connections got no service in the window: their messages make the tail")
        inv = num(r, "ctx.involuntary_per_msg")
        if inv is not None and inv >= t.involuntary_per_msg:
            causes.append(f"the backend is preempted {inv:.2f}× per message")
        if (r.get("pipeline") or 1) > 1:
            causes.append("messages queue behind others in flight on the same connection")
        text += ("Likely cause here: " + "; ".join(causes) + ". ") if causes else (
            "Nothing else in this cell explains it: suspect pauses (GC, allocator, a slow handler) or the noisy "
            "machine; compare with the flamegraph's off-CPU view. ")
        sev = "warning" if ratio > 5 * t.tail_ratio or causes else "info"
        found.append(_anomaly(r, "latency_tail", sev, f"Latency tail {ratio:.0f}× the median: {where(r)}", text, ev))
    return found


# 8 -------------------------------------------------------------------------------------------
@rule("throughput_collapse")
def throughput_collapse(ctx: Context) -> list[Anomaly]:
    """msgs/s falls by more than half from the backend's peak as connections grow; says what grew per message."""
    t, found = ctx.t, []
    if ctx.cells.empty:
        return []
    for _, g in ctx.cells.groupby(schema.SERIES_KEYS, dropna=False):
        g = g.sort_values("connections")
        if len(g) < 2:
            continue
        ipeak = g["mps_mean"].idxmax()
        peak = g.loc[ipeak]
        later = g[g["connections"] > peak["connections"]]
        if later.empty:
            continue
        low = later.loc[later["mps_mean"].idxmin()]
        if low["mps_mean"] >= (1 - t.collapse_drop) * peak["mps_mean"]:
            continue
        drop = 1 - low["mps_mean"] / peak["mps_mean"]
        ev = {f"msgs/s at {int(c)} connections": round(float(m)) for c, m in zip(g["connections"], g["mps_mean"])}
        text = (f"{low['backend']} falls from {peak['mps_mean']:.0f} msgs/s at {int(peak['connections'])} connections "
                f"to {low['mps_mean']:.0f} at {int(low['connections'])} (−{100 * drop:.0f}%). ")
        text += _what_grew(peak, low, ev)
        found.append(_anomaly(low, "throughput_collapse", "warning",
                              f"Throughput collapses with connections: {low['backend']} −{100 * drop:.0f}%", text, ev))
    return found


def _what_grew(a, b, ev: dict) -> str:
    """Per-message costs at the peak cell `a` vs the collapsed cell `b`: the reasons in numbers."""
    ca, cb = int(a["connections"]), int(b["connections"])
    parts = []
    ua, sa, ub, sb = (num(a, "cpu_us_per_msg.user"), num(a, "cpu_us_per_msg.sys"),
                      num(b, "cpu_us_per_msg.user"), num(b, "cpu_us_per_msg.sys"))
    if ua is not None and sa is not None and ub is not None and sb is not None:
        ev[f"CPU µs per message user+kernel at {ca} / {cb}"] = f"{ua:.1f}+{sa:.1f} / {ub:.1f}+{sb:.1f}"
        grew = "kernel" if (sb - sa) > (ub - ua) else "user space"
        parts.append(f"each message costs {ua + sa:.1f} µs of CPU at {ca} and {ub + sb:.1f} µs at {cb}, "
                     f"the growth mostly in {grew}")
    pa, pb = syscalls_of(a), syscalls_of(b)
    if pa and pb:
        ta, tb = sum(pa.values()), sum(pb.values())
        ev[f"syscalls per message at {ca} / {cb}"] = f"{ta:.2f} / {tb:.2f}"
        if tb > ta * 1.2:
            top = max(pb, key=lambda k: pb[k] - pa.get(k, 0.0))
            parts.append(f"syscalls per message grow from {ta:.2f} to {tb:.2f} (most: {top})")
    ba, bb = num(a, "cpu.busy_frac"), num(b, "cpu.busy_frac")
    if ba is not None and bb is not None:
        ev[f"backend busy at {ca} / {cb}"] = f"{ba:.2f} / {bb:.2f}"
        if bb < 0.8 * ba:
            parts.append(f"the backend is busy only {100 * bb:.0f}% of a CPU at {cb} (vs {100 * ba:.0f}%): it waits "
                         "rather than works — look at the loader and the latency tail")
    return (("Why: " + "; ".join(parts) + ". ") if parts
            else "No per-message cost figures to say why (run with probes). ")


# 9 -------------------------------------------------------------------------------------------
@rule("noisy")
def noisy(ctx: Context) -> list[Anomaly]:
    """Rounds disagree: coefficient of variation of msgs/s across rounds above 10%."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        cv, n = num(r, "mps_cv"), num(r, "mps_n") or 0
        if n < 2 or cv is None or cv <= t.noisy_cv:
            continue
        rounds = _rounds_of(ctx.df, r)
        ev = {"coefficient of variation": f"{100 * cv:.0f}%", "rounds": int(n),
              "msgs/s per round": ", ".join(f"{v:.0f}" for v in rounds) or None,
              "95% interval": f"±{num(r, 'mps_ci_pct') or float('nan'):.0f}%"}
        text = (f"The rounds of {where(r)} disagree by {100 * cv:.0f}% (CV): differences between backends smaller than "
                "its interval are not findings. This machine is noisy; run more rounds, or compare interleaved runs.")
        sev = "warning" if cv > t.noisy_cv_warning else "info"
        found.append(_anomaly(r, "noisy", sev, f"Noisy measurement: {where(r)}", text, ev))
    return found


@rule("machine_busy")
def machine_busy(ctx: Context) -> list[Anomaly]:
    """A round fell ≥ 15% below its cell's best round while neither the backend nor the loader was busy
    (> 0.9 of a core): what held it back was outside both — the machine (other processes, steal)."""
    t, found = ctx.t, []
    if "status" not in ctx.df or "msgs_per_sec" not in ctx.df:
        return []
    host = {(e.get("cell"), e.get("round")): e for e in ctx.meta.get("host_per_cell") or [] if isinstance(e, dict)}
    df = schema.normalize(ctx.df)
    df = df[df["status"] == "ok"]
    for _, g in df.groupby(schema.CELL_KEYS, dropna=False, sort=False):
        if len(g) < 2:
            continue
        best = g.loc[g["msgs_per_sec"].idxmax()]
        for _, r in g.iterrows():
            mps, top = float(r["msgs_per_sec"]), float(best["msgs_per_sec"])
            busy, lf = num(r, "cpu.busy_frac"), num(r, "loader_cpu.cpu_frac")
            if mps >= (1 - t.machine_busy_drop) * top or busy is None or lf is None:
                continue
            if busy > t.machine_busy_core or lf > t.machine_busy_core:
                continue  # one of them was saturated: it set the pace, the machine need not have
            rnd = int(r["round"])
            ev = {"msgs/s this round": round(mps), f"msgs/s best round ({int(best['round'])})": round(top),
                  "backend busy (share of one CPU)": r2(busy), "loader CPU (share of its CPUs)": r2(lf)}
            text = (f"Round {rnd} of {where(r)} made {mps:.0f} msgs/s, {100 * (1 - mps / top):.0f}% below its best "
                    f"round ({top:.0f}), while the backend used {100 * busy:.0f}% of a CPU and the loader "
                    f"{100 * lf:.0f}% of its CPUs: neither was the limit, so something outside them held the round "
                    "back. ")
            h = host.get((schema.cell_slug(r), rnd))
            if h:
                ev["1-min load average before / after the cell"] = (f"{h.get('loadavg_before')} / "
                                                                     f"{h.get('loadavg_after')}")
                if h.get("steal_frac") is not None:
                    ev["CPU time stolen by the hypervisor during the cell"] = f"{100 * h['steal_frac']:.1f}%"
                if h.get("busy_cpus") is not None:
                    ev["CPUs busy during the cell (all processes)"] = r2(h["busy_cpus"])
                    text += (f"During the cell the machine's CPUs were busy {h['busy_cpus']:.2f} on average (every "
                             f"process) and {100 * (h.get('steal_frac') or 0):.1f}% of CPU time was stolen. ")
            text += "Machine busy: this measurement is not trustworthy; re-run it on a quiet machine."
            found.append(_anomaly(r, "machine_busy", "warning",
                                  f"Machine busy: measurement not trustworthy: {where(r)}, round {rnd}", text, ev))
    return found


def _rounds_of(df: pd.DataFrame, r) -> list[float]:
    g = schema.select(schema.normalize(df), r)
    if "status" in g:
        g = g[g["status"] == "ok"]
    return [float(v) for v in g["msgs_per_sec"]]


# 10 ------------------------------------------------------------------------------------------
FAILURE_CAUSES = (  # (pattern in the error, cause, what it means)
    (r"when stopped with SIGTERM|of SIGTERM \(netprof had to|before netprof stopped it", "unclean stop",
     "did not exit 0 when netprof stopped it (SIGTERM): a backend must serve until told to stop, then exit 0 "
     "with nothing left behind."),
    (r"EMFILE|too many open files", "fd limit",
     "ran out of file descriptors: backend and loader each hold one per connection. Lower -c or raise `ulimit -n`."),
    (r"code -9\b|SIGKILL|killed", "killed",
     "was killed (SIGKILL) — on a run that grows memory with connections, usually the OOM killer."),
    (r"code -\d+|signal|segfault|SIGSEGV", "crash",
     "died from a signal: a crash in native code (the error shows which signal)."),
    (r"exited with code \d+", "exit",
     "exited by itself, usually an uncaught exception; its stderr is quoted in the error."),
    (r"stall", "stall",
     "stopped answering during the measurement: a deadlock, or a loop that never yields (network_ping_test's thread "
     "backend sometimes hung at 100% CPU)."),
    (r"connections could be opened|connect", "connection setup",
     "could not accept all connections: listen backlog, local ports or fds ran out during setup."),
    (r"timeout|timed out", "timeout", "did not finish in time."),
)


@rule("failed_cells")
def failed_cells(ctx: Context) -> list[Anomaly]:
    """Cells (network_ping_test's FF) whose rounds failed, with the cause read from the error."""
    df, found = ctx.df, []
    if "status" not in df or df.empty:
        return []
    df = schema.normalize(df)
    for _, all_rounds in df.groupby(schema.CELL_KEYS, dropna=False, sort=False):
        g = all_rounds[all_rounds["status"] != "ok"]
        if g.empty:
            continue
        r, total = g.iloc[0], len(all_rounds)
        error = str(r.get("error") or "unknown error")
        cause, meaning = "unknown", "failed; see the error."
        for pattern, c, m in FAILURE_CAUSES:
            if re.search(pattern, error, re.IGNORECASE):
                cause, meaning = c, m
                break
        ev = {"cause": cause, "error": error[:400], "failed rounds": f"{len(g)} of {total}",
              "errors": sorted({str(e)[:120] for e in g["error"].dropna()})[:3] if g["error"].nunique() > 1 else None}
        text = f"{where(r)} failed (FF) in {len(g)} of {total} rounds: the backend {meaning}"
        found.append(_anomaly(r, "failed_cells", "critical", f"Failed ({cause}): {where(r)}", text, ev))
    return found


# 11 ------------------------------------------------------------------------------------------
CONNECTION_ERRORS = (  # (errors.* column, what the loader saw)
    ("reset", "reset or closed by the backend"),
    ("timeout", "never completed the handshake"),
    ("connect", "could not connect"),
)


@rule("connection_errors")
def connection_errors(ctx: Context) -> list[Anomaly]:
    """Connections reset, timed out or refused in rounds that otherwise succeeded (the loader's
    errors.reset/timeout/connect): the cell's figures cover fewer connections than it asked for."""
    t, found = ctx.t, []
    kinds = [k for k, _ in CONNECTION_ERRORS if f"errors.{k}" in ctx.cells]
    if not kinds:
        return []
    df = schema.normalize(ctx.df)
    for _, r in ctx.cells.iterrows():
        rounds = schema.select(df, r)
        if "status" in rounds:
            rounds = rounds[rounds["status"] == "ok"]
        n = int(r["connections"])
        per_round = [(row.get("round"), {k: int(num(row, f"errors.{k}") or 0) for k in kinds})
                     for _, row in rounds.iterrows()]
        lost = [sum(counts.values()) for _, counts in per_round]
        if not lost or max(lost) < t.connection_errors_min:
            continue
        worst = max(lost)
        means = {k: num(r, f"errors.{k}") or 0.0 for k in kinds}
        what = dict(CONNECTION_ERRORS)
        ev = {f"{k} per round (mean): connections {what[k]}": r2(v) for k, v in means.items()}
        ev["per round (" + " / ".join(kinds) + ")"] = "; ".join(
            f"round {rnd}: " + " / ".join(str(c[k]) for k in kinds) for rnd, c in per_round)
        ev["rounds that lost connections"] = f"{sum(1 for x in lost if x)} of {len(lost)}"
        ev["worst round lost"] = f"{worst} of {n} connections ({100 * worst / n:.1f}%)"
        text = (f"{where(r)} lost connections in {ev['rounds that lost connections']} rounds: per round on average "
                + ", ".join(f"{means[k]:.1f} {what[k]}" for k in kinds)
                + f"; the worst round lost {worst} of {n} ({100 * worst / n:.1f}%). A reset means the backend "
                "closed or reset a connection during the run (a worker that died, a handler error, an overflowing "
                "queue); timeouts and connect failures mean connection setup did not keep up (listen backlog, "
                "ports, descriptors). The cell's figures cover only the connections that stayed up.")
        sev = "critical" if worst > t.connection_errors_critical * n else "warning"
        found.append(_anomaly(r, "connection_errors", sev, f"Connections lost: {where(r)}", text, ev))
    return found


# 12 ------------------------------------------------------------------------------------------
# --sockwait rules: the kernel's view of where each message waited (probes/sockwait.py). Figures are
# the cell's means over rounds of the probed sub-window (docs/results-format.md, `sockwait.*`).

def _waits(r) -> dict:
    return {k: num(r, f"sockwait.{k}") for k in (
        "wait_p50_us", "wait_p99_us", "wait_max_us", "wait_mean_us", "handler_p50_us", "handler_p99_us",
        "handler_mean_us", "conn_wait_least_us", "conn_wait_most_us", "conn_wait_ratio")}


def _wait_evidence(w: dict) -> dict:
    f = lambda v: "–" if v is None else f"{v:,.0f}"
    return {"queue wait p50 / p99 / max (µs)": f"{f(w['wait_p50_us'])} / {f(w['wait_p99_us'])} / {f(w['wait_max_us'])}",
            "handler time p50 / p99 (µs)": f"{f(w['handler_p50_us'])} / {f(w['handler_p99_us'])}"}


def _served(r) -> str | None:
    least, most = num(r, "sockwait.conn_bytes_least"), num(r, "sockwait.conn_bytes_most")
    return None if least is None or most is None else f"{least:,.0f} / {most:,.0f}"


def _in_flight(r) -> int:
    return int(r["connections"]) * int(r.get("pipeline") or 1)


@rule("wait_starvation")
def wait_starvation(ctx: Context) -> list[Anomaly]:
    """Long queue waits concentrated on few connections: the least-served tenth of the connections
    waited ≥ 100× (median of their p90 waits) what the most-served tenth waited — their data sat unread."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        w = _waits(r)
        ratio, least, most = w["conn_wait_ratio"], w["conn_wait_least_us"], w["conn_wait_most_us"]
        if ratio is None or least is None or most is None or ratio < t.wait_starvation_ratio \
                or r["connections"] < t.starvation_min_connections:
            continue
        ev = {"p90 wait, least-served 10% of connections (µs)": r2(least, 0),
              "p90 wait, most-served 10% of connections (µs)": r2(most, 1),
              "ratio": r2(ratio, 0), **_wait_evidence(w),
              "bytes read in the window, least / most-served 10% (median)": _served(r),
              "Jain index (1 = fair)": r2(num(r, "per_conn.jain"))}
        text = (f"In {where(r)} the kernel saw the queue waits fall on a few connections: the data of the least-served "
                f"tenth of the connections waited {least / 1e3:,.1f} ms unread in their socket queues (the slowest "
                f"tenth of each connection's reads), {ratio:,.0f}× the {most:,.1f} µs of the most-served tenth. "
                "Their messages had arrived; the server did not read them while it kept serving others. ")
        if w["handler_p50_us"] is not None:
            text += (f"Handlers took {w['handler_p50_us']:,.0f} µs (median), so the starved connections' time went to "
                     "other connections, not to their own work. ")
        text += "See the per-connection wait plot beside the message counts: the starved are the ones whose data waits."
        found.append(_anomaly(r, "wait_starvation", "critical", f"Waits concentrated on few connections: {where(r)}",
                              text, ev))
    return found


def _work_of(ctx: Context, r) -> str | None:
    rows = schema.select(schema.normalize(ctx.df), r)
    if "work" not in rows or rows.empty:
        return None
    work = str(rows["work"].iloc[0] or "none")
    return None if work == "none" else work


@rule("head_of_line")
def head_of_line(ctx: Context) -> list[Anomaly]:
    """Head-of-line blocking: each message waits unread for several handler times — one loop runs the
    slow handlers of the messages ahead of it one after another (`--work sleep:` on a single loop)."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        w = _waits(r)
        wait, handler = w["wait_p50_us"], w["handler_p50_us"]
        if wait is None or handler is None or handler < t.hol_min_handler_us \
                or wait < t.hol_wait_handler_ratio * handler or _in_flight(r) < 2:
            continue
        n = _in_flight(r)
        h_mean = w["handler_mean_us"] or handler
        overlap = (num(r, "mps_mean") or 0) * h_mean / 1e6
        if overlap > t.hol_max_overlap:
            continue
        ahead = (n - 1) * h_mean
        work = _work_of(ctx, r)
        ev = {**_wait_evidence(w), "median wait ÷ median handler": r2(wait / handler, 1),
              "messages in flight": n, "handlers ahead of a message if run one at a time (µs)": r2(ahead, 0),
              "requests in a handler at once (msgs/s × mean handler time)": r2(overlap, 2),
              "handler work per message (--work)": work}
        text = (f"In {where(r)} each message waited {wait / 1e3:,.1f} ms (median) unread in its socket queue while its "
                f"own handler took {handler / 1e3:,.2f} ms: {wait / handler:.0f} handler times. With {n} messages in "
                f"flight and handlers run one at a time, a message waits for the handlers of those ahead of it "
                f"(up to {n - 1} × {h_mean / 1e3:,.2f} ms ≈ {ahead / 1e3:,.1f} ms): head-of-line blocking — one slow "
                "handler holds up every other connection. ")
        if work and work.startswith(("sleep", "poisson-sleep")):
            text += (f"The handler's work here (`--work {work}`) waits rather than computes: a handler that awaits "
                     "(`await asyncio.sleep`, I/O) or runs in a thread lets the loop serve the others meanwhile.")
        else:
            text += "Make the handlers shorter, or let them yield or run elsewhere (threads, processes)."
        found.append(_anomaly(r, "head_of_line", "warning", f"Head-of-line blocking behind slow handlers: {where(r)}",
                              text, ev))
    return found


@rule("loop_busy_elsewhere")
def loop_busy_elsewhere(ctx: Context) -> list[Anomaly]:
    """Long queue waits with short handlers: the time a message waited was not its handlers' — the loop
    was busy with the other connections (info) or stalled beyond that (warning)."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        w = _waits(r)
        wait, handler, mean = w["wait_p50_us"], w["handler_p50_us"], w["wait_mean_us"]
        if wait is None or handler is None or mean is None or wait < t.busy_wait_p50_us \
                or handler >= t.hol_min_handler_us or wait < t.busy_wait_handler_ratio * handler:
            continue
        if (w["conn_wait_ratio"] or 0) >= t.wait_starvation_ratio:
            continue  # wait_starvation explains these waits
        n, rate = _in_flight(r), num(r, "mps_mean")
        loop_us = 1e6 / rate if rate else None
        round_us = (n - 1) * loop_us if loop_us else None
        ev = {**_wait_evidence(w), "mean queue wait (µs)": r2(mean, 0), "messages in flight": n,
              "server time per message at the measured rate (µs)": r2(loop_us, 1),
              "one round of the other messages (µs)": r2(round_us, 0)}
        text = (f"In {where(r)} messages waited {wait / 1e3:,.1f} ms (median) unread in their socket queues while a "
                f"handler took only {handler:,.0f} µs: the waiting was not spent on their own work. ")
        stalled = round_us is not None and mean >= t.busy_beyond_round * round_us
        if round_us is not None and loop_us is not None:
            ev["mean wait ÷ one round"] = r2(mean / round_us, 1)
            if stalled:
                text += (f"One round of the other {n - 1} messages at {loop_us:,.1f} µs each takes "
                         f"≈ {round_us / 1e3:,.2f} ms, yet the mean wait was {mean / round_us:.0f}× that: the loop "
                         "was busy elsewhere, beyond serving the others — blocking work outside the handlers, "
                         "pauses (garbage collection), or connections served out of turn. Look at the off-CPU "
                         "flamegraph and the latency tail.")
            else:
                text += (f"It is the loop's round over the other connections: {n - 1} other messages in flight at "
                         f"{loop_us:,.1f} µs of server time each ≈ {round_us / 1e3:,.2f} ms, what a message waited "
                         f"(mean {mean / 1e3:,.2f} ms). The loop is saturated: its per-message overhead, not handler "
                         "work, sets the latency — cut that overhead or spread connections over more processes.")
        found.append(_anomaly(r, "loop_busy_elsewhere", "warning" if stalled else "info",
                              f"Long waits with short handlers (loop busy elsewhere): {where(r)}", text, ev))
    return found


# ---------------------------------------------------------------------------------------------

def detect(df: pd.DataFrame, per_conn: pd.DataFrame | None = None, meta: dict | None = None,
           out_dir: str | Path | None = None, thresholds: Thresholds = THRESHOLDS,
           cells: pd.DataFrame | None = None) -> list[dict]:
    """Run every rule; anomalies as dicts, most severe first (then by rule order, backend, connections)."""
    ctx = Context(df=df, cells=stats.aggregate(df) if cells is None else cells, per_conn=per_conn, meta=meta or {},
                  out_dir=Path(out_dir) if out_dir else None, t=thresholds)
    found: list[Anomaly] = []
    for fn in RULES.values():
        if ctx.cells.empty and fn is not failed_cells:
            continue
        found.extend(fn(ctx))
    found = consolidate(found)
    order = list(RULES)
    found.sort(key=lambda a: (SEVERITIES.index(a.severity), order.index(a.id), a.backend,
                              a.connections if isinstance(a.connections, int) else 0))
    return [_jsonable(a.to_dict()) for a in found]


# Rules that describe how a backend behaves rather than one cell: one card per backend, not per scale.
CONSOLIDATED = ("readiness_churn", "mmap_churn", "lock_contention", "loader_bottleneck", "latency_tail", "noisy")


def consolidate(found: list[Anomaly]) -> list[Anomaly]:
    """Merge a consolidated rule's anomalies per (rule, backend, interpreter): the most severe instance
    (then one with stacks, then the largest scale) keeps its text; the other cells are listed."""
    groups: dict = {}
    for a in found:
        key = (a.id, a.backend, a.interpreter) if a.id in CONSOLIDATED else id(a)
        groups.setdefault(key, []).append(a)
    out = []
    for same in groups.values():
        rep = min(same, key=lambda a: (SEVERITIES.index(a.severity), not a.evidence.get("stacks"),
                                       -(a.connections or 0), a.pipeline or 1))
        others = [a for a in same if a is not rep and a.connections is not None]
        if others:
            labels = ", ".join(f"{a.connections}" + (f" ×{a.pipeline}" if (a.pipeline or 1) > 1 else "")
                               + (f" {a.framing} framing" if a.framing != rep.framing else "")
                               for a in sorted(others, key=lambda a: (a.pipeline or 1, a.connections)))
            rep.evidence["also at connections (×in flight)"] = labels
            rep.title += f" (also at {labels})"
        out.append(rep)
    return out


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    return v
