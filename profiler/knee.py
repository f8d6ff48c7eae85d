"""`netprof knee SERVER --slo p99<5ms`: the highest request rate a server serves within a latency objective.

One server is started once and kept warm (warm.py). A closed-loop cell first measures its ceiling (the
most it answers with `-c` connections); then open-loop cells (`rate`, latency from each request's intended
time) bisect between 0 and that ceiling: a rate passes when the objective's percentile is within the limit
and the server kept up (achieved ≥ 95% of the rate: the `overloaded` rule's threshold). A request that
came due while its connection still had `--pipeline` in flight waited in the loader, and that wait is in
its latency (from the intended time), so the objective judges it; `behind` alone does not fail a rate.
It did until 2026-11-27: with 1% behind as a limit the knee was the rate at which 1% of requests found
their connection busy (at -c 10, p99 against 10/rate: a sub-millisecond tail that this host's regimes
move), never the objective, and three runs gave knees up to 56% apart (bench/RESULTS.md). After `--steps`
probes (default 6: the knee to 1/64 of the ceiling) the knee is the highest rate that passed. Every cell's
row goes to the results directory, so the report draws latency against load and its rules say why the curve
bends there (`latency_knee`); knee.json keeps the search (docs/results-format.md). The lowest rate that failed
gets a second look at the end (search()): when it passes the bisection goes on above it, and the search ends on
a rate that failed twice (or after `LOOKS` second looks). Where every rate up to the ceiling passed, the ceiling
is measured once more and a higher one lets the search go on above the first.

A rate fails only when `--tries` cells in a row fail it (default 3), and the ceiling is the best of as many
closed-loop cells. Why: this host runs a CPU in speed regimes about 1.7× apart for 0.3–3 s at a time
(docs/facts.md), so one 2 s cell that lands in a slow one fails a rate the server serves in its usual one,
and the bisection never comes back above it: with one cell per rate, three runs gave knees 46–78% apart
(bench/RESULTS.md). The slow regime is the host's, not the server's; as timeit takes the best of its
repeats, the knee takes the best of its tries. Every cell stays a row, and knee.json counts the tries. A cell
during which the hypervisor took more than STOLEN of the host's CPU (/proc/stat) fails for the host, whatever
the server does: it is not one of the tries (tried()). So is a failing cell in which the host ran the backend's CPU
slow: the speed canary (core/canary.py) runs on that CPU through the search, and a cell whose slowest 0.3 s of
it ran SLOWED slower than the run's usual was failed by the host's speed regime, which steal does not show.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from netprof.profiler.core import atomic, runlock, units
from netprof.profiler.core.procs import ProcessError, ProcessGroup, parse_cpus
from netprof.profiler.kit.rule_registry import Thresholds
from netprof.profiler.knee_plan import KneePlan, Slo
from netprof.profiler.model import hostspeed, results
from netprof.profiler.model.results import ResultsStore
from netprof.profiler.run import interpreters
from netprof.profiler.run import meta as meta_mod
from netprof.profiler.run.canary import Canary, RecordingLoader
from netprof.profiler.run.cell import CellEnv, run_cell
from netprof.profiler.run.plan import connection_cap, loader_cpus
from netprof.profiler.run.runner import close_instruments, cost_and_close, open_instruments
from netprof.profiler.run.stop import raise_if_stopped
from netprof.profiler.run.warm import WarmServer

KNEE_JSON = results.KNEE_JSON
SCHEMA = "netprof.knee/1"
# Second looks at the lowest rate that failed, at most (search()): each one that passes costs a bisection above it
# (a few probes), so a run of bad minutes cannot keep the search going.
LOOKS = 3
# A failing cell during which the hypervisor took more than this share of the host's CPU time (/proc/stat's steal,
# meta.json's host_per_cell) is the host's, not the server's: it does not count as one of the rate's --tries, and
# another cell is measured, STOLEN_EXTRA more at most. 2026-12-02: one knee run of a pair ran at 22% steal (42%
# at worst) and failed uvicorn at 28.5k/s in all six cells of two looks, where the other, at none, passed 52k/s;
# ~1-3% on an ordinary hour (tests/helpers.py STEAL_REMEASURE is the same line for the suite's measured figures).
STOLEN = 0.1
STOLEN_EXTRA = 3
# A failing cell whose backend CPU ran its slowest stretch (hostspeed.STRETCH, 0.3 s) this much slower than usual
# (the speed canary's loop over the stretch against its median over every cell of the run so far) was failed by
# the host's speed regime: not one of the tries either, within the same STOLEN_EXTRA. This host runs a CPU in
# regimes about 1.5-1.7x apart for 0.3-3 s (docs/facts.md) and steal shows none of it; a server near its knee
# that loses a third of its CPU for 0.3 s queues tens of ms of work, and the cell fails on the host's moment.
# 2026-12-04, 21 uvicorn knee runs (bench/RESULTS.md "the knee against the host's slow stretches"): the 356 tries'
# figures form two modes, around 1.0 and 1.4, with a trough at 1.25-1.35; the canary does not slow under the
# server's own load (a CPU-bound spinner on its CPU: median loop 75-77 µs beside it, 78-80 alone). Unlike steal,
# a rate every try of which the host slowed still fails as the server's (tried()): the regimes are this host's
# weather, and a search they ended would find no knee on many of its hours. The median is the run's own, so a
# run that spends most of its cells slow judges against the slow regime (the rule then does less, not more).
SLOWED = 1.35
# The canary outlives any knee run (it is bounded by itself too; the run's ProcessGroup stops it at the end)
CANARY_S = 6 * 3600.0
# What can set a failing cell's limit before the server: the loader (loader_limit()), or the host, when the
# hypervisor stole from every try of a rate (tried()). A probe limited so says nothing of the server, nor would a
# higher rate: the search ends there (search()).
NOT_THE_SERVER = ("loader", "host")
# Once above the rates' lines, so that each says only its share ("(5.2% waited for a connection)"): a rate's line was
# ~190 characters with this on each.
WAITED_NOTE = ("open loop: latency from each request's intended time; a request's wait in the loader for a free "
               "connection is in it")


@dataclass
class Probe:
    """One measured cell: rate 0 is the closed-loop ceiling."""

    rate: float
    achieved: float | None
    latency_us: float | None  # the objective's percentile
    met: bool
    why: str  # why it passed or failed, in a few words
    row: dict = field(repr=False)
    tries: int = 1  # cells measured at this rate: the first that passed, or all `--tries` failing
    recheck: bool = False  # the search's second look at the lowest rate that failed (search())
    attempts: tuple[Probe, ...] = ()  # every try of this rate in order, this one last (tried())
    # what set the cell's limit: "server", "loader" (loader_limit()), "host" (tried()) or "none" (it passed)
    limited_by: str = "none"
    steal: float | None = None  # share of the host's CPU time the hypervisor took during the cell (STOLEN)
    # the speed canary's slowest stretch of the cell over its usual loop time (SLOWED); None without samples
    slowed: float | None = None

    def record(self, slo: Slo) -> dict:
        """knee.json's probe: the try that decided the rate, and every try with its own verdict (the report's
        tables average a rate's tries as rounds of one cell: this says which passed)."""
        return {**self._figures(slo), "tries": self.tries, "recheck": self.recheck,
                "attempts": [a._figures(slo) for a in self.attempts or (self,)]}

    def _figures(self, slo: Slo) -> dict:
        ol = self.row.get("open_loop") or {}
        return {"rate": self.rate, "achieved": self.achieved, f"{slo.stat}_us": self.latency_us,
                "p99_sent_us": (self.row.get("lat_sent_us") or {}).get("p99"),
                "behind_share": ol.get("behind_share"), "achieved_share": ol.get("achieved_share"),
                "conns_max": ol.get("conns_max"), "round": self.row.get("round"),
                "met": self.met, "why": self.why, "limited_by": self.limited_by, "steal": self.steal,
                "slowed": None if self.slowed is None else round(self.slowed, 4)}

    @property
    def stolen(self) -> bool:
        """The hypervisor took more than STOLEN of the host during the cell: a failure of the host's."""
        return (self.steal or 0.0) > STOLEN

    @property
    def slow_host(self) -> bool:
        """The host ran the backend's CPU SLOWED slower than usual for a stretch of the cell."""
        return (self.slowed or 0.0) >= SLOWED

    def host_note(self) -> str:
        """What the host did in a failing cell that made it not one of the tries, or ''."""
        if self.met:
            return ""
        if self.stolen:
            return f" (the hypervisor took {self.steal:.0%} of the host's CPU meanwhile)"
        if self.slow_host:
            return (f" (the host ran the backend's CPU {self.slowed:.2f}x slower than usual for "
                    f"{hostspeed.STRETCH_S:g} s of it)")
        return ""


