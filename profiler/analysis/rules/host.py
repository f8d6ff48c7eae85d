"""Whether the measurement can be trusted: rounds that disagree, a round held back by the machine
(other processes, steal) while neither the backend nor the loader was busy, and per-message counts from a probed
part shorter than one round of the server's connections."""

from __future__ import annotations

import pandas as pd

from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, Thresholds, rule
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num


@rule("noisy", consolidate=True, plots=("throughput",))
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
        found.append(Anomaly.at(r, "noisy", sev, f"Noisy measurement: {where(r)}", text, ev))
    return found


@rule("short_probed_part", consolidate=True, plots=("syscalls",))
def short_probed_part(ctx: Context) -> list[Anomaly]:
    """The probed part of the window was shorter than the server took to answer every request in flight once (its
    connections × pipeline at its rate): a call it makes once per round of its connections (a read of a pipelined
    batch) can fall wholly inside or outside the probed part, so the per-message counts are of part of a round.
    uvicorn_h11 at 1000 connections, 8 in flight (bench/reports/http): 8,000 requests at ~8.5k/s, a round of 0.94 s
    against a probed 0.6 s, its reads 0.13 per request in one run, 0.0095 and none in the rounds of another."""
    found = []
    for _, r in ctx.cells.iterrows():
        probed, mps = num(r, "probed.duration_s"), num(r, "mps_mean")
        if not probed or not mps or num(r, "rate"):  # no probed part; or open loop: no fixed round
            continue
        in_flight = int(r["connections"]) * int(r.get("pipeline") or 1)
        cycle = in_flight / mps
        if cycle <= probed:
            continue
        each = units.per_unit(r.get("protocol"))
        ev = {"requests in flight (connections × pipeline)": in_flight, "one round of them, s": r2(cycle),
              "probed part, s": r2(probed)}
        text = (f"{where(r)} took {units.seconds(cycle)} to answer each of its {in_flight:,} "
                f"{units.exchanges(r.get('protocol'))} in flight once (at {units.rate(mps)} "
                f"{units.rate_unit(r.get('protocol'))}), longer than the probed part of its window "
                f"({units.seconds(probed)}): a call it makes once per round of its connections (a read that takes a "
                f"pipelined batch) may fall wholly inside or outside the probed part, so its syscalls {each} are of "
                "part of a round. A longer --duration (the probed part is --probe-share of it) covers a whole one.")
        found.append(Anomaly.at(r, "short_probed_part", "info", f"Probed part shorter than a round: {where(r)}",
                                text, ev))
    return found


@rule("machine_busy", plots=("throughput",))
def machine_busy(ctx: Context) -> list[Anomaly]:
    """A round fell ≥ 15% below its cell's best round while neither the backend nor the loader was busy
    (> 0.9 of a core): what held it back was outside both — the machine (other processes, steal)."""
    t = ctx.t
    found: list[Anomaly] = []
    if "status" not in ctx.df or "msgs_per_sec" not in ctx.df:
        return []
    host = {(e.get("cell"), e.get("round")): e for e in ctx.meta.get("host_per_cell") or [] if isinstance(e, dict)}
    df = schema.normalize(ctx.df)
    df = df[df["status"] == "ok"]
    for _, g in df.groupby(schema.CELL_KEYS, dropna=False, sort=False):
        if len(g) < 2:
            continue
        best = g.loc[g["msgs_per_sec"].idxmax()]
        found.extend(_busy_round(r, best, host) for _, r in g.iterrows() if _held_back(r, best, t))
    return found


def _held_back(r, best, t: Thresholds) -> bool:
    """The round fell far below its cell's best while neither the backend nor the loader was saturated."""
    busy, lf = num(r, "cpu.busy_frac"), num(r, "loader_cpu.cpu_frac")
    if float(r["msgs_per_sec"]) >= (1 - t.machine_busy_drop) * float(best["msgs_per_sec"]) or busy is None \
            or lf is None:
        return False
    return not (busy > t.machine_busy_core or lf > t.machine_busy_core)  # a saturated one set the pace


