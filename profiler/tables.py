"""network_ping_test's tables, built once from the per-cell aggregate, rendered for the terminal and Markdown."""

from __future__ import annotations

import math

import pandas as pd
from rich.table import Table

from netprof.profiler import schema


def _fmt(v, spec: str = ".0f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, spec)


def _get(row, key, scale: float = 1.0):
    v = row.get(key) if hasattr(row, "get") else None
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v * scale


def human(v) -> str:
    """92345 → '92.3k', as network_ping_test writes throughput."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.0f}"


def throughput_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """msgs/s ± 95% interval % (noisy cells flagged), backends as rows, connection counts as columns."""
    return _pivot(agg, lambda r: f"{human(r['mps_mean'])} ±{_fmt(r['mps_ci_pct'], '.0f')}%"
                                 f"{' (noisy)' if r.get('noisy') else ''}")


def relative_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Speed relative to the slowest backend of the same cell (slowest = 1), as in network_ping_test."""
    return _pivot(agg, lambda r: f"×{_fmt(r['relative'], '.2f')}")


def latency_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    return _pivot(agg, lambda r: " / ".join(_fmt(_get(r, f"lat_us.{p}"), ".0f") for p in ("p50", "p95", "p99", "p999")))


def fairness_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    return _pivot(agg, lambda r: f"Jain {_fmt(_get(r, 'per_conn.jain'), '.2f')}, "
                                 f"95% by {_fmt(_get(r, 'per_conn.active_share', 100), '.0f')}%")


def cpu_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """User share of backend CPU, how busy it was, and (when known) CPU µs per message."""
    def fmt(r) -> str:
        s = f"user {_fmt(_get(r, 'cpu.user_frac', 100), '.0f')}%, busy {_fmt(_get(r, 'cpu.busy_frac', 100), '.0f')}%"
        u, k = _get(r, "cpu_us_per_msg.user"), _get(r, "cpu_us_per_msg.sys")
        return s + (f", {u + k:.1f} µs/msg" if u is not None and k is not None else "")
    return _pivot(agg, fmt)


def probe_cost_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """What the counting probes cost in each cell, measured there: the probed sub-window's msgs/s
    against the unprobed rest (which gives every headline number)."""
    def fmt(r) -> str:
        cost = _get(r, "probe_cost")
        if cost is None:  # --no-probes, or --probe-share 1 (no unprobed part to compare with)
            return "–"
        return f"{-100 * cost:+.0f}% ({human(_get(r, 'probed.msgs_per_sec'))} probed)"
    return _pivot(agg, fmt)


def _pivot(agg: pd.DataFrame, fmt) -> tuple[list[str], list[list[str]]]:
    """Rows: backend plus every other varying dimension; columns: connections (× pipeline)."""
    if agg.empty:
        return ["backend"], []
    agg = agg.sort_values(["connections", "pipeline"] if "pipeline" in agg else ["connections"])
    cols = list(dict.fromkeys(schema.column_label(r, agg) for _, r in agg.iterrows()))
    rows: dict[str, dict[str, str]] = {}
    for _, r in agg.sort_values([k for k in schema.SERIES_KEYS if k in agg and k != "pipeline"],
                                kind="stable").iterrows():
        rows.setdefault(schema.series_label(r, agg.drop(columns="pipeline", errors="ignore")), {})[
            schema.column_label(r, agg)] = fmt(r)
    header = ["backend"] + cols
    return header, [[name] + [cells.get(c, "FF") for c in cols] for name, cells in rows.items()]


def to_rich(title: str, header: list[str], rows: list[list[str]]) -> Table:
    t = Table(*header, title=title, title_justify="left", header_style="bold")
    for r in rows:
        t.add_row(*r)
    return t


def to_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def syscalls_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Syscalls per message in network_ping_test's compact notation (`sendto + recvfrom + 0.01 × epoll_wait`)."""
    try:
        from netprof.probes import per_message_notation
    except ImportError:  # the probes package's notation has not landed: a local stand-in
        per_message_notation = _notation

    def notation(r) -> str:
        per_msg = {k.split(".", 1)[1]: v for k, v in r.items()
                   if k.startswith("syscalls_per_msg.") and v == v and v}
        return per_message_notation(per_msg) if per_msg else "no probes"

    return _pivot(agg, notation)


def _notation(per_msg: dict[str, float]) -> str:
    """`sendto + recvfrom + 0.01 × epoll_wait`: counts ≈ 1 bare, others with a factor, largest first."""
    parts = []
    for name, v in sorted(per_msg.items(), key=lambda kv: -kv[1]):
        if v < 0.005:
            continue
        parts.append(name if abs(v - 1) < 0.05 else f"{v:.2g} × {name}")
    return " + ".join(parts) or "–"
