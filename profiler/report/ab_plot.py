"""`netprof ab`'s plot, one per comparison: each pair's NEW/BASE ratio of the judged metric over the run's
time (kept pairs as dots, dropped ones as crosses), the estimate and its 95% interval across it, and
beneath, on the same time axis, what each pair is made of. With cells, the speed canary's NEW/BASE ratio
for the pair: the covariate the estimate is adjusted for, so a pair far off the estimate can be matched
against a disturbed host. With turns (no canary; a pair is a generation of the servers), each round's
NEW/BASE ratio of messages: the spread within a generation against the spread between generations.

Input is the ab document's own record (`ab.comparisons[k].pairs_detail`, written by profiler/ab.py);
compare_report.render embeds the SVG in compare.md and compare.html.
"""

from __future__ import annotations

import math

from netprof.profiler.kit.mpl import plt
from netprof.profiler.report.plots import svg_of


def _ratio(d: float, log: bool) -> float:
    return math.exp(d) if log else d


def draw(ab_comp: dict, judged: dict | None, metric: str, log: bool, base: str, new: str) -> bytes | None:
    """The SVG, or None without two pairs that have the metric. `judged`: the metric's entry in the
    comparison's cell (ratio and interval, or delta and interval for a count); `log`: the pairs' d[metric] is
    a log ratio (else a difference, NEW − BASE)."""
    pairs = [p for p in ab_comp.get("pairs_detail") or [] if metric in (p.get("d") or {})]
    if len(pairs) < 2:
        return None
    key, lo_key, hi_key = ("ratio", "ratio_lo", "ratio_hi") if log else ("delta", "delta_lo", "delta_hi")

    canary = [(p["t_s"], p["canary_ns"]["new"] / p["canary_ns"]["base"]) for p in pairs
              if (p.get("canary_ns") or {}).get("base") and (p.get("canary_ns") or {}).get("new")]
    rounds = [(t, r) for p in pairs for t, r in p.get("rounds") or []]

    def figure(_):
        if canary or rounds:
            fig, (top, low) = plt.subplots(2, 1, sharex=True, figsize=(8.0, 4.6), height_ratios=(3, 1.3))
        else:  # neither: no empty panel that looks like a canary that saw nothing
            fig, top = plt.subplots(1, 1, figsize=(8.0, 3.4))
            low = None
        for dropped, marker, colour, label in ((False, "o", "#1f77b4", "pair (kept)"),
                                               (True, "x", "#7f7f7f", "pair (dropped: disturbed host)")):
            sel = [p for p in pairs if bool(p.get("dropped")) == dropped]
            if sel:
                top.scatter([p["t_s"] for p in sel], [_ratio(p["d"][metric], log) for p in sel], s=14,
                            marker=marker, color=colour, label=label)
        top.axhline(1.0 if log else 0.0, color="black", lw=0.8, ls=":")
        if judged and judged.get(key) is not None:
            est, lo, hi = judged[key], judged.get(lo_key), judged.get(hi_key)
            top.axhline(est, color="#d62728", lw=1.2, label=f"estimate {est:.4g}")
            if lo is not None and hi is not None:
                top.axhspan(lo, hi, color="#d62728", alpha=0.15, label=f"95% interval [{lo:.4g}, {hi:.4g}]")
        top.set_ylabel(f"{metric}, {new}/{base}" if log else f"{metric}, {new} − {base}")
        top.legend(fontsize=7, loc="best")
        top.set_title(f"Each pair's {metric}: {new} against {base}")
        if low is None:
            top.set_xlabel("time since the first pair, s")
        else:
            if canary:
                low.scatter([t for t, _ in canary], [c for _, c in canary], s=10, color="#2ca02c")
                low.set_ylabel("canary loop\nNEW/BASE", fontsize=8)
            else:
                low.scatter([t for t, _ in rounds], [r for _, r in rounds], s=4, color="#7f7f7f", alpha=0.6)
                low.set_ylabel("each round's\nmessages NEW/BASE", fontsize=8)
            low.axhline(1.0, color="black", lw=0.8, ls=":")
            low.set_xlabel("time since the first pair, s")
        fig.tight_layout()
        return fig

    return svg_of(figure, None)
