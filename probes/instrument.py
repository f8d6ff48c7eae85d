"""An instrument: one kind of kernel measurement a run can carry — the counting set, socket waits, and
the next ones — behind one protocol that the run loop and each cell's marks loop over.

The life of an instrument in a run (profiler/run/runner.py and profiler/run/cell.py do the calls):

    inst = Cls.open(cfg)            # once per run: compile (BCC, ~1 s), detached
    for each cell:
        inst.target(pid)            # the cell's server tree, before the loader connects; clears counters
        inst.attach()               # `sub_window` False: now, for the whole cell;
                                    #   True: at the loader's guard_start (never in headline time)
        t = inst.totals()           # at the first mark of the counted window, before anything else is read;
        a = inst.snapshot(t)        #   then the rest; b = ... the same at the last mark
        inst.detach()               # after the counted window (sub_window) or when the cell ends
        conns = inst.row(row, a, b, counted)   # its figures into the row; its per-connection rows
    meta.update(inst.cost())        # once, after the cells: what it costs on this host
    inst.close()

The counted window is the probed sub-window when the run has one, else the whole window; `Counted`
carries what the loader and /proc measured over it, so figures per message use the same window.

An instrument is one folder under probes/ (its BPF C, its Python, its row shaping) whose package exports
`INSTRUMENT`, the class; registry.py lists the folders. Nothing here imports bcc or the run layer:
`cfg` is the run's configuration (profiler.run.plan.RunConfig), read by attribute. A remote agent serving
the probes on another host runs the same calls on its side of a channel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class Counted:
    """The window an instrument's snapshots bound, as the loader and /proc saw it."""

    messages: int  # answered requests the loader counted in it
    duration_s: float | None
    latency_us: dict = field(default_factory=dict)  # the loader's round trip over it: p50, p99, mean, ...
    proc: dict | None = None  # the server's /proc deltas over it (user_s, sys_s, minflt, vol_ctx, ...)
    # The loader's messages of the window itself, not carried over to the span the snapshots were read over
    # (`messages`): what an instrument gated on the window's bounds (Instrument.gate) counts against.
    window_messages: int | None = None


class Instrument(ABC):
    """The protocol. A subclass sets `name` and implements the abstract methods; the class methods
    decide, check and open it for a run."""

    name: ClassVar[str]  # its name in rows' `probes` list and in `--instrument NAME`
    # The row's dict of its figures, present in every row: {"attached": False} in a run without it.
    # None: the instrument writes top-level fields (the counting set: syscalls_per_msg, ...).
    group: ClassVar[str | None] = None
    # The name its per-connection rows are filed under (`<conn_file>_conn.parquet`); None: its own name.
    # An instrument that carries another's figures (the breakdown carries the socket-wait set) files them as it.
    conn_file: ClassVar[str | None] = None
    # True: attached only around each cell's probed sub-window, so the headline never sees its cost;
    # False: attached from target() to the end of the cell (it must see each connection from its first byte).
    sub_window: ClassVar[bool] = False

    @classmethod
    def wanted(cls, cfg: Any) -> bool:
        """Does this run carry it? By default: named in `--instrument`."""
        return cls.name in getattr(cfg, "instruments", ())

    @classmethod
    def missing(cls, cfg: Any) -> str | None:
        """None if it can run here, else one line naming what is missing (checked before any cell)."""
        return None

    @classmethod
    @abstractmethod
    def open(cls, cfg: Any) -> Instrument:
        """Compile for this run, detached."""

    @property
    @abstractmethod
    def attached(self) -> bool: ...

    @abstractmethod
    def target(self, pid: int) -> None:
        """Watch the process tree of `pid` from now on; zero what was counted."""

    @abstractmethod
    def attach(self) -> None: ...

    @abstractmethod
    def detach(self) -> None: ...

    def gate(self, t_start: float, t_stop: float) -> None:
        """The counted window's bounds (CLOCK_MONOTONIC s), announced by the loader before it opens: an instrument
        that can count exactly over them in the kernel does (its row says so); by default, nothing."""
        return None

    def totals(self) -> Any:
        """The figures it averages over requests, read first at a counted mark (map reads, no /proc): a count is
        carried over a late edge (stats.counted_span), a mean is not, and a late edge of a server that serves
        its connections unevenly takes in or leaves out its slowest answers (gunicorn_gevent, 2026-12-05: its
        starved requests, ~1.7 s old, answered ~2 ms after each mark while netprof read). None: nothing."""
        return None

    @abstractmethod
    def snapshot(self, totals: Any = None) -> Any:
        """Its counters now (cumulative since target()); `totals`: what totals() read a moment ago."""

    @abstractmethod
    def row(self, row: dict, first: Any, last: Any, counted: Counted) -> list[dict]:
        """Put the counted window's figures (from two snapshots) into `row`; return its per-connection
        rows (written to `<name>_conn.parquet` beside the row's keys), or []."""

    def cost(self) -> dict:
        """What it costs on this host, as meta.json entries (measured once per run, after the cells)."""
        return {}

    @abstractmethod
    def close(self) -> None: ...


class ProbeInstrument(Instrument):
    """An instrument over one compiled probe set (`probes`: a base.LoadedProgram with target() and
    snapshot()): the life-cycle calls go to the set, so a subclass writes only open(), row() and, if it
    has one, cost()."""

    def __init__(self, probes: Any) -> None:
        self.probes = probes

    @property
    def attached(self) -> bool:
        return bool(self.probes.attached)

    def target(self, pid: int) -> None:
        self.probes.target(pid)

    def attach(self) -> None:
        self.probes.attach()

    def detach(self) -> None:
        self.probes.detach()

    def snapshot(self, totals: Any = None) -> Any:
        return self.probes.snapshot() if totals is None else self.probes.snapshot(totals=totals)

    def close(self) -> None:
        self.probes.close()