def _busy_round(r, best, host: dict) -> Anomaly:
    mps, top = float(r["msgs_per_sec"]), float(best["msgs_per_sec"])
    busy, lf = num(r, "cpu.busy_frac") or 0.0, num(r, "loader_cpu.cpu_frac") or 0.0
    rnd = int(r["round"])
    ev = {"msgs/s this round": round(mps), f"msgs/s best round ({int(best['round'])})": round(top),
          "backend busy (share of one CPU)": r2(busy), "loader CPU (share of its CPUs)": r2(lf)}
    text = (f"Round {rnd} of {where(r)} made {units.count(mps)} {units.rate_unit(r.get('protocol'))}, "
            f"{100 * (1 - mps / top):.0f}% below its best "
            f"round ({units.count(top)}), while the backend used {100 * busy:.0f}% of a CPU and the loader "
            f"{100 * lf:.0f}% of its CPUs: neither was the limit, so something outside them held the round "
            "back. ")
    text += _host_figures(host.get((schema.cell_slug(r), rnd)), ev)
    text += "Machine busy: this measurement is not trustworthy; re-run it on a quiet machine."
    title = f"Machine busy: measurement not trustworthy: {where(r)}, round {rnd}"
    return Anomaly.at(r, "machine_busy", "warning", title, text, ev)


def _host_figures(h: dict | None, ev: dict) -> str:
    """What meta.json's host_per_cell saw of the machine during the cell (runner.py records it)."""
    if not h:
        return ""
    ev["1-min load average before / after the cell"] = f"{h.get('loadavg_before')} / {h.get('loadavg_after')}"
    if h.get("steal_frac") is not None:
        ev["CPU time stolen by the hypervisor during the cell"] = f"{100 * h['steal_frac']:.1f}%"
    if h.get("busy_cpus") is None:
        return ""
    ev["CPUs busy during the cell (all processes)"] = r2(h["busy_cpus"])
    return (f"During the cell the machine's CPUs were busy {h['busy_cpus']:.2f} on average (every "
            f"process) and {100 * (h.get('steal_frac') or 0):.1f}% of CPU time was stolen. ")


def _rounds_of(df: pd.DataFrame, r) -> list[float]:
    g = schema.select(schema.normalize(df), r)
    if "status" in g:
        g = g[g["status"] == "ok"]
    return [float(v) for v in g["msgs_per_sec"]]


@rule("probe_spill", consolidate=True, plots=("throughput",))
def probe_spill(ctx: Context) -> list[Anomaly]:
    """A round whose probes attached after the probed sub-window began, or stayed attached past the guard
    after it (probed.late_ms, probed.spill_ms, measured per round): its headline figures hold probed time."""
    t, df = ctx.t, ctx.df
    if "probed.spill_ms" not in df or "probed.late_ms" not in df:
        return []
    found = []
    bad = df[(df["probed.spill_ms"].fillna(0) > t.probe_spill_ms) | (df["probed.late_ms"].fillna(0) > t.probe_spill_ms)]
    keys = [k for k in schema.CELL_KEYS if k in bad]
    for _, g in bad.groupby(keys, dropna=False, sort=False):
        r = g.iloc[0]
        late, spill = float(g["probed.late_ms"].max()), float(g["probed.spill_ms"].max())
        guard = num(r, "probed.guard_s")
        ev = {"rounds affected": ", ".join(str(int(x)) for x in sorted(g["round"].dropna())) if "round" in g else None,
              "attached after the probed part began, at most (ms)": r2(late),
              "detached after the guard ended, at most (ms)": r2(spill),
              "guard on each side (ms)": r2(1e3 * guard) if guard else None}
        what = " and ".join(w for w in (f"attached up to {late:.0f} ms late" if late else "",
                                         f"stayed attached up to {spill:.0f} ms past the guard" if spill else "") if w)
        clean = len(schema.select(df, r)) - len(g)
        text = (f"In {where(r)} the probes {what}: "
                f"part of that round's headline window ran with probes on, so its {units.rate_unit(r.get('protocol'))} "
                "and latency include some of their cost (the probed part's counts miss the late time). Attaching a "
                "tracepoint stops every CPU for a moment; on a host whose CPUs are descheduled (steal) that takes "
                "far longer than the guard. Re-run the cell"
                + (f", or read its {clean} other rounds, which were clean." if clean > 0 else "."))
        found.append(Anomaly.at(r, "probe_spill", "warning", f"Probes outside their guard: {where(r)}", text, ev))
    return found
