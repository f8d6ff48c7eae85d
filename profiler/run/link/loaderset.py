"""Several loaders as one (`--loader-hosts H1,H2,…`): each runs its share of the connections (and of the
rate) from its own host; the first one's events drive the cell's marks, as a single loader's do; their
stats are merged into one stats object of the loader's shape (cell.measure_row reads it unchanged).

The merge (`merge_stats`): counts and rates add up, per-connection counts are concatenated (in host
order), latencies are merged bucket by bucket from each loader's histogram (hist.py: never by averaging
percentiles), the window's times are the first loader's. Every loader is asked to start its window at
the same instant (`start_at`, on the controller's clock, which each Loader moves into its host's by the
offset measured over its channel, sshlink.Clock); `loaders` says what each host did and how far apart
their windows began, read back on the controller's clock, with the error of those offsets.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from netprof.profiler.model.hist import merge_latency
from netprof.profiler.run.loader_client import Loader, LoaderError, RunRequest

# The connect phase's allowance before the common window start: a bridge connects 100 connections in a few ms,
# a WAN in a few round trips; a loader that connects later starts its window late (window_skew_s says so).
CONNECT_ALLOWANCE_S = 0.3
CONNECT_PER_CONN_S = 20e-6
_SUMMED = ("connections", "connected", "messages", "msgs_per_sec", "reconnects")
_LATENCIES = ("latency_us", "latency_sent_us")


def split(total: int, n: int) -> list[int]:
    """`total` as n shares that differ by at most one, the larger ones first."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def _add_dicts(dicts: list[dict]) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _strip_hist(obj):
    """The merged stats without the buckets (a row keeps the percentiles; the buckets were for merging)."""
    if isinstance(obj, dict):
        return {k: _strip_hist(v) for k, v in obj.items() if k != "hist"}
    if isinstance(obj, list):
        return [_strip_hist(v) for v in obj]
    return obj


def _merge_phase(phases: list[dict]) -> dict:
    first = phases[0]
    out = dict(first)
    out["messages"] = sum(p.get("messages", 0) for p in phases)
    out["msgs_per_sec"] = sum(p.get("msgs_per_sec", 0.0) for p in phases)
    out["per_conn_messages"] = [n for p in phases for n in p.get("per_conn_messages", [])]
    for key in _LATENCIES:
        if key in first:
            out[key] = merge_latency([p[key] for p in phases])
    if "parts" in first:
        out["parts"] = [{**part, "messages": sum(p["parts"][i]["messages"] for p in phases),
                         "msgs_per_sec": sum(p["parts"][i]["msgs_per_sec"] for p in phases)}
                        for i, part in enumerate(first["parts"])]
    return out


def merge_stats(all_stats: list[dict]) -> dict:
    """One stats object from several loaders' (each asked with histograms); the first is the reference."""
    first = all_stats[0]
    out = _merge_phase(all_stats)
    for key in _SUMMED:
        if key in first:
            out[key] = sum(s.get(key, 0) for s in all_stats)
    out["errors"] = _add_dicts([s.get("errors", {}) for s in all_stats])
    if "status" in first:
        out["status"] = _add_dicts([s["status"] for s in all_stats])
    out["setup_s"] = max(s.get("setup_s") or 0.0 for s in all_stats)
    if "served_first" in first:
        firsts = [s.get("served_first") or {} for s in all_stats]
        out["served_first"] = {**_add_dicts([{k: v for k, v in f.items() if k != "s"} for f in firsts]),
                               "s": max(f.get("s", 0.0) for f in firsts)}
    out["aborted"] = any(s.get("aborted") for s in all_stats)
    cpu = _add_dicts([{k: v for k, v in s.get("loader_cpu", {}).items() if k != "cpu_frac"} for s in all_stats])
    cpu["cpu_frac"] = sum(s.get("loader_cpu", {}).get("cpu_frac", 0.0) for s in all_stats) / len(all_stats)
    out["loader_cpu"] = cpu  # cpu_frac: the loaders' mean (each of its own threads)
    un = [s.get("unanswered", {}) for s in all_stats]
    out["unanswered"] = {"count": sum(u.get("count", 0) for u in un),
                         "max_age_us": max((u.get("max_age_us", 0.0) for u in un), default=0.0),
                         "connections": sum(u.get("connections", 0) for u in un)}
    if "error_sample" not in out:
        sample = next((s["error_sample"] for s in all_stats if "error_sample" in s), None)
        if sample:
            out["error_sample"] = sample
    if "phases" in first:
        out["phases"] = {name: _merge_phase([s["phases"][name] for s in all_stats]) for name in first["phases"]}
    if "open_loop" in first:
        ols = [s["open_loop"] for s in all_stats]
        merged = _add_dicts([{k: v for k, v in o.items() if not isinstance(v, dict)} for o in ols])
        for key in ("behind_late_us", "schedule_late_us", "connect_us"):  # no buckets for these: the worst loader's
            if key in first["open_loop"]:
                merged[key] = {q: max(o[key][q] for o in ols) for q in first["open_loop"][key]}
        merged["loader_late_threshold_us"] = first["open_loop"]["loader_late_threshold_us"]
        out["open_loop"] = merged
        out["rate"] = sum(s.get("rate", 0.0) for s in all_stats)
    return _strip_hist(out)


