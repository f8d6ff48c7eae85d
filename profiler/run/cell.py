"""One cell: start the backend, let the loader play ping-pong, snapshot the probes and /proc on the
loader's measure marks, stop everything, and turn what was measured into one row.

A cell never raises for a backend's misbehaviour: crashes, stalls, refusals and EMFILE become a
failed row with the reason (network_ping_test's "FF"). Only Ctrl-C and netprof's own bugs propagate.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from netprof.probes import proc_cpu_times, proc_delta, registry
from netprof.probes.instrument import Counted, Instrument
from netprof.probes.proc import turns_between
from netprof.profiler.core.procs import ManagedProcess, ProcessError, ProcessGroup
from netprof.profiler.model import stats
from netprof.profiler.run import servers
from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.loader_client import LoaderError, RunRequest, RunsLoad
from netprof.profiler.run.plan import Cell, RunConfig
from netprof.profiler.run.servers import Running

EXIT_GRACE = 5.0  # how long a backend may take to exit after SIGTERM before SIGKILL


@dataclass
class CellOutcome:
    row: dict
    per_conn_messages: list[int] = field(default_factory=list)
    backend_pid: int | None = None
    conn_rows: dict[str, list[dict]] = field(default_factory=dict)  # instrument name -> its per-connection rows
    timeline: list[dict] = field(default_factory=list)  # open loop: the window's slices (stats.timeline_rows)
    # why the server could not be started or attached for the cell (then nothing was measured of it)
    server_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.row.get("status") == "ok"


def backend_argv(python: str | list[str], name: str, cfg: RunConfig, framing: str, host: str = "127.0.0.1",
                 prefix: list[str] | None = None, work: str | None = None) -> list[str]:
    """`python` is the interpreter (or it with options, e.g. `-X perf_jit`); `prefix` (e.g. `ip netns
    exec NS`, which execs: the pid stays the backend's) goes first. Every option the backend must
    know (message size, framing, work) comes from the run's configuration and this cell; `work`, when
    given, is the run's --work as this backend must see it (remote:US with its helper's address)."""
    python = [python] if isinstance(python, str) else list(python)
    return [*(prefix or []), *python, "-m", "netprof.backends", name, "--host", host, "--port", "0",
            "--msize", str(cfg.msize), *(["--framing", framing] if framing != "own" else []),
            "--work", work or cfg.work, "--workers", str(cfg.workers)]


@dataclass
class CellHooks:
    """Extra work of evidence rounds: `started(pid)` once the backend is ready (attach stack probes),
    `measuring(pid)` at the loader's measure_start (start samplers). Both must return quickly."""

    started: Callable[[int], None] | None = None
    measuring: Callable[[int], None] | None = None


@dataclass
class CellEnv:
    """What a cell runs with, passed explicitly: the run's configuration, the loader, the backend's
    interpreter (plus options such as `-X perf_jit`), the run's open instruments (none: no probes), the
    remote link (None: loopback) and the evidence rounds' hooks."""

    cfg: RunConfig
    loader: RunsLoad  # a Loader, or a LoaderSet (--loader-hosts with several hosts)
    interp: Interpreter
    instruments: tuple[Instrument, ...] = ()  # opened once per run (runner.open_instruments), in reading order
    link: Any = None  # netprof.profiler.run.link.netns.RemoteLink
    hooks: CellHooks = field(default_factory=CellHooks)
    remote_work: Any = None  # netprof.profiler.core.remote_work.RemoteWork: --work remote:US's helper
    python_options: tuple[str, ...] = ()
    on_phase: Callable[[str], None] | None = None  # told each phase of the cell (PHASES): the progress bar
    # Told the live msgs/s of each loader `progress` event (warm-up or window): the progress bar.
    on_live: Callable[[float], None] | None = None