def tried(measure: Callable[[], Probe], tries: int) -> Probe:
    """Cells of one rate until one passes or `tries` failed: the first that passes, else the last that failed,
    with the count. A failing cell the hypervisor stole from (Probe.stolen) or during which the host ran the
    backend's CPU slow (Probe.slow_host) is not one of the `tries`: another is measured in its place, STOLEN_EXTRA
    at most. A rate that failed only in stolen cells, all of them, is limited by the host: it says nothing of the
    server (2026-12-02: a knee run stolen from in all 36 of its cells bisected down to 576/s, where its pair, on a
    quiet stretch, passed 40k/s). One the host slowed in every try fails as the server's, saying so (SLOWED)."""
    seen: list[Probe] = []
    while True:
        probe = measure()
        seen.append(probe)
        failed = sum(not q.stolen and not q.slow_host for q in seen)
        if probe.met or failed >= tries or len(seen) >= tries + STOLEN_EXTRA:
            probe = dataclasses.replace(probe, tries=len(seen), attempts=tuple(seen))
            if probe.met or failed:
                return probe
            if not all(q.stolen for q in seen):
                slowed = sorted(q.slowed or 0.0 for q in seen if q.slow_host)
                return dataclasses.replace(probe, why=(
                    f"{probe.why}; the host slowed or stole from each of the {len(seen)} tries (the backend's CPU "
                    f"up to {slowed[-1]:.2f}x slower for {hostspeed.STRETCH_S:g} s)"))
            took = sorted(q.steal or 0.0 for q in seen)
            return dataclasses.replace(probe, limited_by="host", why=(
                f"{probe.why}; the host ran out: the hypervisor took {took[0]:.0%}-{took[-1]:.0%} of its CPU in "
                f"each of the {len(seen)} tries"))


