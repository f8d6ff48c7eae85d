"""Throughput across scales: msgs/s collapsing as connections grow, with the per-message costs that grew."""

from __future__ import annotations

from netprof.profiler.core import units
from netprof.profiler.kit.rule_registry import Anomaly, Context, Thresholds, rule
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num, syscalls_of


@rule("throughput_collapse", plots=("throughput", "syscalls"))
def throughput_collapse(ctx: Context) -> list[Anomaly]:
    """msgs/s falls by more than half from the backend's peak as connections grow; says what grew per message."""
    t, found = ctx.t, []
    if ctx.cells.empty:
        return []
    for _, g in ctx.cells.groupby(schema.SERIES_KEYS, dropna=False):
        g = g.sort_values("connections")
        collapse = _peak_and_low(g, t)
        if collapse is None:
            continue
        peak, low = collapse
        drop = 1 - low["mps_mean"] / peak["mps_mean"]
        ev = {f"msgs/s at {int(c)} connections": round(float(m)) for c, m in zip(g["connections"], g["mps_mean"])}
        text = (f"{low['backend']} falls from {units.rate(peak['mps_mean'])} {units.rate_unit(low.get('protocol'))} "
                f"at {int(peak['connections'])} connections "
                f"to {units.rate(low['mps_mean'])} at {int(low['connections'])} (−{100 * drop:.0f}%). ")
        text += _what_grew(peak, low, ev, t)
        title = f"Throughput collapses with connections: {low['backend']} −{100 * drop:.0f}%"
        found.append(Anomaly.at(low, "throughput_collapse", "warning", title, text, ev))
    return found


def _peak_and_low(g, t: Thresholds):
    """The series' peak cell and its slowest cell at more connections, when that one collapsed; else None."""
    if len(g) < 2:
        return None
    peak = g.loc[g["mps_mean"].idxmax()]
    later = g[g["connections"] > peak["connections"]]
    if later.empty:
        return None
    low = later.loc[later["mps_mean"].idxmin()]
    return None if low["mps_mean"] >= (1 - t.collapse_drop) * peak["mps_mean"] else (peak, low)


def _what_grew(a, b, ev: dict, t: Thresholds) -> str:
    """Per-message costs at the peak cell `a` vs the collapsed cell `b`: the reasons in numbers."""
    ca, cb = int(a["connections"]), int(b["connections"])
    parts = [p for p in (_cpu_grew(a, b, ca, cb, ev), _syscalls_grew(a, b, ca, cb, ev, t),
                         _busy_fell(a, b, ca, cb, ev, t)) if p]
    return (("Why: " + "; ".join(parts) + ". ") if parts
            else f"No per-{units.exchange(b.get('protocol'))} cost figures to say why (run with probes). ")


def _cpu_grew(a, b, ca: int, cb: int, ev: dict) -> str | None:
    ua, sa, ub, sb = (num(a, "cpu_us_per_msg.user"), num(a, "cpu_us_per_msg.sys"),
                      num(b, "cpu_us_per_msg.user"), num(b, "cpu_us_per_msg.sys"))
    if ua is None or sa is None or ub is None or sb is None:
        return None
    ev[f"CPU µs per message user+kernel at {ca} / {cb}"] = f"{ua:.1f}+{sa:.1f} / {ub:.1f}+{sb:.1f}"
    each = units.exchange(b.get("protocol"))
    costs = f"each {each} costs {ua + sa:.1f} µs of CPU at {ca} and {ub + sb:.1f} µs at {cb}"
    if ub + sb <= ua + sa:  # no growth to place: the rate fell for another reason (waiting, not computing)
        return f"{costs}: not more CPU per {each}"
    return f"{costs}, the growth mostly in {'kernel' if (sb - sa) > (ub - ua) else 'user space'}"


def _syscalls_grew(a, b, ca: int, cb: int, ev: dict, t: Thresholds) -> str | None:
    pa, pb = syscalls_of(a), syscalls_of(b)
    if not (pa and pb):
        return None
    ta, tb = sum(pa.values()), sum(pb.values())
    ev[f"syscalls per message at {ca} / {cb}"] = f"{ta:.2f} / {tb:.2f}"
    if tb > ta * t.collapse_syscall_growth:
        top = max(pb, key=lambda k: pb[k] - pa.get(k, 0.0))
        return f"syscalls {units.per_unit(b.get('protocol'))} grow from {ta:.2f} to {tb:.2f} (most: {top})"
    return None


def _busy_fell(a, b, ca: int, cb: int, ev: dict, t: Thresholds) -> str | None:
    ba, bb = num(a, "cpu.busy_frac"), num(b, "cpu.busy_frac")
    if ba is None or bb is None:
        return None
    ev[f"backend busy at {ca} / {cb}"] = f"{ba:.2f} / {bb:.2f}"
    if bb < t.collapse_busy_drop * ba:
        return (f"the backend is busy only {100 * bb:.0f}% of a CPU at {cb} (vs {100 * ba:.0f}%): it waits "
                "rather than works — look at the loader and the latency tail")
    return None