def start_server(group: ProcessGroup, cell: Cell, env: CellEnv) -> Running:
    """Bring up the cell's server: a built-in backend (inside the link's backend namespace when given;
    ready when it prints its ready line), the user's command (ready when its port accepts), or the
    attached process (already up)."""
    spec = env.cfg.server(cell.backend)
    cpus = env.cfg.backend_cpu if cell.pinned else None
    deny = cell.io_uring == "off"  # --io-uring off (plan.validate refuses it with --attach)
    if spec.kind == "cmd":  # {host}: where the loader reaches this host (--loader-hosts), else loopback
        return servers.start_cmd(group, spec, cpus, env.link.backend_host if env.link is not None else "127.0.0.1",
                                 deny_io_uring=deny)
    if spec.kind == "attach":
        return servers.attach(spec)
    link = env.link
    host, prefix = (link.backend_host, link.backend_prefix) if link is not None else ("127.0.0.1", None)
    python = [env.interp.python, *env.python_options]
    rw = env.remote_work
    proc = group.spawn(f"backend-{cell.backend}",
                       backend_argv(python, cell.backend, env.cfg, cell.framing, host, prefix,
                                    work=rw.backend_work(env.cfg.work) if rw else None),
                       cpus=cpus, env=rw.backend_env() if rw else None, deny_io_uring=deny)
    line = proc.wait_line("ready", servers.READY_TIMEOUT)
    return Running(proc.pid, host, int(line.split()[2]), proc)


def tree_rss(pid: int) -> int | None:
    """Resident bytes of `pid` and all its descendants (prefork/fork backends), None if it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


@dataclass
class Snap:
    """What was read at one of the loader's marks: /proc CPU, time, and at the two marks that bound the
    counted window each instrument's snapshot (by name)."""

    proc: dict
    t: float
    counters: dict[str, Any] = field(default_factory=dict)
    t_then: float | None = None  # when the other instruments' totals were read (first), at a counted mark


# Seconds between the loader's live `progress` events when someone shows them (the progress bar).
LIVE_EVERY_S = 0.5
# Seconds on each side of the probed sub-window that count in neither phase (the loader's probe_guard):
# the probes attach during the first guard (~1 ms: compiled once per run) and detach during the
# second (the event's read and the counters' snapshot come first: ~7-10 ms here), so no probe runs
# in the unprobed time the headline comes from. Each row records how far inside the guards that was.
PROBE_GUARD_S = 0.1
# The most seconds the loader keeps its connections after measure_stop (RunRequest.hold): Loader.run releases
# them as soon as the marks have read that mark (milliseconds); this bounds a client that never does. Without it a
# thread per connection exits as the loader closes, while that read is made, and takes its counts with it.
HOLD_S = 5.0


def probe_guard(duration: float, share: float) -> float:
    """The guard for a window: PROBE_GUARD_S, but at most half of each unprobed part (a short window
    keeps a headline; the row's attach timing says whether the probes still fitted)."""
    return min(PROBE_GUARD_S, duration * (1 - share) / 4)

# What the cell is doing after each of the loader's events: the progress bar's phase.
PHASES = {"accepted": "connecting", "connected": "warm-up", "measure_start": "measuring",
          "probe_start": "measuring (probed)", "probe_stop": "measuring", "measure_stop": "stopping"}


