"""What `netprof watch` says about a window, as one versioned dict: the owner of watch's JSON (`--json`,
watch.json, windows.jsonl), the live view and the Prometheus metrics read what this builds.

    f = window_figures(a, b, seconds, cost)   # a, b: WatchProbes snapshots; cost: the probes' (ns, runs) delta

Requests are the kernel's: an answer is the first send on a served connection after a read (sockwait's
`answers`), so a pipelined batch answered by one send is one request (`pipelined` counts the requests that
arrived while an earlier one of their connection was still open). Server time runs from the arrival of the
request's first byte in the socket queue to the return of its answer's send; the breakdown's server parts
(SERVER_PARTS: the run breakdown's parts but the client's network and read) partition it for every request it
could follow (`breakdown.requests`; the others by reason in `breakdown.skipped`). Under --max-overhead the
requests answered while the set was light are counted and timed (`unsampled`, the route "(unsampled)"); the
server time, parts, routes and per-request syscalls are those of the rest, the requests followed (so the parts
add up to `server_time_us`), and `every_request_server_time_us` is every request's. Their ratio
(`probes.followed_time_ratio`) is the probes' own effect on the requests they follow: the server is slower while
the whole set is attached.
"""

from __future__ import annotations

from typing import Any

from netprof.probes.breakdown import TIMER, breakdown_delta
from netprof.probes.sockwait.sockwait import NSLOTS, SockWaitDelta, WaitDist, sockwait_delta
from netprof.probes.watch import NAMES, NOT_HTTP, SERVER_PARTS, UNSAMPLED, WatchSnapshot, routes_delta
from netprof.profiler.core import units
from netprof.profiler.model.stats import jain_index

SCHEMA = "netprof.watch/1"
UNSAMPLED_ROUTE = NAMES[UNSAMPLED]
ECHO = "echo"  # the row's protocol where no request line was read (model/schema's default)


def protocol(routes: list[dict[str, Any]]) -> str | None:
    """What the server spoke in these routes: "http" when a request line was read (a route, or "(other)" past the
    route slots), "echo" when every request read was not one ("(not HTTP)"), None when none was read (only
    "(unsampled)", answered while the set was light)."""
    read = [r["route"] for r in routes if r["requests"] and r["route"] != UNSAMPLED_ROUTE]
    if not read:
        return None
    return units.HTTP if any(route != NAMES[NOT_HTTP] for route in read) else ECHO


def _r(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(v, nd)


def _dist(d: WaitDist) -> dict[str, float | None]:
    return {"mean": _r(d.mean_us), "p50": _r(d.p50_us), "p99": _r(d.p99_us), "max": _r(d.max_us)}


def server_hist(a: WatchSnapshot, b: WatchSnapshot, skip: str = "") -> tuple[list[int], int]:
    """Server time over every route (but `skip`): its histogram and sum (ns) between a and b."""
    hist = [0] * NSLOTS
    total = 0
    for name, y in b.routes.items():
        if name == skip:
            continue
        x = a.routes.get(name)
        for i, c in enumerate(y.hist):
            if c:
                hist[i] += c - (x.hist[i] if x else 0)
        total += y.server_ns - (x.server_ns if x else 0)
    return hist, total


def served_answers(sw: SockWaitDelta, ports: frozenset[int]) -> list[int]:
    """Requests answered on each connection served in the window (on a port the tree listens on: not its own
    calls out to other services)."""
    return [c.answers for c in sw.per_conn if c.answers and c.lport in ports]


def window_figures(a: WatchSnapshot, b: WatchSnapshot, seconds: float, cost: tuple[int, int]) -> dict[str, Any]:
    """The figures of the window between snapshots a and b (`seconds` long)."""
    sw = sockwait_delta(a.snapshot.sockwait, b.snapshot.sockwait)
    bd = breakdown_delta(a.snapshot.breakdown, b.snapshot.breakdown)
    routes = routes_delta(a.routes, b.routes)
    server = WaitDist.from_hist(*server_hist(a, b), None)  # the served connections' (sockwait's has them all)
    requests = sum(r.requests for r in routes.values())
    parts = {p: _r(bd.mean_us.get(p) or 0.0) for p in SERVER_PARTS} if bd.requests else {}
    per_second = (lambda n: round(n / seconds, 1)) if seconds > 0 else (lambda n: None)
    by_pid = {pid: n - a.processes.get(pid, 0) for pid, n in b.processes.items()}
    served = served_answers(sw, b.ports)
    syscalls = sum(r.syscalls for r in routes.values())
    ring = sum(r.ring_ops for r in routes.values())
    # requests answered while the set was light (--max-overhead): counted and timed; not routed, broken down or
    # their syscalls counted
    unsampled = routes[UNSAMPLED_ROUTE].requests if UNSAMPLED_ROUTE in routes else 0
    sampled = requests - unsampled
    followed = WaitDist.from_hist(*server_hist(a, b, skip=UNSAMPLED_ROUTE), None)
    ratio = followed.mean_us / server.mean_us if followed.mean_us and server.mean_us else None
    out_routes = []
    for name, r in sorted(routes.items(), key=lambda kv: -kv[1].requests):
        if not r.requests:
            continue
        counted = name != UNSAMPLED_ROUTE  # answered while the set was light: no syscall of theirs was counted
        out_routes.append({
            "route": name, "requests": r.requests, "requests_per_sec": per_second(r.requests),
            "server_time_us": _dist(r.server),
            "syscalls_per_request": _r(r.syscalls_per_request, 2) if counted else None,
            "ring_ops_per_request": _r(r.ring_ops_per_request, 2) if counted else None,
            "breakdown": {"requests": r.measured,
                          "mean_us": _r(sum(r.parts_mean_us.values())) if r.measured else None,
                          "parts_mean_us": {p: _r(v) for p, v in r.parts_mean_us.items()} if r.measured else {},
                          "detail_mean_us": {TIMER: _r(r.timer_mean_us)} if r.measured else {}},
        })
    ns, runs = cost
    return {
        "schema": SCHEMA,
        "window_s": round(seconds, 3),
        "requests": requests,
        "requests_per_sec": per_second(requests),
        "server_time_us": _dist(followed),
        "every_request_server_time_us": _dist(server),
        "breakdown": {
            "requests": bd.requests,
            "mean_us": _r(sum(v or 0.0 for v in parts.values())) if parts else None,
            "p99_us": _r(bd.total_p99_us),
            "parts_mean_us": parts,
            "parts_p99_us": {p: _r(bd.p99_us.get(p)) for p in SERVER_PARTS} if bd.requests else {},
            "detail_mean_us": {TIMER: _r(bd.detail_us.get(TIMER))} if bd.requests else {},
            "skipped": bd.skipped,
        },
        "pipelined": bd.skipped.get("busy", 0),
        "unsampled": unsampled,
        "syscalls_per_request": _r(syscalls / sampled, 2) if sampled else None,
        "ring_ops_per_request": _r(ring / sampled, 2) if sampled else None,
        "routes": out_routes,
        "processes": [{"pid": pid, "requests": n} for pid, n in sorted(by_pid.items()) if n],
        "connections": {"served": len(served), "jain": _r(jain_index(served), 3) if served else None},
        "probes": {"cpu_us": round(ns / 1e3), "runs": runs,
                   "cpu_us_per_request": _r(ns / 1e3 / requests, 2) if requests else None,
                   "cpu_share": round(ns / 1e9 / seconds, 4) if seconds > 0 else None,
                   "followed_time_ratio": _r(ratio, 3)},
        "unmeasured": sw.unmeasured,
    }