def loader_limit(row: dict, slo: Slo, t: Thresholds) -> str | None:
    """Why the loader, not the server, set the limit of this open-loop cell that missed the objective, or None:
    its CPUs were busy; or the server answered within the objective once a request was sent (its latency from
    the send) and the time over it was spent in the loader: requests sent late on a free connection, or waiting
    with every connection it may open (--max-connections) busy. (A server that falls behind, or answers
    slowly, fills every connection the loader may open: that cap reached is the server's limit, not the
    loader's.)"""
    ol = row.get("open_loop") or {}
    cpu = (row.get("loader_cpu") or {}).get("cpu_frac")
    if cpu is not None and cpu >= t.knee_loader_cpu:
        return f"its CPUs were {cpu:.0%} busy"
    sent = (row.get("lat_sent_us") or {}).get(slo.stat)
    share = ol.get("achieved_share")
    if sent is None or sent > slo.limit_us or (share is not None and share < 1 - t.overload_shortfall):
        return None  # the server was slow or behind: its own limit
    late, n = ol.get("loader_late") or 0, ol.get("sent") or 0
    if n and late / n > t.loader_late_warning_share:
        return (f"it sent {late / n:.1%} of the requests late on a free connection, and the server answered them "
                f"within the objective once sent ({slo.stat} {sent:,.0f} µs from the send)")
    cap, most, behind = ol.get("max_connections"), ol.get("conns_max"), ol.get("behind_share")
    if cap and most is not None and most >= cap and behind is not None and behind > t.overload_behind_share:
        return (f"all {cap:,} connections it may open were busy and {behind:.1%} of the requests waited for one, "
                f"while the server answered within the objective once sent ({slo.stat} {sent:,.0f} µs from the "
                "send; --max-connections)")
    return None