class Marks:
    """Snapshots taken the moment the loader reports a mark, and the instruments' attach/detach
    around the probed sub-window. The instruments that live in the sub-window (`sub_window`: the
    counting set) are attached at guard_start, read at probe_start and probe_stop (both while
    attached, so the two edges of the counted window lag their marks by the same event-read time) and
    detached right after probe_stop; the guards count in neither phase, so the headline numbers (the
    unprobed phase) come from time when none of them was attached. The others stay attached all cell
    (run_cell) and are read at the same two marks. Without a sub-window the counted window is the
    whole one (measure_start to measure_stop). At a counted mark the others' figures over requests are
    read first (Instrument.totals: map reads), then the sub-window instruments (time-critical), then
    /proc, then the rest of the others. With a loader on this host (`same_clock`) the others are also given
    the counted window's bounds when `connected` announces them (Instrument.gate: the breakdown then counts
    over exactly that window, whenever the marks are heard). `attached_t`/`detached_t` (monotonic) say when
    the attach and detach really happened, for the row."""

    def __init__(self, pid: int, instruments: tuple[Instrument, ...] = (),
                 on_start: Callable[[int], None] | None = None, window: tuple[float, float] | None = None,
                 on_phase: Callable[[str], None] | None = None,
                 on_live: Callable[[float], None] | None = None, same_clock: bool = False) -> None:
        self.pid, self.on_start, self.on_phase, self.on_live = pid, on_start, on_phase, on_live
        self.same_clock = same_clock  # the loader's event times are ours (a loader on this host): gate on them
        self.window = window  # (duration, probe share) when the loader runs a probed sub-window
        self.first = [i for i in instruments if i.sub_window]  # read before /proc at a counted mark
        self.then = [i for i in instruments if not i.sub_window]
        self.windowed = self.first if window else []  # attached only around the sub-window
        self.counted_marks = ("probe_start", "probe_stop") if window else ("measure_start", "measure_stop")
        self.snaps: dict[str, Snap] = {}
        self.connected: dict = {}
        self.rss_ready: int | None = None  # backend tree RSS right after `ready` (set by run_cell)
        self.rss_start: int | None = None  # ... and at measure_start
        self.port: int | None = None  # the server's port (set by run_cell): its accept queue is read at measure_start
        self.accept_queue_start: int | None = None  # connections not yet accepted when the window opened
        self.attached_t: float | None = None  # when the sub-window instruments' attach returned
        self.detached_t: float | None = None  # ... and their detach

    def _snap(self, kind: str) -> None:
        counted = kind in self.counted_marks
        # the others' figures over requests before anything else (Instrument.totals: means, which no span carries
        # over a late edge): map reads; the rest of them (sums, names from /proc) after /proc
        t_then = time.monotonic()
        totals = {i.name: i.totals() for i in self.then} if counted else {}
        t = time.monotonic()  # when the counters are read (/proc of a process tree takes ms more: not in it)
        counters = {i.name: i.snapshot() for i in self.first if counted and i.attached}
        proc = proc_cpu_times(self.pid)
        snap = self.snaps[kind] = Snap(proc, t, counters)
        if counted:
            snap.t_then = t_then
            snap.counters.update({i.name: i.snapshot(totals[i.name]) for i in self.then})

    def _gate(self, connected: dict) -> None:
        """The counted window's bounds, as `connected` announces them before it opens, to the others
        (Instrument.gate: the breakdown counts exactly over them in the kernel)."""
        bounds = ((connected.get("phases") or {}).get("probed") if self.window else connected) or {}
        if "t_start" in bounds and "t_stop" in bounds:
            for inst in self.then:
                inst.gate(float(bounds["t_start"]), float(bounds["t_stop"]))

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "connected":
            self.connected = event
            if self.same_clock:
                self._gate(event)
        elif kind in ("guard_start", "probe_start") and self.windowed:
            if not all(i.attached for i in self.windowed):  # at guard_start (probe_start: a loader without guards)
                for inst in self.windowed:
                    inst.attach()
                self.attached_t = time.monotonic()
            self._snap(kind)  # guard_start: /proc, whose guards are not headline time; probe_start: counters
        elif kind == "probe_stop" and self.windowed:
            self._snap(kind)  # read while attached (the same lag as at probe_start), then stop
            for inst in self.windowed:
                inst.detach()
            self.detached_t = time.monotonic()
        elif kind == "guard_stop":
            self._snap(kind)
        elif kind in ("measure_start", "measure_stop"):
            self._snap(kind)
            if kind == "measure_start":
                self.rss_start = tree_rss(self.pid)  # after the snapshots: they are time-critical
                if self.on_start:
                    self.on_start(self.pid)
                if self.port is not None:
                    self.accept_queue_start = servers.accept_queue(self.pid, (self.port,))
        if self.on_phase is not None and kind in PHASES:  # after the time-critical snapshots
            self.on_phase(PHASES[kind])
        elif kind == "progress" and self.on_live is not None:
            self.on_live(float(event.get("msgs_per_sec") or 0))

    def close(self) -> None:
        """After the loader's run: no instrument may stay attached into the next cell."""
        if any(i.attached for i in self.windowed):
            self.detached_t = time.monotonic()
        for inst in self.first + self.then:
            inst.detach()

    def pair(self, first: str, last: str) -> tuple[Snap, Snap] | None:
        a, b = self.snaps.get(first), self.snaps.get(last)
        return (a, b) if a and b else None


