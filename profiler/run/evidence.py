"""Evidence rounds: extra, separately run cells whose instrumentation is too heavy for the
throughput rounds (stack probes, flamegraph sampling). Their numbers never enter the results table;
what they leave is stacks/*.json and flamegraphs/<cell>/, which the report links and quotes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from pathlib import Path

from netprof.profiler.core import atomic
from netprof.profiler.model import schema
from netprof.profiler.run.cell import CellEnv, CellHooks, run_cell
from netprof.profiler.run.plan import Cell, RunConfig

# Load after a sampling round's window: py-spy samples whole seconds (the window rounded up), and the
# backend must outlive the samplers' last reads (the mixed view reads its memory after perf stops). The
# off-CPU program compiles before the load starts (compiled inside the window, it needed 5 s of margin).
SAMPLER_MARGIN_S = 2.0


def sampling_extra(duration: float) -> float:
    """Seconds of load a sampling round adds to its `duration`-second window."""
    return math.ceil(duration) - duration + SAMPLER_MARGIN_S


# Extra seconds of load in a stacks round: the stacks are read at the end of the (normal) window
# while the backend still runs, and reading them takes well under a second; the round's run is cut
# (aborted) once they are read, so the margin is waited out only by a naming that needs it.
STACKS_EXTRA_S = 2.0
NATIVE_NOTE = ("kernel frame-pointer walk: the innermost frame (the libc wrapper) is exact; these builds have no "
               "frame pointers, so deeper native frames are missing or unreliable")


def evidence_cells(cfg: RunConfig) -> list[Cell]:
    """One evidence cell per combination of the run dimensions; round 0 marks it as not a throughput round."""
    return list(cfg.combinations(0))


def stacks_round(cell: Cell, env: CellEnv, stack_probes, out: Path) -> dict:
    """Run `cell` with the stack probes attached; write stacks/<cell slug>.json; return what it holds.

    The stacks are read `duration` seconds after measure_start, while the load still runs: frames
    are named from the live backend (its memory maps, its code objects), and a built-in backend
    exits as soon as the loader disconnects — read after that, every frame was `[unknown]`."""
    got: dict = {}
    window, loader = env.cfg.duration, env.loader

    def collect_later(pid: int) -> None:
        stack_probes.learn_threads()  # threads started since target(): one per connection, say

        def work() -> None:
            time.sleep(window)
            try:
                got["top"] = stack_probes.evidence(n=5)
            except Exception as e:  # naming failed: the round still leaves its file, saying why
                got["error"] = f"{type(e).__name__}: {e}"
            # Named: the load has served its purpose, and what is left of the margin kept for a slow naming
            # (STACKS_EXTRA_S) is not waited out. The abort is written before this thread ends, so before
            # the next cell's request (stacks_round joins it first): it can only end this cell's run.
            got["cut"] = True
            try:
                loader.abort()
            except Exception:  # noqa: BLE001 (a loader gone meanwhile: the run's own error says so)
                pass

        got["thread"] = threading.Thread(target=work, name=f"stacks-{pid}", daemon=True)
        got["thread"].start()

    longer = dataclasses.replace(env.cfg, duration=env.cfg.duration + STACKS_EXTRA_S)
    env = dataclasses.replace(env, cfg=longer, instruments=(),
                              hooks=CellHooks(started=stack_probes.target, measuring=collect_later))
    outcome = run_cell(cell, env)
    if "thread" in got:
        got["thread"].join(timeout=60)
    # A cell that failed gives no stacks, but one that failed only because this round cut its run short
    cut = got.get("cut") and "aborted" in str(outcome.row.get("error"))
    top = got.get("top", {}) if outcome.ok or cut else {}
    doc: dict = {name: [{"count": int(s["count"]), "frames": s["frames"], "python": s["python"],
                         "native": s["native"]} for s in stacks]
                 for name, stacks in top.items()}
    doc["_about"] = {"python_frames": stack_probes.python_note or "walked at each syscall (CPython 3.11 frame stack)",
                     "native_frames": NATIVE_NOTE, "error": got.get("error")}
    atomic.make_subdir(out, "stacks")
    atomic.write_text(out / "stacks" / f"{schema.cell_slug(outcome.row)}.json", json.dumps(doc, indent=1))
    return doc


def flamegraph_round(cell: Cell, env: CellEnv, out: Path) -> dict:
    """Run `cell` once more while sampling it; write flamegraphs/<cell>/ and return its index entry.

    When the backend's interpreter can describe its Python frames to perf (3.13's -X perf_jit, or
    -X perf on a frame-pointer build), the backend starts with that option and the round adds the
    mixed Python+kernel view; otherwise the index says why there is none.
    """
    from netprof.flamegraphs import DEFAULT_VIEWS, compile_offcpu, jitdump, sample

    out = out.resolve()
    cfg, interp = env.cfg, env.interp
    mixed_flag, mixed_note = interp.mixed_stack_flag()
    slug = schema.cell_slug({"backend": cell.backend, "interpreter": interp.label, "framing": cell.framing,
                             "connections": cell.connections, "pipeline": cell.pipeline, "pinned": cfg.pin})
    views = DEFAULT_VIEWS + (("mixed",) if mixed_flag else ())
    outdir = atomic.make_subdir(out, f"flamegraphs/{slug}")
    done: dict = {}
    offcpu = compile_offcpu(views)  # now, so the samplers start with the window

    def start_sampling(pid: int) -> None:
        title = f"{cell.backend}, {cell.connections} connections, pipeline {cell.pipeline}, {cell.framing} framing"

        def work() -> None:
            try:
                done["art"] = sample(pid, cfg.duration, str(outdir), title=title, views=views, offcpu=offcpu)
            except Exception as e:  # a sampler failure must not lose the run; the note says why
                done["error"] = f"{type(e).__name__}: {e}"

        done["thread"] = threading.Thread(target=work, name=f"sample-{slug}", daemon=True)
        done["thread"].start()

    longer = dataclasses.replace(cfg, duration=cfg.duration + sampling_extra(cfg.duration))
    options = ("-X", mixed_flag) if mixed_flag else ()
    try:
        outcome = run_cell(cell, dataclasses.replace(env, cfg=longer, instruments=(), python_options=options,
                                                     hooks=CellHooks(measuring=start_sampling)))
        if "thread" in done:
            done["thread"].join(timeout=cfg.duration + 60)
    finally:
        if offcpu[0] is not None:  # sample() closed it, unless the window never began (closing twice is fine)
            offcpu[0].close()
    if outcome.backend_pid:  # what -X perf/perf_jit leaves behind in /tmp
        jitdump.remove_reserved(outcome.backend_pid)
    entry = {**{k: outcome.row.get(k) for k in schema.CELL_KEYS}, "mixed_stacks": mixed_note,
             "dir": str(outdir.relative_to(out)), "load_ok": outcome.ok, "load_error": outcome.row.get("error"),
             "msgs_per_sec": outcome.row.get("msgs_per_sec")}
    art = done.get("art")
    if art is not None:
        entry.update({k: (str(Path(v).relative_to(out)) if isinstance(v, str) and v.startswith(str(out)) else v)
                      for k, v in dataclasses.asdict(art).items()})
    else:
        entry["notes"] = [done.get("error", "sampling did not run (the load never reached measure_start)")]
    return entry
