"""watch's probe set (watch.py, routes.bpf.h): the breakdown's, with each request's route. Not an instrument of
a run (registry.NAMES): `netprof watch` (profiler/watch/) is its only user."""

from .watch import NOT_HTTP, OTHER, ROUTES, SERVER_PARTS, RouteDelta, WatchProbes, WatchSnapshot, routes_delta

__all__ = ["NOT_HTTP", "OTHER", "ROUTES", "SERVER_PARTS", "RouteDelta", "WatchProbes", "WatchSnapshot",
           "routes_delta"]