# An open-loop cell's window in this many slices, each with its own latency (PROTOCOL.md, "Timeline"): an
# overloaded server shows as latency growing slice by slice. 20: a 2 s window in 0.1 s slices, each with a
# few hundred answers at the lowest rates that make sense.
TIMELINE_SLICES = 20


def open_loop_fields(cell: Cell, cfg: RunConfig) -> dict:
    """The RunRequest fields of an open-loop cell (--rate): its rate, the run's arrivals, the timeline's slices
    and the connection cap (connections opened as requests need them); {} closed loop (its request stays what
    it always was)."""
    if not cell.rate:
        return {}
    return {"rate": cell.rate, "arrivals": cfg.arrivals_setting(), "timeline": TIMELINE_SLICES,
            "max_connections": cfg.max_connections_for(cell.connections)}


def base_row(cell: Cell, cfg: RunConfig, interp: Interpreter) -> dict:
    spec = cfg.server(cell.backend)
    own = spec.kind != "builtin"  # the user's server runs its own interpreter
    return {
        "backend": cell.backend, "family": spec.family, "server_kind": spec.kind,
        "interpreter": "" if own else interp.label, "python_version": None if own else interp.version,
        "python_build": None if own else interp.build_flags,
        "framing": cell.framing, "reads": spec.reads, "protocol": cfg.protocol,
        "connections": cell.connections, "pipeline": cell.pipeline, "round": cell.round,
        "msize": cfg.msize, "work": cfg.work, "think": cfg.think, "arrivals": cfg.arrivals_setting(),
        "max_connections": open_loop_fields(cell, cfg).get("max_connections", 0),
        "zmq_client": cfg.zmq_client, "warmup_after": cfg.warmup_after,
        "pinned": cell.pinned, "workers": cfg.workers, "loader_host": ",".join(cfg.loader_hosts),
        **dict(cell.extra), "status": "failed", "error": None,
        # Each instrument's group, in every row: its figures join it when it ran (Instrument.row).
        **{group: {"attached": False} for group in registry.groups()},
    }


def _exit_code(proc: ManagedProcess, within: float = 0.5) -> int | None:
    """The backend's exit code, None while it lives. A backend killed just now is given `within` seconds to be
    reaped: the kernel closes its sockets, and the loader reports them (backend_gone), before it is a zombie."""
    deadline = time.monotonic() + within
    while (code := proc.returncode()) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return code


def _failure_reason(proc: ManagedProcess | None, default: str) -> str:
    if proc is None:
        return default
    code = _exit_code(proc)
    tail = proc.stderr_tail()
    if "Too many open files" in tail or "EMFILE" in tail:
        return f"EMFILE: backend hit the fd limit ({tail})"
    if code is not None and code != 0:
        return f"backend exited with code {code}" + (f": {tail}" if tail else "")
    return default + (f" (backend stderr: {tail})" if tail else "")


def _stop_builtin(proc: ManagedProcess) -> str | None:
    """Stop a built-in backend as netprof always does: SIGTERM to its process group, SIGKILL after
    EXIT_GRACE (ManagedProcess.stop). Why the cell failed if that was not a clean exit 0, else None."""
    if not proc.alive():  # gone before it was told to stop
        if proc.returncode():
            return _failure_reason(proc, "server failed")
        return "backend exited (code 0) before netprof stopped it: a backend must serve until SIGTERM"
    code = proc.stop(timeout=EXIT_GRACE)
    tail = proc.stderr_tail()
    tail = f": {tail}" if tail else ""
    if code == -signal.SIGKILL or code is None:  # None: not even SIGKILL ended it in time
        return f"backend did not exit within {EXIT_GRACE:g} s of SIGTERM (netprof had to kill -9 it){tail}"
    if code != 0:
        return f"backend exited with code {code} when stopped with SIGTERM (it must exit 0){tail}"
    return None


