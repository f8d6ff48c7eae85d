"""The answer: compare's document for the pairs, the verdicts, the warnings, and the lines a terminal shows."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape

from netprof.profiler.ab.plan import GEN_BLOCKS, GEN_WARMUP_S, LOG_JUDGED, METHOD, METHOD_TURNS, AbPlan, Variant
from netprof.profiler.ab.records import CellRecord, Pairs, _value
from netprof.profiler.analysis import compare
from netprof.profiler.analysis import fail_if as fail_if_rules
from netprof.profiler.core import units
from netprof.profiler.kit.rule_registry import Thresholds
from netprof.profiler.model import metrics, paired
from netprof.profiler.report import compare_report
from netprof.profiler.run import turns as turns_mod
from netprof.profiler.run.warm import WarmServer


def comp_canary_shift(comp: Pairs) -> dict:
    """The canary's own NEW/BASE ratio over the kept pairs: the adjustment assumes no variant slows the canary,
    so this should hold 1."""
    loops = [(b.canary_ns, n.canary_ns) for b, n, _ in comp.kept() if b.canary_ns > 0 and n.canary_ns > 0]
    if len(loops) < 2:
        return {}
    c = paired.judge([b for b, _ in loops], [n for _, n in loops])
    return {"ratio": c["ratio"], "ratio_lo": c["ratio_lo"], "ratio_hi": c["ratio_hi"], "p": c["p"]}


def _round_ratios(rows: list[dict], base: str, new: str) -> dict[int, list[list[float]]]:
    """Turns: each round's NEW/BASE ratio of messages, by generation, as [t_s, ratio] (turns.parquet's rows
    paired up); a round where either side got nothing has none."""
    rounds: dict[tuple[int, int, int], dict] = {}
    for r in rows:
        rounds.setdefault((r["generation"], r["block"], r["round"]), {"t_s": r["t_s"]})[r["variant"]] = r["messages"]
    out: dict[int, list[list[float]]] = {}
    for (g, _, _), m in sorted(rounds.items()):
        if m.get(base) and m.get(new):
            out.setdefault(g, []).append([m["t_s"], round(m[new] / m[base], 5)])
    return out


def _pair_record(b: CellRecord, n: CellRecord, order: str, dropped: bool, t0: float, variants: list[Variant]) -> dict:
    d = {}
    for col in sorted(set(b.figures) | set(n.figures)):
        vb, vn = _value(b, col), _value(n, col)
        if vb is None or vn is None:
            continue
        d[col] = math.log(vn / vb) if col in LOG_JUDGED and vb > 0 and vn > 0 else vn - vb
    return compare.json_ready({"pair": b.pair, "t_s": round((b.t + n.t) / 2 - t0, 3), "order": order,
                               "dropped": dropped, "canary_ns": {"base": b.canary_ns, "new": n.canary_ns}, "d": d})


def _judged_on(p: AbPlan) -> str:
    """What a cell is judged on: throughput; under --rate (throughput is the schedule's) the stopping metric."""
    return p.metric if p.rate else "msgs_per_sec"


def _verdict(metrics: dict, p: AbPlan) -> str:
    """The cell's verdict: its judged figure's (_judged_on), said as faster or slower (compare.cell_verdict)."""
    return compare.cell_verdict(metrics, _judged_on(p))


# A variant whose median cell achieved less than this share of --rate was overloaded.
KEPT_UP = 0.95


def _short_of_rate(records: list[CellRecord], variants: list[Variant], rate: float) -> dict[str, float]:
    """Under --rate: the variants that did not keep up (label → median achieved requests/s)."""
    if not rate:
        return {}
    achieved = _medians(records, variants, lambda row: row.get("msgs_per_sec"))
    return {label: m for label, m in achieved.items() if m is not None and m < KEPT_UP * rate}


def _loader_fracs(records: list[CellRecord], variants: list[Variant]) -> dict[str, float | None]:
    """Each variant's median loader CPU share (of its CPUs) over its cells."""
    return _medians(records, variants, lambda row: (row.get("loader_cpu") or {}).get("cpu_frac"))


def _medians(records: list[CellRecord], variants: list[Variant], get) -> dict[str, float | None]:
    """label → the median of `get(row)` over the variant's cells (None: no cell had it)."""
    out: dict[str, float | None] = {}
    for i, v in enumerate(variants):
        vals = [float(x) for r in records if r.variant == i and (x := get(r.row)) is not None]
        out[v.label] = float(np.median(vals)) if vals else None
    return out


def _warnings(saturated: dict[str, float], dropped: int, pairs: int, fresh: bool, stalled: int) -> list[str]:
    out = []
    if stalled:
        out.append(f"{stalled} pair(s) lost: a live server answered nothing in a cell's window (the host took its CPU)")
    for label, frac in saturated.items():
        out.append(f"the loader, not the servers, set the pace: it used {frac:.0%} of its CPU in {label}'s cells, so "
                   "a server-side change can be invisible here (give the loader more CPUs, or use fewer connections)")
    if dropped:
        out.append(f"{dropped} of {pairs} pairs dropped: a cell ran with the backend CPU's canary "
                   f"≥{paired.SLOW:.0%} slower than the median cell (the host was disturbed)")
    if fresh:
        out.append("--fresh: servers restarted before every pair, so this compares cold processes")
    return out


def summary_lines(doc: dict) -> list[str]:
    """What the terminal adds to compare's pages: how the answer was measured and why it stopped."""
    ab = doc["ab"]
    load = (f"open loop at {ab['rate']:,.0f} requests/s ({ab['arrivals']} arrivals), judged on "
            f"{metrics.metric_info(ab['metric']).label}; " if ab.get("rate") else "")
    windows = (f"{ab['window_s']:g} s blocks after {ab['warmup_s']:g} s warm-up each"
               + (f", then {ab['probed_pairs']} probed cell pairs for the syscalls" if ab.get("probed_pairs") else "")
               if ab.get("method") == "turns" else f"{ab['window_s']:g} s windows after {ab['warmup_s']:g} s warm-up")
    lines = [f"ab: {ab['measured_text']}; {load}{windows}; stopped after {ab['elapsed_s']:.0f} s: {ab['stop']['text']}"]
    for c in ab["comparisons"]:
        kept = (f"{c['kept']} pairs (generations of the servers, then the probed cell pairs)"
                if ab.get("method") == "turns"
                else f"{c['kept']} pairs kept, {c['dropped']} dropped (host disturbed)")
        lines.append(f"  {c['new']}: {kept}; estimator: {c['estimator'] or '–'}")
    return lines


def report(doc: dict, console: Console) -> None:
    """compare's terminal pages, then the ab lines."""
    compare_report.print_doc(doc, console)
    for line in summary_lines(doc):
        console.print(escape(line), highlight=False, soft_wrap=True)


def build(s: Any, out: Path, warm: list[WarmServer]) -> dict:
    """The run's answer, from its session `s` (session._Session: its plan, records, comparisons, canary,
    flamegraphs and stop): compare's document with the "ab" object."""
    p = s.p
    base = p.variants[0]
    checks = fail_if_rules.parse_fail_if(p.fail_if)
    loader_frac = _loader_fracs(s.records, p.variants)
    limit = Thresholds().loader_saturated  # the loader_bottleneck rule's
    saturated = {label: f for label, f in loader_frac.items() if f is not None and f >= limit}
    short = _short_of_rate(s.records, p.variants, p.rate)
    protocol = base.cfg.protocol  # one for all variants (plan refuses a mix): req/s for HTTP (units)
    comparisons, ab_comps = [], []
    for comp in s.comparisons:
        new = p.variants[comp.new]
        kept, dropped = comp.kept(), comp.dropped()
        metrics = {}
        for col in comp.columns():
            c = comp.judge(col)
            if c is not None:
                metrics[col] = compare.describe(col, compare.json_ready(c), protocol)
        label = f"{base.label} → {new.label} c={base.cfg.connections[0]}" + (
            f" pipeline {base.cfg.pipeline[0]}" if base.cfg.pipeline[0] != 1 else "") + (
            f" at {p.rate:,.0f}/s" if p.rate else "")
        cell = {"connections": base.cfg.connections[0], "pipeline": base.cfg.pipeline[0], "protocol": protocol,
                "label": label,
                "rounds": {"base": len(kept), "new": len(kept), "base_failed": 0, "new_failed": 0},
                "metrics": metrics}
        cell["judged_on"] = _judged_on(p)
        cell["verdict"] = _verdict(metrics, p)
        cell["why"] = compare.why(label, metrics, protocol)
        cell["flamegraph_diff"] = s._flame_diff(comp, cell, out)
        warnings = _warnings(saturated, sum(dropped), len(comp.items), p.fresh, comp.stalled) + [
            f"{label_} did not keep up with {p.rate:,.0f} requests/s (achieved {got:,.0f}/s, median over its "
            "cells): its latency is its backlog growing through each window, not its service time"
            for label_, got in short.items() if label_ in (base.label, new.label)]
        comparisons.append({"new": {"path": str(out), "name": new.label}, "matched_on": ["connections", "pipeline"],
                            "compared_across": {"variant": [base.label, new.label]}, "warnings": warnings,
                            "unmatched": {"base_only": [], "new_only": []}, "cells": [cell]})
        head = metrics.get(p.metric, {})
        ab_comps.append({
            "new": new.label, "pairs": len(comp.items), "kept": len(kept), "dropped": int(sum(dropped)),
            "stalled": comp.stalled,
            "estimator": head.get("estimator"), "canary_shift": compare.json_ready(comp_canary_shift(comp)),
            "pairs_detail": [_pair_record(b, n, order, drop, s.started, p.variants)
                             for (b, n, order), drop in zip(comp.items, dropped)]})
        if p.method == "turns":  # each generation's rounds, for the plot beneath the generations
            per_gen = _round_ratios(s.turn_rows, base.label, new.label)
            for (b, _, order), rec in zip(comp.items, ab_comps[-1]["pairs_detail"]):
                if order.startswith("generation"):  # not the probed cell pairs after the blocks
                    rec["rounds"] = per_gen.get(b.pair, [])
    doc: dict = {
        "schema": compare.SCHEMA,
        "method": {"text": (METHOD_TURNS if p.method == "turns" else METHOD).format(
                       gen_blocks=GEN_BLOCKS, gen_warmup=GEN_WARMUP_S, per=units.per_unit(protocol),
                       many=units.exchanges(protocol)), "alpha": paired.ALPHA,
                   "confidence": paired.CONFIDENCE,
                   "min_rounds": compare.MIN_ROUNDS, "test": "paired Student t-test of the per-pair differences",
                   "interval": "Student t on the per-pair log ratios (differences for counts), "
                               + ("a pair being a generation of the servers (turns)" if p.method == "turns" else
                                  "adjusted for the speed canary by OLS once there are enough pairs")},
        "base": {"path": str(out), "name": base.label},
        "comparisons": comparisons,
        "fail_if": {"checks": [c.text for c in checks], "breaches": []},
        "artifacts": {},
        "ab": {
            "variants": [{"letter": v.letter, "label": v.label, "server": v.server, "kind": v.kind,
                          "python": v.cfg.pythons[0], "command": v.cfg.server(v.server).template or None}
                         for v in p.variants],
            "aa": p.aa, "measured": "fresh" if p.fresh else "warm", "method": p.method,
            "turn_s": turns_mod.TURN_S if p.method == "turns" else None,
            "probed_pairs": s.probed_pairs if p.method == "turns" else None,
            "measured_text": ("fresh servers: every variant's server restarted before each pair" if p.fresh
                              else f"warm servers served in turns of {turns_mod.TURN_S:g} s on one loader (A B, "
                              f"B A, …), restarted every {GEN_BLOCKS} blocks (generations, the interval's units)"
                              if p.method == "turns"
                              else "warm servers: each variant's server started once and kept for every pair"),
            "server_starts": {w.label: w.starts for w in warm},
            "window_s": p.window, "warmup_s": p.warmup, "metric": p.metric, "precision": p.precision,
            "metric_log": p.metric in LOG_JUDGED,  # pairs_detail's d[metric]: a log ratio, else NEW − BASE
            "rate": p.rate or None, "arrivals": p.base.arrivals if p.rate else None,
            "short_of_rate": short,
            "max_time_s": p.max_time, "min_pairs": p.min_pairs, "elapsed_s": round(s.elapsed, 2),
            "stop": {"reason": s.stop_reason, "text": s.stop_text},
            "slow_canary_share": paired.SLOW, "canary_samples": s.canary.count() if s.canary else 0,
            "loader_bound": bool(saturated), "loader_cpu_frac": loader_frac,
            "comparisons": ab_comps,
            # --flamegraph: each variant's sampled cell (relative directory) or why there is none
            "flamegraphs": {p.variants[i].label: str(f[0].relative_to(out) / "flamegraphs" / f[1])
                            if isinstance(f, tuple) else f for i, f in sorted(s.flames.items())} or None,
        },
    }
    doc["fail_if"]["breaches"] = compare.breaches(doc, checks)
    doc["method"]["text"] += " This run: " + "; ".join(x.strip() for x in summary_lines(doc))[len("ab: "):] + "."
    return doc
