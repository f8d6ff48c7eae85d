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
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from netprof.flamegraphs.session import cleanup_stale as cleanup_stale_flame
from netprof.profiler import atomic, evidence, procs, runlock
from netprof.profiler import meta as meta_mod
from netprof.profiler.cell import CellEnv, run_cell
from netprof.profiler.errors import NetprofError
from netprof.profiler.loader_client import Loader
from netprof.profiler.plan import RunConfig, loader_cpus
from netprof.profiler.procs import ProcessGroup
from netprof.profiler.results import ResultsStore

ERROR_LOG = "netprof-error.log"
# Set by the CLI's SIGINT/SIGTERM handler; checked between cells (see cli._terminate_like_ctrl_c).
STOP = threading.Event()


@dataclass
class RunOutcome:
    out_dir: Path
    store: ResultsStore
    failed: int
    interrupted: bool = False
    error: str | None = None  # netprof's own error that ended the run early (traceback in ERROR_LOG)


def plan_line(cfg: RunConfig) -> str:
    """'12 cells × (1 s warm-up + 5 s) ≈ 1.4 min' — said before the first cell starts."""
    total = cfg.estimate_s()
    when = (f"{total / 3600:.1f} h" if total >= 3600 else f"{total / 60:.1f} min" if total >= 90
            else f"{total:.0f} s")
    return f"{cfg.n_cells()} cells × ({cfg.warmup:g} s warm-up + {cfg.duration:g} s) ≈ {when}"


def cell_line(cell, row: dict) -> str:
    """One finished cell, for logs: label, msgs/s, p99, syscalls per message."""
    from netprof.probes import per_message_notation

    per = row.get("syscalls_per_msg") or {}
    p99 = (row.get("lat_us") or {}).get("p99")
    return (f"{cell.label()}: {row.get('msgs_per_sec') or 0:,.0f} msgs/s, p99 "
            f"{'–' if p99 is None else f'{p99:,.0f} µs'}, {per_message_notation(per) if per else 'no probes'}")


def _open_probes(cfg: RunConfig):
    """Compile the counting programs once per run; re-targeted per cell."""
    if not cfg.probes:
        return None
    from netprof.probes import CountingProbes

    # Compiled once; attached only inside each cell's probed sub-window unless --probe-share 1.
    return CountingProbes(track_children=True, syscall_time=cfg.syscall_time, attached=cfg.probe_share >= 1)


def _link(cfg: RunConfig, console: Console):
    """`--remote netns`: the two namespaces and their link (profiler/netns.py); else nothing."""
    if cfg.remote != "netns":
        return contextlib.nullcontext(None)
    from netprof.profiler.netns import RemoteLink, cleanup_leftovers

    removed = cleanup_leftovers()  # namespaces of a netprof that was killed with SIGKILL
    if removed:
        console.print(f"removed leftover namespaces of dead netprof runs: {', '.join(removed)}")
    return RemoteLink(cfg.netem or None, sources=len(cfg.sources))  # validate() sized cfg.sources


def execute(cfg: RunConfig, argv: list[str], console: Console, interps: dict) -> RunOutcome:
    """`interps` maps each --python spec of cfg.pythons to its prepared Interpreter."""
    with runlock.run_lock(wait=cfg.wait), _link(cfg, console) as link:
        return _execute(cfg, argv, console, link, interps)


def _execute(cfg: RunConfig, argv: list[str], console: Console, link, interps: dict) -> RunOutcome:
    procs.cleanup_stale()  # what runs killed with SIGKILL left behind
    cleanup_stale_flame()
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
    probes = _open_probes(cfg)
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} cells"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
    )
    try:
        with ProcessGroup() as group, progress:
            loader = Loader.start(group, cpus=lcpus, threads=cfg.loader_threads,
                                  prefix=link.loader_prefix if link else None,
                                  netns=link.ns_loader if link else None)
            extra = evidence.evidence_cells(cfg)
            total = cfg.n_cells() + len(extra) * (int(cfg.stacks) + int(cfg.flamegraph))
            task = progress.add_task("starting", total=total)
            if not console.is_terminal:
                console.print(plan_line(cfg), highlight=False, soft_wrap=True)
            for cell in cfg.cells():
                if STOP.is_set():
                    raise KeyboardInterrupt
                progress.update(task, description=cell.label())
                env = CellEnv(cfg, loader, interps[cell.python], probes=probes, link=link)
                outcome = run_cell(cell, env)
                store.add(outcome.row, outcome.per_conn_messages)
                if not outcome.ok:
                    failed += 1
                    progress.console.print(f"[red]FF[/red] {cell.label()}: {outcome.row['error']}")
                elif not console.is_terminal:  # no progress bar off a terminal: one line per cell
                    console.print(cell_line(cell, outcome.row), highlight=False, soft_wrap=True)
                progress.advance(task)
            if STOP.is_set():
                raise KeyboardInterrupt
            if probes is not None:
                from netprof.probes import selfcost

                # This host's price of the probes per syscall (it varies between hosts): ~4 s, once per run.
                meta["probe_cost_per_syscall"] = selfcost.measure(probes)
                store.write_meta(meta)
                probes.close()  # the evidence rounds run without the counting set
                probes = None
            if cfg.stacks:
                from netprof.probes import StackProbes

                with StackProbes() as stack_probes:
                    for cell in extra:
                        progress.update(task, description=f"stacks: {cell.label()}")
                        evidence.stacks_round(cell, CellEnv(cfg, loader, interps[cell.python], link=link),
                                              stack_probes, out)
                        progress.advance(task)
            if cfg.flamegraph:
                index = []
                for cell in extra:
                    progress.update(task, description=f"flamegraph: {cell.label()}")
                    index.append(evidence.flamegraph_round(cell, CellEnv(cfg, loader, interps[cell.python], link=link),
                                                           out))
                    atomic.write_text(out / "flamegraphs" / "index.json", json.dumps(index, indent=1))
                    progress.advance(task)
    except KeyboardInterrupt:
        interrupted = True
    except NetprofError:
        raise
    except Exception as e:  # a bug must not lose the finished cells: the caller still writes the report
        error = f"{type(e).__name__}: {e}"
        atomic.write_text(out / ERROR_LOG, traceback.format_exc())
    finally:
        if probes is not None:
            probes.close()
        store.write_meta({**meta, "host_after": meta_mod.host_load()})
    return RunOutcome(out, store, failed, interrupted, error)