def _unprobed_proc(marks: Marks) -> dict | None:
    """/proc counters of the unprobed phase: the window minus the probed sub-window and its guards
    (the probes inflate system time while attached)."""
    window = marks.pair("measure_start", "measure_stop")
    if window is None:
        return None
    whole = proc_delta(window[0].proc, window[1].proc)
    excluded = marks.pair("guard_start", "guard_stop") or marks.pair("probe_start", "probe_stop")
    if excluded is None:
        return whole
    sub = proc_delta(excluded[0].proc, excluded[1].proc)
    return {k: whole[k] - sub[k] for k in whole}


def _sched(marks: Marks) -> dict:
    """The server's threads against its CPUs over the counted window (stats.sched): the probed sub-window when
    there is one (`--probe-share` below 1), else the whole window, whose last mark the loader's connections outlive
    (RunRequest.hold): a thread per connection is alive at both marks. Threads that exit in the window anyway take
    their figures with them (the row's `sched.threads_exited` says so)."""
    pair = marks.pair(*marks.counted_marks)
    if pair is None:
        return {}
    turns = turns_between(pair[0].proc, pair[1].proc)
    return stats.sched(proc_delta(pair[0].proc, pair[1].proc), pair[1].t - pair[0].t, *(turns or (None, None)))


def _probe_cpu(row: dict, marks: Marks, unprobed: dict) -> None:
    """The server's on-CPU time per message (schedstat: ns, where utime/stime are 10-ms ticks) in the probed
    sub-window, read at its marks and divided by the messages counted over them (row["counted"]), against the
    unprobed phase's; `probe_cpu_cost` their ratio − 1. At a set rate every part of the window answers the rate
    asked, so the probes' cost shows here and not in `probe_cost`'s msgs/s."""
    pair, counted = marks.pair("probe_start", "probe_stop"), (row.get("counted") or {}).get("messages")
    if pair is None or not counted or not row["messages"] or "probed" not in row:
        return
    probed_us = 1e6 * proc_delta(pair[0].proc, pair[1].proc)["oncpu_s"] / counted
    # threads that exited in the window (a server that ends threads as it goes; a thread per connection did at the
    # window's end before the loader held its connections) took their schedstat with them: then the process's own
    # times, which keep them (clock ticks: ~1% of a 1.4-s unprobed phase)
    spent = unprobed["user_s"] + unprobed["sys_s"] if unprobed.get("threads_exited") else unprobed["oncpu_s"]
    unprobed_us = 1e6 * spent / row["messages"]
    row["probed"] |= {"cpu_us_per_msg": probed_us, "unprobed_cpu_us_per_msg": unprobed_us}
    row["probe_cpu_cost"] = stats.probe_cpu_cost(unprobed_us, probed_us)


def _attach_timing(result: dict, marks: Marks) -> dict:
    """When the probes really ran, against the loader's phases (ms): `attach_lead_ms` = attached
    this long before the probed sub-window began, `detach_lag_ms` = detached this long after it ended;
    `late_ms` > 0 when they attached after it began (its counts miss that much time) and `spill_ms`
    > 0 when they stayed attached beyond the guard into headline time. Empty without guards."""
    guard = result.get("probe_guard")
    probed = (result.get("phases") or {}).get("probed") or {}
    if not guard or marks.attached_t is None or marks.detached_t is None or "t_start" not in probed:
        return {}
    lead = 1e3 * (float(probed["t_start"]) - marks.attached_t)
    lag = 1e3 * (marks.detached_t - float(probed["t_stop"]))
    out = {"guard_s": float(guard), "attach_lead_ms": lead, "detach_lag_ms": lag,
           "late_ms": max(0.0, -lead), "spill_ms": max(0.0, lag - 1e3 * float(guard))}
    pair = marks.pair("probe_start", "probe_stop")
    if pair is not None:
        # the counters' window against the loader's: each edge read when its mark reached us, so a host that
        # stalls the reading of one mark and not the other makes the counted window this much longer (or, < 0,
        # shorter) than the one its messages were counted over
        out["snap_skew_ms"] = 1e3 * ((pair[1].t - float(probed["t_stop"])) - (pair[0].t - float(probed["t_start"])))
    return out


