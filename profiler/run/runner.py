"""A whole run: every cell of the plan, in order, with results written as each cell finishes.

pyperf's split, in spirit: this module drives; `cell.py` measures one cell; `results.py` keeps the
raw rows; `stats.py`, `anomalies.py` and `report.py` only read what was kept.
"""

from __future__ import annotations

import contextlib
import json
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from netprof.backends.common import WorkModel
from netprof.probes import registry
from netprof.probes.instrument import Instrument
from netprof.profiler.core import atomic, runlock, units
from netprof.profiler.core.errors import EXIT_INTERNAL, NetprofError
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.core.remote_work import RemoteWork
from netprof.profiler.core.safetext import clean_text
from netprof.profiler.model.results import ResultsStore
from netprof.profiler.run import evidence, reap
from netprof.profiler.run import meta as meta_mod
from netprof.profiler.run.cell import CellEnv, run_cell
from netprof.profiler.run.link import netns, sshlink
from netprof.profiler.run.loader_client import Loader
from netprof.profiler.run.plan import RunConfig, loader_cpus
from netprof.profiler.run.stop import raise_if_stopped

ERROR_LOG = "netprof-error.log"


@dataclass
class RunOutcome:
    out_dir: Path
    store: ResultsStore
    failed: int
    interrupted: bool = False
    error: str | None = None  # netprof's own error that ended the run early (traceback in ERROR_LOG)
    closing: threading.Thread | None = None  # the probes being closed meanwhile (close_meanwhile): join it


def plan_line(cfg: RunConfig) -> str:
    """'12 cells × (1 s warm-up + 5 s) ≈ 1.4 min', '4 cells and 2 sampling rounds × ...', '1 sampling round × ...'
    (`netprof flamegraph`) — said before the first cell starts."""
    total = cfg.estimate_s()
    when = units.seconds(total) if total >= 90 else f"{total:.0f} s"
    what = [units.plural(n, word) for n, word in ((cfg.n_cells(), "cell"), (cfg.n_sampling(), "sampling round")) if n]
    return f"{units.joined(what)} × ({cfg.warmup:g} s warm-up + {cfg.duration:g} s) ≈ {when}"


def cell_line(cell, row: dict) -> str:
    """One finished cell, for logs: label, msgs/s (req/s for HTTP), p99, syscalls per message."""
    from netprof.probes import per_message_notation

    per = row.get("syscalls_per_msg") or {}
    p99 = (row.get("lat_us") or {}).get("p99")
    queued = row.get("accept_queue_at_start")
    unserved = (row.get("served_first") or {}).get("unserved")  # --warmup-after served, cut by the connect timeout
    return (f"{cell.label()}: {row.get('msgs_per_sec') or 0:,.0f} {units.rate_unit(row.get('protocol'))}, "
            f"p99 {units.duration_us(p99)}, "
            f"{per_message_notation(per, row.get('ring_per_msg')) if per else 'no probes'}"
            # a caveat of the cell's own: some of its connections were not the server's yet when it was measured
            + (f"; {units.plural(queued, 'connection')} not yet accepted when the window opened" if queued else "")
            + (f"; {units.plural(unserved, 'connection')} unanswered when the warm-up began (the connect timeout ran "
               "out)" if unserved else ""))


def open_instruments(cfg: RunConfig) -> list[Instrument]:
    """Compile each instrument the run asks for once, detached (probes/instrument.py); each cell
    targets and attaches them. One that fails to open closes those opened before it."""
    opened: list[Instrument] = []
    try:
        for cls in registry.wanted(cfg):
            opened.append(cls.open(cfg))
    except BaseException:
        close_instruments(opened)
        raise
    return opened


def close_instruments(instruments: list[Instrument]) -> None:
    for inst in instruments:
        inst.close()


def cost_and_close(instruments: list[Instrument], meta: dict) -> None:
    """Each instrument's cost on this host into `meta`, then closed; the list is emptied as it goes, so an
    exception leaves the rest to close_instruments."""
    while instruments:
        inst = instruments.pop(0)
        try:
            meta.update(inst.cost())
        finally:
            inst.close()