def judge(row: dict, rate: float, slo: Slo, t: Thresholds) -> Probe:
    """Did this open-loop cell meet the objective, with the server keeping up? A cell that did not, where the
    loader ran out first (loader_limit), is limited by the loader: it says nothing of the server."""
    probe = _judge(row, rate, slo, t)
    if probe.met:
        return probe
    why = loader_limit(row, slo, t)
    if why is not None:
        return dataclasses.replace(probe, limited_by="loader", why=f"{probe.why}; the loader ran out: {why}")
    return dataclasses.replace(probe, limited_by="server")


def _judge(row: dict, rate: float, slo: Slo, t: Thresholds) -> Probe:
    achieved = row.get("msgs_per_sec")
    lat = (row.get("lat_us") or {}).get(slo.stat)
    ol = row.get("open_loop") or {}
    share = ol.get("achieved_share")
    if row.get("status") != "ok" or achieved is None or lat is None:
        return Probe(rate, achieved, lat, False, f"the cell failed: {row.get('error')}", row)
    if share is not None and share < 1 - t.overload_shortfall:
        return Probe(rate, achieved, lat, False, f"overloaded: achieved {share:.0%} of the rate", row)
    share_waited = ol.get("waited_share")  # stats.open_loop
    # in the latency (from the intended time), as the terminal's line above the rates says (WAITED_NOTE)
    waited = (f" ({share_waited:.1%} waited for a connection)"
              if share_waited is not None and share_waited > t.overload_behind_share else "")
    near = abs(lat - slo.limit_us) < 0.01 * slo.limit_us  # '5 ms within the 5 ms limit' would read as a tie
    said = f"{slo.stat} " + (f"{lat:,.0f} µs" if near else units.duration_us(lat))  # '108 ms', not '107,741 µs'
    limit = units.duration_us(slo.limit_us)
    if lat > slo.limit_us:
        return Probe(rate, achieved, lat, False, f"{said} over the {limit} limit{waited}", row)
    return Probe(rate, achieved, lat, True, f"{said} within the {limit} limit{waited}", row)


