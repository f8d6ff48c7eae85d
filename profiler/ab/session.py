"""The run: the servers warm, the pairs (or turns) played until the interval is within --precision or
--max-time ends, and the results directory written."""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from netprof.profiler.ab import document
from netprof.profiler.ab.plan import (
    AB_JSON,
    CANARY_SLACK_S,
    GEN_BLOCKS,
    GEN_WARMUP_S,
    MAX_STALLS,
    PROBE_PAIRS,
    PROBED_TOTALS,
    TURNS_PARQUET,
    AbPlan,
)
from netprof.profiler.ab.records import (
    CellRecord,
    Pairs,
    Stall,
    _generation_records,
    converged,
    figures,
)
from netprof.profiler.analysis import compare
from netprof.profiler.core import atomic, runlock
from netprof.profiler.core.procs import ProcessError, ProcessGroup, parse_cpus
from netprof.profiler.model import hostspeed, metrics
from netprof.profiler.model.results import ResultsStore
from netprof.profiler.report import compare_report
from netprof.profiler.run import evidence, interpreters
from netprof.profiler.run import meta as meta_mod
from netprof.profiler.run import turns as turns_mod
from netprof.profiler.run.canary import Canary, RecordingLoader
from netprof.profiler.run.cell import CellEnv, run_cell
from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.plan import (
    loader_cpus,
)
from netprof.profiler.run.runner import close_instruments, cost_and_close, open_instruments
from netprof.profiler.run.stop import raise_if_stopped
from netprof.profiler.run.warm import WarmServer

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
            outcome.doc = document.build(self, out, warm)
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
                raise_if_stopped()
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
                                   if c.startswith(metrics.KERNEL_OP_PREFIXES) or c in PROBED_TOTALS}
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
        spans = hostspeed.headline_spans(loader.events)
        canary = (hostspeed.loop_ns(self.canary.samples(until=spans[-1][1]), spans) if spans and self.canary
                  else math.nan)
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