def cost_and_close_meanwhile(instruments: list[Instrument], meta: dict) -> threading.Thread:
    """cost_and_close, but the closing in a thread the caller joins: detaching a tracepoint waits ~60 ms
    for the kernel (RCU), mostly asleep, and the report need not wait for it (~0.2 s of a short run). Only
    when nothing measured follows. The list is emptied once every cost is in `meta` (a failing cost
    leaves them all to close_instruments)."""
    for inst in instruments:
        meta.update(inst.cost())
    closing = threading.Thread(target=close_instruments, args=(list(instruments),), name="netprof-close-probes")
    instruments.clear()
    closing.start()  # not a daemon: an interpreter that exits first still waits for it
    return closing


def _link(cfg: RunConfig):
    """`--remote netns`: the two namespaces and their link (profiler/run/link/netns.py); `--loader-hosts`: the loader
    on another host over ssh (profiler/run/link/sshlink.py); else nothing."""
    if cfg.loader_hosts:
        return sshlink.SshLink(cfg.loader_hosts, cfg.ssh_config, cfg.remote_netprof)
    if cfg.remote != "netns":
        return contextlib.nullcontext(None)
    return netns.RemoteLink(cfg.netem or None, sources=len(cfg.sources))  # validate() sized cfg.sources


def execute(cfg: RunConfig, argv: list[str], console: Console, interps: dict, verbose: bool = False) -> RunOutcome:
    """`interps` maps each --python spec of cfg.pythons to its prepared Interpreter. On a terminal a
    progress bar shows the cell, its phase and its live msgs/s (the loader's `progress` events; the last
    cell's once it ends; with `verbose` also a line per finished cell); elsewhere the plan line and a
    line per finished cell."""
    with runlock.run_lock(wait=cfg.wait):
        # What runs killed with SIGKILL left behind, where their watchdog could not remove it.
        removed = reap.reap_dead_runs()["namespaces"]
        if removed:
            console.print(f"removed leftover namespaces of dead netprof runs: {', '.join(removed)}")
        with _link(cfg) as link:
            return _execute(cfg, argv, console, link, interps, verbose)