def measure_row(row: dict, result: dict, marks: Marks, instruments: tuple[Instrument, ...]) -> dict:
    """Fill `row` from the loader's stats and the snapshots at its marks; {instrument name: its
    per-connection rows}.

    With a probed sub-window (stats["phases"]), the headline figures (msgs/s, latency, fairness,
    /proc CPU) come from the unprobed phase and the instruments' counters are divided by the probed
    phase's own message count; `probe_cost` is the probes' cost measured in this very cell."""
    phases = result.get("phases")
    head = phases["unprobed"] if phases else result
    probed = phases["probed"] if phases else result
    messages = int(head.get("messages", 0))
    row.update({
        "messages": messages,
        "duration_s": head.get("duration_s"),
        "msgs_per_sec": head.get("msgs_per_sec"),
        "connected": result.get("connected"),
        "setup_s": result.get("setup_s"),
        "lat_us": {k: head["latency_us"].get(k) for k in LATENCY_KEYS},
        "per_conn": stats.fairness(head.get("per_conn_messages", [])),
        "errors": result.get("errors", {}),
        "loader_cpu": result.get("loader_cpu", {}),
        # Requests still waiting at the window's end, older than any it measured (the whole window's end,
        # whatever the phases): the tail its latency figures cannot see. Absent from older loaders.
        "unanswered": result.get("unanswered", {}),
        "probes": [i.name for i in instruments],
    })
    if "served_first" in result:  # --warmup-after served: each connection's first request (PROTOCOL.md)
        row["served_first"] = result["served_first"]
    if "loaders" in result:  # --loader-hosts with several hosts: what each did (loaderset.py)
        row["loaders"] = result["loaders"]
    open_loop_row(row, result, head)
    if phases:
        row["probed"] = {"messages": probed.get("messages"), "duration_s": probed.get("duration_s"),
                         "msgs_per_sec": probed.get("msgs_per_sec"), "share": result.get("probe_share"),
                         **_attach_timing(result, marks)}
        row["probe_cost"] = stats.probe_cost(head.get("msgs_per_sec"), probed.get("msgs_per_sec"))
        parts = head.get("parts") or []  # before and after the probed sub-window (absent from older loaders)
        if len(parts) == 2:
            before, after = (p.get("msgs_per_sec") for p in parts)
            row["unprobed_parts"] = {"before_msgs_per_sec": before, "after_msgs_per_sec": after}
            row["unprobed_drift"] = stats.unprobed_drift(before, after)
    conns = result.get("connected") or 0
    # connections the loader had open that the server had not accepted when the window opened (its listen queue)
    row["accept_queue_at_start"] = marks.accept_queue_start
    if marks.rss_ready is not None and marks.rss_start is not None and conns:
        # backend memory per open connection: (RSS at measure_start − RSS after ready) / connections
        row["rss_per_conn_kb"] = (marks.rss_start - marks.rss_ready) / 1024 / conns
    proc = _unprobed_proc(marks)
    if proc is not None:
        user, sys_ = proc["user_s"], proc["sys_s"]
        dur = row["duration_s"]
        row["cpu"] = {
            "user_s": user, "sys_s": sys_,
            "user_frac": user / (user + sys_) if user + sys_ > 0 else None,
            "busy_frac": (user + sys_) / dur if dur else None,  # share of one CPU the backend used
        }
        row["faults"] = {"minor_per_msg": stats.ratio(proc["minflt"], messages), "major": proc["majflt"]}
        row["sched"] = _sched(marks)
    conns = instrument_rows(row, result, marks, instruments)
    if phases and proc is not None:
        _probe_cpu(row, marks, proc)
    if "ctx_switches_per_msg" not in row and proc is not None:
        # no counting set in this window: the /proc context-switch counters still give a probe-free figure
        row["ctx_switches_per_msg"] = stats.ratio(proc["vol_ctx"] + proc["invol_ctx"], messages)
        row["ctx"] = {"voluntary_per_msg": stats.ratio(proc["vol_ctx"], messages),
                      "involuntary_per_msg": stats.ratio(proc["invol_ctx"], messages)}
    return conns


LATENCY_KEYS = ("p50", "p90", "p95", "p99", "p999", "max", "mean")


