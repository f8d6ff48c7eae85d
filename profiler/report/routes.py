"""The routes of a watched HTTP server (`netprof watch`): where its server time went, route by route.

Read from what the watch wrote (watch.json's `routes`, meta.json's `watch_routes`: profiler/watch/figures.py's
routes, one dict each): the report's table, and the sentence of the report's opening and of the watch's last line.
Shares are of the server time of the requests followed, the ones routed (under --max-overhead the rest are counted
and timed only, as the route "(unsampled)": they belong to every route and so to none).
"""

from __future__ import annotations

from typing import Any

from netprof.probes.breakdown import TIMER
from netprof.probes.breakdown.report import timer_within
from netprof.probes.watch import NAMES, NOT_HTTP, OTHER
from netprof.probes.watch import UNSAMPLED as UNSAMPLED_SLOT
from netprof.profiler.core import units
from netprof.profiler.core.safetext import clean_text

UNSAMPLED = NAMES[UNSAMPLED_SLOT]
# What the reserved names stand for (docs/watch.md, "Routes")
RESERVED = {UNSAMPLED: "the requests answered while the probes were light (--max-overhead), counted and timed only",
            NAMES[OTHER]: "the requests of routes first seen after --routes were full",
            NAMES[NOT_HTTP]: "the requests whose first bytes were not read as an HTTP/1.x request line: another "
                             "protocol (TLS, HTTP/2), or a request already begun when the watch attached"}
SENTENCE_ROUTES = 3


def _routes(watched: Any) -> list[dict[str, Any]]:
    return [r for r in watched if isinstance(r, dict) and r.get("requests")] if isinstance(watched, list) else []


def _time_us(r: dict) -> float:
    """The route's whole server time (µs): its requests × their mean."""
    return (r["server_time_us"].get("mean") or 0.0) * r["requests"]


def _ranked(watched: Any) -> tuple[list[dict], list[dict], float]:
    """The routed routes by server time, most first; the unsampled (a list of at most one); the routed total."""
    routes = _routes(watched)
    routed = sorted((r for r in routes if r["route"] != UNSAMPLED), key=_time_us, reverse=True)
    return routed, [r for r in routes if r["route"] == UNSAMPLED], sum(map(_time_us, routed))


def _told_apart(routed: list[dict]) -> bool:
    """Some route is a request line (not only the reserved names): the server speaks HTTP/1.x."""
    return any(r["route"] not in RESERVED for r in routed)


def _parts(r: dict) -> dict[str, float]:
    """A route's breakdown parts, mean µs (those it has)."""
    return {p: v for p, v in ((r.get("breakdown") or {}).get("parts_mean_us") or {}).items() if v is not None}


def _largest(r: dict) -> str:
    """A route's largest parts, with how much of its off_cpu_io was the loop asleep until a timer."""
    parts = _parts(r)
    timer = ((r.get("breakdown") or {}).get("detail_mean_us") or {}).get(TIMER)
    return units.largest_parts(parts, within=timer_within(parts.get("off_cpu_io"), timer))


def table(watched: Any) -> dict | None:
    """{title, header, rows, note} of a watch's routes (a list; anything else, as a run's meta has no routes: None):
    one row per route, most server time first, (unsampled) last; None when no route was told apart (not HTTP, or
    --routes 3)."""
    routed, unsampled, total = _ranked(watched)
    if not _told_apart(routed):
        return None
    header = ["route", "requests", "req/s", "server time: mean", "p50", "p99", "share of the server time",
              "syscalls/req", "mean request: largest parts"]
    rows = []
    for r in routed + unsampled:
        st, followed = r["server_time_us"], r["route"] != UNSAMPLED
        rows.append([clean_text(r["route"]), units.count(r["requests"]), units.rate(r.get("requests_per_sec")),
                     units.duration_us(st.get("mean")), units.duration_us(st.get("p50")),
                     units.duration_us(st.get("p99")),
                     units.share(_time_us(r) / total) if followed and total else units.DASH,
                     units.calls_and_ring(r.get("syscalls_per_request"), r.get("ring_ops_per_request")) if followed
                     else units.DASH,
                     _largest(r) if followed else units.DASH])
    shown = {r["route"] for r in routed + unsampled}
    told = [f"{name} are {what}" for name, what in RESERVED.items() if name in shown]
    note = ("Server time: a request's first byte in to its answer sent (the kernel's). The share is of the server "
            "time of the requests followed" + (f"; {'; '.join(told)}" if told else "") + ". Percentiles are "
            "histogram bucket midpoints.")
    return {"title": "By route: where the server time went", "header": header, "rows": rows, "note": note}


def sentence(watched: Any) -> str | None:
    """"By route, GET / took 44% of the server time (3,497 requests, 7.5 ms on average), GET /io 38% (1,165,
    19.5 ms) and GET /slow 17% (1,165, 8.8 ms)": the request lines that took the most, and the other routes' share
    when it shows (half a percent or more): a last request line is named rather than "1 other route". None with
    fewer than two routes told apart."""
    routed, _, total = _ranked(watched)
    named = [r for r in routed if r["route"] not in RESERVED]
    if len(routed) > SENTENCE_ROUTES + 1 or len(named) < len(routed):
        named = named[:SENTENCE_ROUTES]
    if len(named) < 2 or not total:
        return None

    def one(r: dict, first: bool) -> str:
        share, mean = units.share(_time_us(r) / total), units.duration_us(r["server_time_us"].get("mean"))
        if first:
            return (f"{clean_text(r['route'])} took {share} of the server time "
                    f"({units.plural(r['requests'], 'request')}, {mean} on average)")
        return f"{clean_text(r['route'])} {share} ({units.count(r['requests'])}, {mean})"

    said = [one(r, i == 0) for i, r in enumerate(named)]
    rest = 1 - sum(map(_time_us, named)) / total
    if rest >= 0.005:
        said.append(f"{units.plural(len(routed) - len(named), 'other route')} {units.share(rest)}")
    return f"By route, {units.joined(said)}."
