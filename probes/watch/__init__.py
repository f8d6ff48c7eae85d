"""watch's probe set (watch.py, routes.bpf.h): the breakdown's, with each request's route. Not an instrument of
a run (registry.NAMES): `netprof watch` (profiler/watch/) is its only user."""

from .watch import (
    FIRST,
    NAMES,
    NOT_HTTP,
    OTHER,
    ROUTES,
    SERVER_PARTS,
    UNSAMPLED,
    RouteDelta,
    WatchProbes,
    WatchSnapshot,
    routes_delta,
)

__all__ = ["FIRST", "NAMES", "NOT_HTTP", "OTHER", "ROUTES", "SERVER_PARTS", "UNSAMPLED", "RouteDelta", "WatchProbes",
           "WatchSnapshot", "routes_delta"]