def _execute(cfg: RunConfig, argv: list[str], console: Console, link, interps: dict,
             verbose: bool = False) -> RunOutcome:
    out = Path(cfg.out_dir) if cfg.out_dir else runlock.unique_out_dir()
    store = ResultsStore(out)
    lcpus = loader_cpus(cfg)
    config = cfg.to_dict() | {"loader_cpus_effective": lcpus, "out_dir": str(out)}
    meta = meta_mod.collect(argv, config)
    if link is not None:
        meta["link"] = link.describe()
    meta["interpreters"] = [interps[spec].describe() for spec in cfg.pythons]
    store.write_meta(meta)
    failed = 0
    interrupted = False
    error = None
    closing = None
    instruments = open_instruments(cfg)
    progress = Progress(
        TextColumn("[bold]{task.description}"), TextColumn("{task.fields[phase]}", style="cyan"), BarColumn(),
        TextColumn("{task.completed}/{task.total} cells"), TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
    )
    try:
        with ProcessGroup() as group, progress:
            if isinstance(link, sshlink.SshLink):  # on another host, over ssh: what it is is known once it runs
                loader = link.start_loader(group, cpus=lcpus, threads=cfg.loader_threads)
                meta["link"] = link.describe()
                store.write_meta(meta)
            else:
                loader = Loader.start(group, cpus=lcpus, threads=cfg.loader_threads,
                                      prefix=link.loader_prefix if link else None,
                                      netns=link.ns_loader if link else None)
            # --work remote:US: its helper, on the loader's CPUs (it stands for another host)
            work = WorkModel.parse(cfg.work)
            remote = RemoteWork.start(group, work.us, lcpus) if work.kind == "remote" else None
            extra = evidence.evidence_cells(cfg)
            total = cfg.n_cells() + cfg.n_sampling()
            task = progress.add_task("starting", total=total, phase="", last="")

            def phase(text: str) -> None:  # the cell's phase, from the loader's events (cell.PHASES)
                progress.update(task, phase=text)

            def live(rate: float) -> None:  # the loader's progress events: this cell's msgs/s as it runs
                progress.update(task, last=f"live: {units.rate(rate)} {units.rate_unit(cfg.protocol)}")

            if not console.is_terminal or verbose:
                console.print(plan_line(cfg), highlight=False, soft_wrap=True)
            for cell in cfg.cells():
                raise_if_stopped()
                progress.update(task, description=cell.label(), phase="")
                env = CellEnv(cfg, loader, interps[cell.python], instruments=tuple(instruments), link=link,
                              remote_work=remote, on_phase=phase, on_live=live if console.is_terminal else None)
                host_before = meta_mod.host_load()
                outcome = run_cell(cell, env)
                meta_mod.add_cell_load(meta, outcome.row, host_before)  # meta.json is rewritten below
                store.write_meta(meta)
                store.add(outcome.row, outcome.per_conn_messages, outcome.conn_rows, outcome.timeline)
                if not outcome.ok:
                    failed += 1
                    # the error quotes a server's stderr: text for rich, and no terminal control sequences
                    why = escape(clean_text(f"{cell.label()}: {outcome.row['error']}"))
                    progress.console.print(f"[red]FF[/red] {why}")
                elif not console.is_terminal or verbose:  # no progress bar off a terminal: one line per cell
                    progress.console.print(cell_line(cell, outcome.row), highlight=False, soft_wrap=True)
                if outcome.ok:
                    progress.update(task, last=f"last: {units.rate(outcome.row.get('msgs_per_sec'))} "
                                                   f"{units.rate_unit(outcome.row.get('protocol'))}")
                progress.advance(task)
            raise_if_stopped()
            if cfg.stacks or cfg.flamegraph:
                cost_and_close(instruments, meta)  # what each costs on this host; the evidence rounds run without them
            else:
                closing = cost_and_close_meanwhile(instruments, meta)
            store.write_meta(meta)
            if cfg.stacks:
                from netprof.probes import StackProbes
                from netprof.probes.stacks import DEFAULT_SYSCALLS

                with StackProbes(syscalls=stack_syscalls(cfg, DEFAULT_SYSCALLS)) as stack_probes:
                    for cell in extra:
                        progress.update(task, description=f"stacks: {cell.label()}", phase="sampling")
                        evidence.stacks_round(cell, CellEnv(cfg, loader, interps[cell.python], link=link,
                                                            remote_work=remote),
                                              stack_probes, out)
                        progress.advance(task)
            if cfg.flamegraph:
                index = []
                for cell in extra:
                    progress.update(task, description=f"flamegraph: {cell.label()}", phase="sampling")
                    # the evidence rounds' handlers call the same --work remote helper as the measured cells
                    index.append(evidence.flamegraph_round(cell, CellEnv(cfg, loader, interps[cell.python], link=link,
                                                                         remote_work=remote),
                                                           out))
                    atomic.write_text(out / "flamegraphs" / "index.json", json.dumps(index, indent=1))
                    progress.advance(task)
    except KeyboardInterrupt:
        interrupted = True
    except Exception as e:
        if isinstance(e, NetprofError) and e.exit_code != EXIT_INTERNAL:
            raise  # bad input or a missing capability: one line and its exit code
        # A bug or netprof's own error (a child, the loader or the probes failing outside a cell) must not
        # lose the finished cells: the caller still writes the report.
        error = f"{type(e).__name__}: {e}"
        atomic.write_text(out / ERROR_LOG, traceback.format_exc())
    finally:
        close_instruments(instruments)
        store.write_meta({**meta, "host_after": meta_mod.host_load()})
    return RunOutcome(out, store, failed, interrupted, error, closing)


def stack_syscalls(cfg: RunConfig, default: tuple[str, ...]) -> tuple[str, ...]:
    """The syscalls the --stacks round walks: its defaults, and with --breakdown the ones its off-CPU parts
    wait in (the tail_cause rule shows where those waits were made)."""
    if "breakdown" not in cfg.instruments:
        return default
    from netprof.probes.breakdown import WAIT_SYSCALLS  # deferred with the stacks' own import above

    return default + tuple(dict.fromkeys(s for ss in WAIT_SYSCALLS.values() for s in ss if s not in default))