def search(measure: Callable[[float], Probe], ceiling: float, steps: int, looks: int = LOOKS,
           again: Callable[[], float | None] | None = None) -> tuple[list[Probe], float, float]:
    """Bisection on (0, ceiling]: each probe halves the interval between the highest rate that passed (lo,
    0 at first) and the lowest that failed (hi, the ceiling at first), down to ceiling / 2**steps. Then a
    second look at the lowest rate that failed (a Probe with `recheck`): a bisection follows one path, so a
    rate that failed all its tries on a bad moment of the host (bench/RESULTS.md: granian_rsgi failed 25,666/s
    in one run of three and passed 26,862 and 29,116/s in the others) kept every later probe below it. When
    the second look passes, the search goes on above it, between it and the next rate that failed (or the
    ceiling), to the same resolution, and the lowest rate that failed then gets its own second look: the search
    ends on a rate that failed twice, or after `looks` second looks. One look was not enough: a slow minute
    failed three rates in a row of one knee run (bench/RESULTS.md, 2026-12-01 pair 3: 31.6k, 26.4k and 23.7k/s at
    p99 6-46 ms), the second look passed the lowest and the search then stopped below the next, at 0.61 of the
    ceiling where the other five runs found 0.74-0.88.

    The ceiling is a measurement too: where every rate up to it passed, `again()` measures it once more (the
    best of its closed-loop cells, or None), and a higher one lets the search go on above the old (bench/RESULTS.md,
    2026-12-02: three runs' first ceilings, measured in slow stretches at 31.6-42.1k/s, came out at 51.8-63.7k/s
    the second time). Returns the probes and (lo, hi), hi the final ceiling when no rate failed."""
    resolution = float(ceiling) / 2 ** steps
    top = float(ceiling)
    failed = [top]  # rates that failed, and the ceiling (above it nothing is probed)
    probes: list[Probe] = []

    def bisect(lo: float, hi: float, budget: int) -> tuple[float, float]:
        for _ in range(budget):
            rate = max(1, round((lo + hi) / 2))
            if rate <= lo or rate >= hi:  # the interval is down to 1 request/s
                break
            p = measure(rate)
            probes.append(p)
            if p.limited_by in NOT_THE_SERVER:  # it says nothing of the server, nor would a higher rate: stop here
                break
            if p.met:
                lo = rate
            else:
                hi = rate
                failed.append(rate)
        return lo, hi

    def ran_out() -> bool:
        return bool(probes) and probes[-1].limited_by in NOT_THE_SERVER

    lo, hi = bisect(0.0, top, steps)
    for _ in range(looks + 1):  # each second look, and the ceiling's once
        if ran_out():
            break
        if hi < top:  # a rate failed: look at the lowest that did again
            if sum(q.recheck for q in probes) >= looks:
                break
            p = dataclasses.replace(measure(hi), recheck=True)
            probes.append(p)
            if not p.met:  # failed twice: the search ends on it
                break
            lo, hi = hi, min(r for r in failed if r > hi)
        else:  # every rate up to the ceiling passed: measure the ceiling again, once
            higher = again() if again is not None else None
            again = None
            if higher is None or higher <= top + resolution:
                break
            failed.remove(top)
            top = hi = float(higher)
            failed.append(top)
        lo, hi = bisect(lo, hi, max(0, math.ceil(math.log2(max((hi - lo) / resolution, 1)))))
    if ran_out():
        hi = float(probes[-1].rate)
    return probes, lo, hi


@dataclass
class KneeOutcome:
    out_dir: Path
    doc: dict | None = None
    failed: str | None = None
    interrupted: bool = False


def execute(p: KneePlan, argv: list[str], console: Console, out_dir: str = "") -> KneeOutcome:
    """The ceiling, then the search, under the machine's run lock; the rows and knee.json in the results
    directory. `console`: one line per cell (stderr)."""
    with runlock.run_lock(wait=p.wait):
        return _run(p, argv, console, Path(out_dir) if out_dir else runlock.unique_out_dir())