def open_loop_row(row: dict, result: dict, head: dict) -> None:
    """An open-loop cell's own figures (--rate; PROTOCOL.md, "Open loop"): `lat_us` is already from each
    request's intended time; `lat_sent_us` is from its actual send, and `open_loop` says how far the
    load kept to its schedule (stats.open_loop). The headline phase's figures where the loader split
    them by phase, else the whole window's. Nothing for a closed-loop cell."""
    ol = head.get("open_loop") or result.get("open_loop")
    if not row.get("rate") and not isinstance(ol, dict):
        return
    sent = head.get("latency_sent_us") or result.get("latency_sent_us") or {}
    row["lat_sent_us"] = {k: sent.get(k) for k in LATENCY_KEYS}
    row["open_loop"] = stats.open_loop(ol if isinstance(ol, dict) else {}, head.get("msgs_per_sec"),
                                       row.get("rate") or result.get("rate"),
                                       stats.timeline_rows(result.get("timeline")))


# A loader on another host: its window's times are ours through the clock offset measured over ssh (Loader.run
# moved them), within that offset's error (the result's clock_error_s) and, with several loaders, the skew of their
# windows. Within this share of the window the messages are carried over to the span the counters were read over,
# as with a loader on this host: without it a remote loader's counts per message were short by the lag of its
# marks' arrival (0.92 recvfrom per message, a fresh-clone run beside the bystander, 2026-12-02).
CLOCK_TRUSTED_SHARE = 0.01


def _window_on_our_clock(window: dict, result: dict, remote: bool) -> tuple[float, float] | None:
    """The window's [t_start, t_stop) on our clock, or None where its times are not (a loader on another host
    whose clock offset is not known well enough)."""
    if "t_start" not in window or "t_stop" not in window:
        return None
    start, stop = float(window["t_start"]), float(window["t_stop"])
    if remote:
        several = result.get("loaders") or {}  # LoaderSet.describe: the worst offset's error, and the skew
        error = several.get("clock_error_s", result.get("clock_error_s", math.inf))
        if not float(error) + float(several.get("window_skew_s", 0.0)) <= CLOCK_TRUSTED_SHARE * (stop - start):
            return None
    return start, stop


def instrument_rows(row: dict, result: dict, marks: Marks, instruments: tuple[Instrument, ...]) -> dict:
    """Each instrument's figures of the counted window into `row` (the probed sub-window when the loader
    ran one, else the whole window); {name: its per-connection rows}. An instrument whose two snapshots
    are missing (the load ended early) adds nothing."""
    pair = marks.pair(*marks.counted_marks)
    if pair is None:
        return {}
    window = ((result.get("phases") or {}).get("probed") if marks.window else result) or {}
    bounds = _window_on_our_clock(window, result, remote=bool(row.get("loader_host")))
    proc = proc_delta(pair[0].proc, pair[1].proc)

    def counted_over(read: tuple[float, float]) -> tuple[dict, Counted]:
        span = stats.counted_span(int(window.get("messages", 0)), bounds, read,
                                  load_runs_on=marks.window is not None)  # a sub-window (share < 1): load after it
        return span, Counted(messages=span["messages"], duration_s=span["span_s"] or window.get("duration_s"),
                             latency_us=window.get("latency_us") or {}, proc=proc,
                             window_messages=span["loader_messages"])

    # the sub-window instruments (the counting set) and the others (their totals read just before), each over
    # the span they were read over
    span, first = counted_over((pair[0].t, pair[1].t))
    then = (counted_over((pair[0].t_then, pair[1].t_then))[1]
            if pair[0].t_then is not None and pair[1].t_then is not None else first)
    if instruments:
        row["counted"] = span
    conns = {}
    for inst in instruments:
        a, b = pair[0].counters.get(inst.name), pair[1].counters.get(inst.name)
        counted = first if inst in marks.first else then
        if a is not None and b is not None:
            if rows := inst.row(row, a, b, counted):
                conns[inst.conn_file or inst.name] = rows
    return conns


