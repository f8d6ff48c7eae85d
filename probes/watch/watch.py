"""watch's probe set: the breakdown's (socket-wait + breakdown, compiled with -DWATCH=1) and the route of each
request, read by the kernel from its first bytes (probes/watch/routes.bpf.h says how).

    with WatchProbes() as wp:                  # compiles once (~1.5 s)
        wp.target(server_pid)                  # its tree; connections already open are served too
        a = wp.snapshot(); ...; b = wp.snapshot()
        d = routes_delta(a.routes, b.routes)   # {route: RouteDelta}: requests, server time, parts, syscalls
        sockwait_delta(a.sockwait, b.sockwait); breakdown_delta(a.breakdown, b.breakdown)  # as --breakdown

Differences from a run's breakdown, all from traffic netprof does not send: a connection that was open before
the set attached is served from its first read (a run learns its connections when they are set up), and a
client on another host (no arrival of the answer on this machine) ends the `send` part at the last packet
handed to the device, with no transit_out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..breakdown.breakdown import PARTS, BreakdownProbes, Snapshot
from ..breakdown.breakdown import prefetch as breakdown_prefetch
from ..sockwait.sockwait import NSLOTS, WaitDist

ROUTES = 64          # route slots, the three below included
NOT_HTTP = 0         # bytes that are not an HTTP request line (an echo or line protocol)
OTHER = 1            # routes first seen after the table was full
UNSAMPLED = 2        # requests read while the set was light (lighten()): counted and timed, not routed
FIRST = 3
KEY_LEN = 128       # routes.bpf.h RT_LEN
# The parts that are the server's: transit (the network both ways) and loader_wait (the client's read) are not.
SERVER_PARTS = tuple(p for p in PARTS if p not in ("transit", "loader_wait"))
NAMES = {NOT_HTTP: "(not HTTP)", OTHER: "(other)", UNSAMPLED: "(unsampled)"}
# The hooks a light set keeps: they count requests (routes.bpf.h rt_light) and time them (sk_data_ready: each
# request's first byte in the socket queue); every other one costs per syscall or scheduler switch.
LIGHT_HOOKS = (b"sock_recv_length", b"sock_send_length", b"sk_data_ready")


@dataclass
class RouteCounts:
    """One route's cumulative figures since target()."""

    requests: int
    timed: int
    server_ns: int
    hist: list[int]
    measured: int
    part_ns: list[int]       # per PARTS[:-1] (loader_wait is not measured per request)
    timer_ns: int            # of off_cpu_io: readiness waits that ended on their timeout (detail off_cpu_timer)
    syscalls: int
    ring_ops: int


@dataclass
class WatchSnapshot:
    snapshot: Snapshot                  # the socket-wait set's and the breakdown's
    routes: dict[str, RouteCounts]      # by route name
    processes: dict[int, int]           # answered requests by process (tgid)
    ports: frozenset[int]               # the ports the tree listens on: its served connections' local ports


@dataclass
class RouteDelta:
    """One route over a window."""

    requests: int
    server: WaitDist                     # server time: arrival of the request's first byte → its answer's send
    measured: int                        # requests broken down
    parts_mean_us: dict[str, float]      # SERVER_PARTS, means over the measured ones
    timer_mean_us: float                 # of parts_mean_us["off_cpu_io"]: until a timer (detail off_cpu_timer)
    syscalls: int
    ring_ops: int

    @property
    def syscalls_per_request(self) -> float | None:
        return self.syscalls / self.requests if self.requests else None

    @property
    def ring_ops_per_request(self) -> float | None:
        return self.ring_ops / self.requests if self.requests else None


def route_name(key: bytes) -> str:
    """A route's name from its kernel key: "GET /users/{id}"; a target longer than the key ends in "…"."""
    truncated = len(key) >= KEY_LEN and key[KEY_LEN - 1] == 1
    text = key[:KEY_LEN - 1] if truncated else key
    name = text.split(b"\0", 1)[0].decode("ascii", "replace")
    return name + "…" if truncated else name


def watch_cflags(routes: int = ROUTES) -> tuple[str, ...]:
    """What WatchProbes(routes=routes) adds to the breakdown's flags."""
    return ("-DWATCH=1", f"-DROUTES={routes}")


def prefetch(routes: int = ROUTES) -> None:
    """Begin compiling the set WatchProbes(routes=routes) loads (breakdown.prefetch); best effort."""
    breakdown_prefetch(watch_cflags(routes))