def _run(p: KneePlan, argv: list[str], console: Console, out: Path) -> KneeOutcome:
    store = ResultsStore(out)
    config = p.cfg.to_dict() | {"loader_cpus_effective": loader_cpus(p.cfg), "out_dir": str(out),
                                "knee": {"slo": p.slo.text(), "steps": p.steps, "arrivals": p.arrivals}}
    meta = meta_mod.collect(argv, config)
    store.write_meta(meta)
    outcome = KneeOutcome(out)
    t = Thresholds()
    started = time.monotonic()
    instruments: list = []
    probes: list[Probe] = []
    ceiling: Probe | None = None
    bounds = (0.0, 0.0)
    try:
        interp = interpreters.prepare(p.cfg.pythons[0])
        meta["interpreters"] = [interp.describe()]
        instruments = open_instruments(p.cfg)
        warm = WarmServer(p.label, p.cfg, interp)
        with ProcessGroup() as group:
            canary = Canary.start(group, (parse_cpus(p.cfg.backend_cpu) or [0])[0], CANARY_S)
            loader = RecordingLoader.start(group, cpus=loader_cpus(p.cfg), threads=p.cfg.loader_threads)
            assert isinstance(loader, RecordingLoader)
            try:
                warm.start(loader)
            except ProcessError as e:
                outcome.failed = f"the {p.label} server did not start: {e}"
                return outcome
            try:
                canary.wait_started()  # its interpreter's start falls before the first cell
                k = 0
                spans: list[tuple[float, float]] = []  # every cell's headline spans: the canary's usual speed

                def host_speed() -> dict:
                    """The last cell's canary figures for meta.json: its median and slowest stretch, the run's
                    usual loop time so far (µs; kept so that another reference than the run's median, the cells'
                    lower quartile say, can be judged on them), and the ratio SLOWED reads; None without samples."""
                    cell_spans = hostspeed.headline_spans(loader.events)
                    spans.extend(cell_spans)
                    median = slowest = usual = math.nan
                    if cell_spans:
                        samples = canary.samples(until=cell_spans[-1][1])
                        median = hostspeed.loop_ns(samples, cell_spans)
                        slowest = hostspeed.slowest_stretch_ns(samples, cell_spans)
                        usual = hostspeed.loop_ns(samples, spans)
                    figures = {"canary_us": median / 1e3, "canary_slowest_us": slowest / 1e3,
                               "canary_usual_us": usual / 1e3, "canary_slowed": slowest / usual}
                    return {name: None if math.isnan(v) else round(v, 4) for name, v in figures.items()}

                def cell(rate: float) -> dict:
                    nonlocal k
                    raise_if_stopped()
                    k += 1
                    assert warm.cfg is not None
                    cfg = (dataclasses.replace(warm.cfg, extra_dims={"rate": [rate]}, arrivals=p.arrivals) if rate
                           else warm.cfg)
                    host_before = meta_mod.host_load()
                    out_ = run_cell(next(cfg.combinations(k)), CellEnv(cfg, loader, interp,
                                                                       instruments=tuple(instruments)))
                    warm.as_started(out_.row)
                    out_.row.setdefault("rate", 0)  # the closed-loop ceiling: rate 0 in its row, as schema reads it
                    meta_mod.add_cell_load(meta, out_.row, host_before)  # a slow try's host, as a run's cells
                    meta["host_per_cell"][-1].update(host_speed())
                    store.write_meta(meta)
                    store.add(out_.row, out_.per_conn_messages, out_.conn_rows, out_.timeline)
                    # a server gone, or one the cell could not attach to, says nothing of a rate: the run ends
                    # (2026-12-02: its pid taken for reused, every later cell failed and the knee came out at the
                    # one rate measured before: procs.start_ticks)
                    if not out_.ok and (gone := warm.failure() or out_.server_error):
                        raise ProcessError(gone)
                    return out_.row

                ceiling = best_ceiling([cell(0) for _ in range(p.tries)], p.slo)
                achieved = ceiling.achieved
                console.print(f"ceiling (closed loop, c={p.cfg.connections[0]}, best of {ceiling.tries}): "
                              f"{achieved or 0:,.0f} {units.rate_unit(p.cfg.protocol)}, "
                              f"{p.slo.stat} {ceiling.latency_us or 0:,.0f} µs",
                              markup=False, highlight=False)
                if not achieved:
                    outcome.failed = f"the closed-loop cells measured nothing: {ceiling.row.get('error')}"
                    return outcome
                console.print(WAITED_NOTE, markup=False, highlight=False)

                def once(rate: float) -> Probe:
                    host = meta["host_per_cell"]
                    probe = dataclasses.replace(judge(cell(rate), rate, p.slo, t), steal=host[-1].get("steal_frac"),
                                                slowed=host[-1].get("canary_slowed"))
                    most = (probe.row.get("open_loop") or {}).get("conns_max")
                    conns = f" on up to {most:,} connections" if most and most > p.cfg.connections[0] else ""
                    console.print(f"{rate:>10,.0f}/s: achieved {probe.achieved or 0:,.0f}/s{conns}, {probe.why} → "
                                  f"{'pass' if probe.met else 'fail'}{probe.host_note()}",
                                  markup=False, highlight=False)
                    return probe

                ceilings = [ceiling]

                def again() -> float | None:
                    """Every rate up to the ceiling passed: the ceiling's closed-loop cells once more."""
                    nonlocal ceiling
                    ceilings.append(best_ceiling([cell(0) for _ in range(p.tries)], p.slo))
                    ceiling = best_of(ceilings)
                    console.print(f"every rate up to the ceiling passed; measured again: "
                                  f"{ceilings[-1].achieved or 0:,.0f} {units.rate_unit(p.cfg.protocol)}",
                                  markup=False, highlight=False)
                    return ceilings[-1].achieved

                probes, lo, hi = search(lambda rate: tried(lambda: once(rate), p.tries), achieved, p.steps,
                                        again=again)
                bounds = (lo, hi)
            except ProcessError as e:
                outcome.failed = str(e)
            finally:
                canary.close()
                warm.stop()
        cost_and_close(instruments, meta)  # what each costs on this host, as `run` records it
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        close_instruments(instruments)
        store.write_meta({**meta, "host_after": meta_mod.host_load()})
    if ceiling is not None:
        outcome.doc = document(p, ceiling, probes, bounds, time.monotonic() - started, outcome)
        atomic.write_text(out / KNEE_JSON, json.dumps(outcome.doc, indent=1, default=str))
    return outcome