def run_cell(cell: Cell, env: CellEnv) -> CellOutcome:
    """Run one cell: the backend under env.interp, the load from env.loader, the run's instruments
    (env.instruments) on the backend's process tree, env.hooks for evidence rounds."""
    cfg, loader, instruments, hooks, link = env.cfg, env.loader, env.instruments, env.hooks, env.link
    row = base_row(cell, cfg, env.interp)
    for inst in instruments:
        if inst.group:
            row[inst.group]["attached"] = True
    if env.on_phase is not None:
        env.on_phase("starting the server")
    with ProcessGroup() as group:
        try:
            server = start_server(group, cell, env)
        except ProcessError as e:
            row["error"] = f"server did not start: {e}"
            return CellOutcome(row, server_error=str(e))
        proc = server.proc  # None when attached: nothing of ours to wait for or stop
        share = cfg.probe_share if any(i.sub_window for i in instruments) and cfg.probe_share < 1 else None
        for inst in instruments:  # before the loader connects: every connection seen from its first byte
            inst.target(server.pid)
            if not (inst.sub_window and share):
                inst.attach()
        if hooks.started:
            hooks.started(server.pid)
        marks = Marks(server.pid, instruments, hooks.measuring, (cfg.duration, share) if share else None,
                      env.on_phase, env.on_live, same_clock=link is None)
        marks.rss_ready, marks.port = tree_rss(server.pid), server.port
        transport = cfg.loader_transport(cell.backend)
        req = RunRequest(target=f"{server.host}:{server.port}",
                         connections=cell.connections, msize=cfg.msize, duration=cfg.duration,
                         warmup=cfg.warmup, pipeline=cell.pipeline, think=cfg.think,
                         sources=list(link.loader_hosts) if link else list(cfg.sources),
                         transport=transport, probe_share=share,
                         # the connections outlive the reads at measure_stop (libzmq's own sockets: not held)
                         hold=None if transport == "zmq" else HOLD_S,
                         probe_guard=probe_guard(cfg.duration, share) if share else None,
                         connect_timeout=link.connect_timeout_s(cell.connections) if link
                         else RunRequest.connect_timeout,
                         progress=LIVE_EVERY_S if env.on_live is not None else None,
                         warmup_after=cfg.warmup_after_field(), **open_loop_fields(cell, cfg), **cfg.protocol_fields())
        result = None
        try:
            result = loader.run(req, on_event=marks)
        except LoaderError as e:
            result = e.stats
            row["error"] = _failure_reason(proc, f"loader: {e.kind}: {e.message}")
        finally:
            marks.close()
        conns: dict[str, list[dict]] = {}
        per_conn: list[int] = []
        if result:
            conns = measure_row(row, result, marks, instruments)
            head = (result.get("phases") or {}).get("unprobed") or result
            per_conn = list(head.get("per_conn_messages", []))
        if row["error"] is None:
            row["error"] = _verdict(cell, result, row, proc)  # before the stop: a hang is a stall
        # A built-in backend serves until netprof stops it, and must then exit 0 by itself; the
        # user's command is stopped by the ProcessGroup below, whatever it exits with.
        if proc is not None and cfg.server(cell.backend).kind == "builtin":
            stop_error = _stop_builtin(proc)
            row["error"] = row["error"] or stop_error
        if row["error"] is None:
            row["status"] = "ok"
        return CellOutcome(row, per_conn, server.pid, conns, stats.timeline_rows((result or {}).get("timeline")))


def _verdict(cell: Cell, result: dict | None, row: dict, proc: ManagedProcess | None) -> str | None:
    """Why a cell that the loader finished is still a failure (FF), or None."""
    if result is None:
        return _failure_reason(proc, "no result from the loader")
    if result.get("aborted"):
        return _failure_reason(proc, "run aborted")
    if not row.get("messages"):
        sample = result.get("error_sample")  # e.g. an HTTP server that answers something else
        return _failure_reason(proc, f"no reply could be parsed: {sample}" if sample
                               else "stalled: no message completed in the window")
    if result.get("connected", cell.connections) < cell.connections:
        return (f"only {result.get('connected')} of {cell.connections} connections "
                f"could be opened ({_failure_reason(proc, 'refused or timed out')})")
    if mismatched := (result.get("errors") or {}).get("mismatch"):
        return (f"echo corrupted: {mismatched} replies differed from what was sent "
                f"({_failure_reason(proc, 'wrong bytes')})")
    if proc is not None and proc.returncode() not in (0, None):
        return _failure_reason(proc, "server failed")
    return None