class WatchProbes(BreakdownProbes):
    """The breakdown's set with routes (same life cycle: SockWaitProbes)."""

    def __init__(self, attached: bool = True, routes: int = ROUTES, **kw) -> None:
        if not FIRST <= routes <= 4096:  # FIRST: no route told apart (all count as "(other)")
            raise ValueError(f"routes must be in {FIRST}..4096")
        self.routes = routes
        self._rt: tuple[Any, ...] | None = None  # BCC's tables (untyped), bound at the first target()
        self._light = False
        super().__init__(attached=attached, cflags=watch_cflags(routes), **kw)
        try:
            self._install_tail(b"rt_parse", b"rt_progs")
        except BaseException:
            self.close()
            raise

    def lighten(self) -> None:
        """Keep counting and timing requests (as the route "(unsampled)") with every hook detached but
        LIGHT_HOOKS: a fraction of the whole set's cost per request (bench/watch_overhead.py); no route, part or
        syscall. attach() makes the set whole again."""
        assert self.bpf is not None
        self._set_light(1)
        self._light = True
        self._detach(resident=False, keep=LIGHT_HOOKS)

    def attach(self) -> None:
        if not self._light:
            super().attach()
            return
        # from light: the threads' states are stale (their switches and syscalls were not seen): forgotten, each
        # is learned afresh at its next syscall; every hook attached (the counting hooks stay on their light path
        # meanwhile); a new epoch (sockets' arrivals and open requests from before are stale); the full path
        assert self.bpf is not None and self._rt is not None
        self.bpf[b"bd_thr"].clear()
        self._rt[2].clear()  # rt_thr: each thread's receive buffer and route
        self._attach()
        self._attach_ns = time.monotonic_ns()
        self._set_window(active=1)
        self._set_light(0)
        self._light = False

    def detach(self) -> None:
        super().detach()
        if self.bpf is not None:
            self._set_light(0)
        self._light = False

    def _set_light(self, on: int) -> None:
        assert self.bpf is not None
        t = self.bpf[b"rt_light"]
        t[t.Key(0)] = t.Leaf(on)

    def _reset_more(self, pid: int) -> None:
        super()._reset_more(pid)
        b = self.bpf
        assert b is not None
        if self._rt is None:
            self._rt = (b[b"rt_index"], b[b"rt_stats"], b[b"rt_thr"], b[b"rt_next"], b[b"rt_claim"], b[b"rt_procs"])
        index, stats, thr, nxt, claim, procs = self._rt
        index.clear()
        thr.clear()
        claim.clear()
        procs.clear()
        zero = stats.Leaf()
        for i in range(self.routes):
            stats[stats.Key(i)] = zero
        nxt[nxt.Key(0)] = nxt.Leaf(FIRST)

    def snapshot(self, describe: bool = False) -> WatchSnapshot:  # type: ignore[override]
        """Every interval: the descriptors off_cpu_io waited on are named only when asked (the report's, at the
        end of the watch: BreakdownProbes.snapshot)."""
        snap = super().snapshot(describe)
        assert self._rt is not None
        index, stats, *_, procs = self._rt
        names = dict(NAMES)
        for k, v in list(index.items()):
            names[v.value] = route_name(bytes(bytearray(k.s)))
        routes: dict[str, RouteCounts] = {}
        for i, name in names.items():
            s = stats[stats.Key(i)]
            if not s.requests and not s.syscalls:
                continue
            routes[name] = RouteCounts(requests=s.requests, timed=s.timed, server_ns=s.server_ns,
                                       hist=list(s.hist), measured=s.measured, part_ns=list(s.part_ns),
                                       timer_ns=s.timer_ns, syscalls=s.syscalls, ring_ops=s.ring_ops)
        return WatchSnapshot(snapshot=snap, routes=routes,
                             processes={k.value: v.value for k, v in list(procs.items())},
                             ports=frozenset(k.value for k in list(self._lports.keys())))


def routes_delta(a: dict[str, RouteCounts], b: dict[str, RouteCounts]) -> dict[str, RouteDelta]:
    """Each route's figures between two snapshots (a route first seen in between counts from zero)."""
    out: dict[str, RouteDelta] = {}
    empty = RouteCounts(0, 0, 0, [0] * NSLOTS, 0, [0] * (len(PARTS) - 1), 0, 0, 0)
    for name, y in b.items():
        x = a.get(name, empty)
        hist = [q - p for p, q in zip(x.hist, y.hist)]
        measured = y.measured - x.measured
        parts = {p: (y.part_ns[i] - x.part_ns[i]) / measured / 1e3 if measured else 0.0
                 for i, p in enumerate(PARTS[:-1]) if p in SERVER_PARTS}
        out[name] = RouteDelta(requests=y.requests - x.requests,
                               server=WaitDist.from_hist(hist, y.server_ns - x.server_ns, None),
                               measured=measured, parts_mean_us=parts,
                               timer_mean_us=(y.timer_ns - x.timer_ns) / measured / 1e3 if measured else 0.0,
                               syscalls=y.syscalls - x.syscalls,
                               ring_ops=y.ring_ops - x.ring_ops)
    return out