def best_ceiling(rows: list[dict], slo: Slo) -> Probe:
    """The closed-loop cell that answered the most (of those that ran ok), as the ceiling's Probe."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("msgs_per_sec")]
    row = max(ok, key=lambda r: r["msgs_per_sec"]) if ok else rows[-1]
    return Probe(0, row.get("msgs_per_sec") if ok else None, (row.get("lat_us") or {}).get(slo.stat), False,
                 "closed loop: the ceiling", row, tries=len(rows))


def best_of(ceilings: list[Probe]) -> Probe:
    """The ceiling measured first and again (search()'s `again`): the best, its tries all of theirs, `recheck`
    when there was a second measure, each measure in `attempts` (in order)."""
    best = max(ceilings, key=lambda c: c.achieved or 0)
    return dataclasses.replace(best, tries=sum(c.tries for c in ceilings), recheck=len(ceilings) > 1,
                               attempts=tuple(ceilings))


def document(p: KneePlan, ceiling: Probe, probes: list[Probe], bounds: tuple[float, float], elapsed: float,
             outcome: KneeOutcome) -> dict:
    lo, hi = bounds
    done = not outcome.failed and not outcome.interrupted
    # A probe the loader or the host limited ends the search (search()): the knee is then not found for the server
    ran_out = next((q for q in probes if q.limited_by in NOT_THE_SERVER), None)
    return {
        "schema": SCHEMA, "server": p.label, "connections": p.cfg.connections[0], "pipeline": p.cfg.pipeline[0],
        # the open-loop cells' connections: up to the cap, opened as requests needed them; the most open at once
        "max_connections": connection_cap(p.cfg.connections[0], p.cfg.max_connections),
        "conns_max": max((a["conns_max"] or 0 for q in probes for a in q.record(p.slo)["attempts"]),
                         default=None) or None,
        "slo": {"text": p.slo.text(), "stat": p.slo.stat, "limit_us": p.slo.limit_us}, "arrivals": p.arrivals,
        "window_s": p.cfg.duration,
        "tries": p.tries,
        # measured again (`remeasured`) when every rate up to it passed: the best of all its cells
        "ceiling": {"msgs_per_sec": ceiling.achieved, f"{p.slo.stat}_us": ceiling.latency_us, "tries": ceiling.tries,
                    "remeasured": ceiling.recheck, "measures": [c.achieved for c in ceiling.attempts or (ceiling,)]},
        "probes": [q.record(p.slo) for q in probes],
        # the highest rate that passed; None when none did (the knee is below the lowest probed rate)
        "knee": (lo or None) if done and ran_out is None else None, "bounds": [lo, hi],
        "knee_share_of_ceiling": lo / ceiling.achieved if done and ran_out is None and lo and ceiling.achieved
        else None,
        "stop": ("failed" if outcome.failed else "interrupted" if outcome.interrupted
                 else ran_out.limited_by if ran_out is not None else "steps"),
        # what ran out before the server, at which rate and why ("loader" or "host": NOT_THE_SERVER)
        **{f"{by}_ran_out": {"rate": ran_out.rate, "why": ran_out.why} if ran_out and ran_out.limited_by == by
           else None for by in NOT_THE_SERVER},
        "elapsed_s": round(elapsed, 1),
    }