class LoaderSet:
    """Loaders on several hosts driven as one Loader (the `run` that cell.run_cell calls)."""

    def __init__(self, loaders: list[Loader], sources: list[list[str]], hosts: list[str],
                 clock_errors: list[float]) -> None:
        """Each Loader reads its host's times into ours (Loader.clock_offset_s); `clock_errors` are the
        bounds of those offsets."""
        self.loaders, self.sources, self.hosts, self.errors = loaders, sources, hosts, clock_errors

    def run(self, req: RunRequest, on_event: Callable[[dict], None] | None = None,
            timeout: float | None = None) -> dict:
        n = len(self.loaders)
        shares = split(req.connections, n)
        rates = [req.rate * c / req.connections for c in shares] if req.rate else [None] * n
        # Connections as needed: each loader may open its share of the cap (split as the connections are, so each
        # share is at least the loader's own connections, and the shares add up to the cap).
        caps = split(req.max_connections, n) if req.max_connections else [None] * n
        # One window start for all, on our clock (each Loader moves it into its host's): after the warm-up and
        # a connect allowance, so that none of them has to start late.
        start_at = time.monotonic() + req.warmup + CONNECT_ALLOWANCE_S + req.connections * CONNECT_PER_CONN_S
        # No timeline: its slices carry no buckets to merge (PROTOCOL.md, "Timeline"), so a multi-host cell has none.
        reqs = [dataclasses.replace(req, connections=c, sources=list(src), histograms=True, rate=r,
                                    max_connections=cap, start_at=start_at, timeline=None)
                for c, src, r, cap in zip(shares, self.sources, rates, caps)]
        results: list[dict | None] = [None] * n
        failures: list[BaseException | None] = [None] * n
        # A held run (PROTOCOL.md, "Hold"): every host keeps its connections until the first one's measure_stop has
        # been read here (the cell's marks read the server's counts there); each Loader.run releases its own once
        # its on_event returns.
        read_at_stop = threading.Event()

        def first_event(evt: dict) -> None:
            try:
                if on_event is not None:
                    on_event(evt)
            finally:
                if evt.get("event") == "measure_stop":
                    read_at_stop.set()

        def other_event(evt: dict) -> None:
            if evt.get("event") == "measure_stop" and req.hold:
                read_at_stop.wait(req.hold)

        def one(i: int) -> None:
            try:
                results[i] = self.loaders[i].run(reqs[i], other_event, timeout)
            except BaseException as e:  # noqa: BLE001 (raised in the caller's thread below)
                failures[i] = e

        others = [threading.Thread(target=one, args=(i,), name=f"loader-{self.hosts[i]}") for i in range(1, n)]
        for t in others:  # the others first: the first one's window is the cell's, and theirs start with it
            t.start()
        try:
            results[0] = self.loaders[0].run(reqs[0], first_event, timeout)
        except KeyboardInterrupt:
            for loader in self.loaders[1:]:  # Ctrl-C: not their whole window (their channels close, they exit)
                loader._close()
            raise
        finally:
            read_at_stop.set()  # the first ended without its measure_stop (a failure, Ctrl-C): none waits for it
            for t in others:
                t.join()
        for i, e in enumerate(failures):
            if e is not None:
                if isinstance(e, LoaderError):
                    raise LoaderError(e.kind, f"{self.hosts[i]}: {e.message}", e.stats)
                raise e
        merged = merge_stats([r for r in results if r is not None])
        merged["loaders"] = self.describe(results, shares)
        return merged

    def abort(self) -> None:
        """End every host's run in progress now (Loader.abort)."""
        for loader in self.loaders:
            loader.abort()

    def describe(self, results: list[dict | None], shares: list[int]) -> dict:
        """Each host's share and figures (lists in host order, comma-joined as a row keeps lists), and how
        far apart the windows began on the controller's clock, with the error of the clock offsets."""
        starts = [(r or {}).get("t_start", 0.0) for r in results]  # our clock (Loader.run moved them)
        return {"hosts": ",".join(self.hosts), "connections": ",".join(map(str, shares)),
                "messages": ",".join(str((r or {}).get("messages")) for r in results),
                "msgs_per_sec": ",".join(str((r or {}).get("msgs_per_sec")) for r in results),
                "window_skew_s": max(starts) - min(starts), "clock_error_s": max(self.errors)}
