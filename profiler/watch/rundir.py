"""`watch --out DIR`: the watch as a run's results directory, so the report a run writes (report.md, report.html,
summary.json, the findings) is written for it too, and `netprof report DIR` and `netprof compare` read it.

One row (docs/results-format.md), one cell: the watched server, its requests as the row's messages, and, since
watch has no client, the **server time** (a request's first byte in → its answer sent, the kernel's) where a
run has the loader's round trip (`lat_us`, the breakdown's `rtt_mean_us`). The row says so: `server_kind`
"watched", `latency` "server". What a run's loader alone knows is absent: the loader's CPU, errors,
unanswered requests, syscalls by name (watch counts them per request, not by name). The breakdown's parts
are the server's (SERVER_PARTS: no transit, no loader_wait).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netprof.probes.breakdown import breakdown_delta
from netprof.probes.breakdown.instrument import NAME as BREAKDOWN
from netprof.probes.breakdown.instrument import row_fields
from netprof.probes.instrument import Counted
from netprof.probes.registry import groups
from netprof.probes.sockwait.instrument import fill_row
from netprof.probes.sockwait.sockwait import hist_quantile_us, sockwait_delta
from netprof.probes.watch import SERVER_PARTS
from netprof.profiler.core import proc_label
from netprof.profiler.model import schema, stats
from netprof.profiler.model.results import ResultsStore
from netprof.profiler.run import meta as run_meta

from .config import WatchConfig
from .figures import ECHO, protocol, served_answers, server_hist
from .session import Outcome

QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p999": 0.999}  # the row's lat_us keys


def _latency(outcome: Outcome) -> dict[str, float | None]:
    hist, total_ns = server_hist(outcome.first, outcome.last)
    n = sum(hist)
    if not n:
        return {k: None for k in (*QUANTILES, "max", "mean")}
    out: dict[str, float | None] = {k: round(hist_quantile_us(hist, q), 1) for k, q in QUANTILES.items()}
    out["max"] = outcome.figures["every_request_server_time_us"]["max"]  # every request's, as the quantiles
    out["mean"] = round(total_ns / n / 1e3, 1)
    return out


def make_row(outcome: Outcome, backend: str) -> tuple[dict[str, Any], list[dict]]:
    """The watch's row and its per-connection rows (the socket-wait set's)."""
    f = outcome.figures
    lat = _latency(outcome)
    sampled = f["requests"] - f.get("unsampled", 0)
    seconds = outcome.seconds
    proc = outcome.proc if outcome.proc and min(outcome.proc.values()) >= 0 else None  # gone: unknown
    row: dict[str, Any] = {
        "backend": backend, "family": schema.WATCHED, "server_kind": schema.WATCHED, "interpreter": "",
        "python_version": None, "python_build": None, "framing": "own", "reads": "own",
        "protocol": protocol(f["routes"]) or ECHO, "connections": f["connections"]["served"], "pipeline": 1,
        "round": 1, "msize": None, "work": None, "think": None, "arrivals": schema.WATCHED, "max_connections": 0,
        "zmq_client": None, "warmup_after": None, "pinned": False, "workers": None, "loader_host": "", "tag": "",
        "rate": 0,
        "io_uring": "on", "status": "ok", "error": None, "latency": "server",
        **{group: {"attached": False} for group in groups()},
        "messages": f["requests"], "duration_s": round(seconds, 3), "msgs_per_sec": f["requests_per_sec"],
        "lat_us": lat, "probes": [BREAKDOWN],
        "watch": {"unsampled": f.get("unsampled", 0), "attached_share": f.get("attached_share"),
                  "syscalls_per_request": f["syscalls_per_request"],
                  "ring_ops_per_request": f["ring_ops_per_request"], "pipelined": f["pipelined"],
                  "probe_cpu_us_per_request": f["probes"]["cpu_us_per_request"],
                  "probe_cpu_share": f["probes"]["cpu_share"],
                  "followed_time_ratio": f["probes"]["followed_time_ratio"]},
    }
    sw = sockwait_delta(outcome.first.snapshot.sockwait, outcome.last.snapshot.sockwait)
    served = served_answers(sw, outcome.last.ports)
    row["per_conn"] = stats.fairness(served) if served else {}
    if proc is not None:
        user, sys_ = proc["user_s"], proc["sys_s"]
        row["cpu"] = {"user_s": user, "sys_s": sys_, "user_frac": user / (user + sys_) if user + sys_ > 0 else None,
                      "busy_frac": (user + sys_) / seconds if seconds else None}
        row["ctx_switches_per_msg"] = stats.ratio(proc["vol_ctx"] + proc["invol_ctx"], f["requests"])
        row["sched"] = outcome.sched
    counted = Counted(messages=sampled, duration_s=seconds, latency_us=lat, proc=proc)
    row["sockwait"]["attached"] = row[BREAKDOWN]["attached"] = True
    conns = fill_row(row, outcome.first.snapshot.sockwait, outcome.last.snapshot.sockwait, counted)
    d = breakdown_delta(outcome.first.snapshot.breakdown, outcome.last.snapshot.breakdown)
    bd = row_fields(d, counted)
    # the server's parts only: the client's network and read are no part of the server time
    for p in list(bd["mean_us"]):
        if p not in SERVER_PARTS:
            for key in ("mean_us", "p50_us", "p99_us", "tail_us"):
                bd[key].pop(p, None)
    parts = [bd["mean_us"].get(p) for p in SERVER_PARTS]
    bd["parts_mean_us"] = sum(v for v in parts if v is not None) if d.requests else None
    # what the parts partition: the server time of the requests followed (answered while the set was whole;
    # under --max-overhead lat_us is every request's, those answered while it was light too)
    rtt = f["server_time_us"]["mean"]
    bd["rtt_mean_us"] = rtt
    bd["unattributed_us"] = rtt - bd["parts_mean_us"] if rtt is not None and bd["parts_mean_us"] is not None else None
    row[BREAKDOWN].update(bd)
    return row, conns


def write(out: Path, cfg: WatchConfig, outcome: Outcome, argv: list[str]) -> None:
    """results.parquet (+ csv), sockwait_conn.parquet and meta.json in `out`, as a run writes them."""
    store = ResultsStore(out)
    meta = run_meta.collect(argv, {"watch": {"pid": outcome.target.pid, "label": outcome.target.label,
                                             "also": list(outcome.target.also), "interval": cfg.interval,
                                             "max_overhead": cfg.max_overhead, "routes": cfg.routes},
                                   "duration": round(outcome.seconds, 3), "rounds": 1, "pin": False})
    meta["watch_routes"] = outcome.figures["routes"]
    store.write_meta(meta)
    row, conns = make_row(outcome, proc_label.of_process(outcome.target.pid))
    store.add(row, conn_rows={"sockwait": conns})
