"""Where the CPU went: the backend's kernel/user split, and a loader (the instrument) that ran out of CPU."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, Thresholds, rule
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num, ring_of, syscalls_of


@rule("cpu_split", plots=("cpu",))
def cpu_split(ctx: Context) -> list[Anomaly]:
    """Kernel- or user-dominated backend CPU (informational), one note per backend."""
    t, found = ctx.t, []
    if "cpu.user_frac" not in ctx.cells:
        return []
    for _, g in ctx.cells.groupby(list(schema.SERVER_KEYS), dropna=False):
        uf = g["cpu.user_frac"].dropna()
        if uf.empty:
            continue
        u = float(uf.mean())
        if t.kernel_dominated_user_frac <= u < t.user_dominated_user_frac:
            continue
        first = g.iloc[0]
        ring = any(ring_of(r) for _, r in g.iterrows())
        title, text = _split_story(first["backend"], u, t, g.get("protocol"), ring)
        ev = _split_evidence(g, u)
        found.append(Anomaly("cpu_split", schema.finding_cell(first, whole_server=True), "info",
                             title, text, {k: v for k, v in ev.items() if v is not None}))
    return found


def _split_story(backend, u: float, t: Thresholds, protocol=None, ring: bool = False) -> tuple[str, str]:
    """The card's title and text for a backend whose CPU is `u` user space (its cells' `protocol`s: units' words;
    `ring`: it hands work to io_uring too, kernel work its syscalls do not count)."""
    each = units.per_unit(protocol)
    if u < t.kernel_dominated_user_frac:
        calls = "syscalls and io_uring operations" if ring else "syscalls"
        return (f"Kernel-dominated CPU: {backend}",
                f"{backend} spends {100 * (1 - u):.0f}% of its CPU in the kernel "
                f"({'TCP stack, syscalls and io_uring operations' if ring else 'TCP stack and syscalls'}). Its "
                f"cost {each} is set by how many {calls} it makes and how much the socket layer does per "
                f"call, so fewer {'of them' if ring else 'syscalls'} {each} (batching, larger reads) help more than "
                "faster Python would.")
    return (f"User-dominated CPU: {backend}",
            f"{backend} spends {100 * u:.0f}% of its CPU in user space (interpreter, event loop, handler). "
            f"The kernel is not its bottleneck: less Python {each} — a leaner loop (uvloop, protocols "
            "instead of streams) or native code — is what would make it faster.")


def _split_evidence(g: pd.DataFrame, u: float) -> dict:
    """The card speaks for all of the backend's cells: its figures are their mean, said so, and each cell's own."""
    user_us = g.get("cpu_us_per_msg.user", pd.Series(dtype=float)).mean()
    sys_us = g.get("cpu_us_per_msg.sys", pd.Series(dtype=float)).mean()
    mean_of = f"mean of its {len(g)} cells" if len(g) > 1 else schema.cell_label(g.iloc[0])
    ev = {f"user share of backend CPU ({mean_of})": f"{100 * u:.0f}%",
          f"CPU per message, user / kernel ({mean_of})":
              None if math.isnan(user_us) else f"{user_us:.1f} / {sys_us:.1f} µs",
          f"backend busy, share of one CPU ({mean_of})":
              r2(g["cpu.busy_frac"].mean()) if "cpu.busy_frac" in g else None}
    if len(g) > 1 and not math.isnan(user_us):
        dims = [k for k in schema.varying(g) if k != "backend"]
        ev["CPU per message, user / kernel, each cell"] = "; ".join(
            f"{schema.cell_label(r, dims)}: {num(r, 'cpu_us_per_msg.user') or 0:.1f} / "
            f"{num(r, 'cpu_us_per_msg.sys') or 0:.1f} µs" for _, r in g.iterrows())
    totals = [sum(p.values()) for _, r in g.iterrows() if (p := syscalls_of(r))]
    if totals:
        ev[f"syscalls per message ({mean_of})"] = r2(float(np.mean(totals)))
    if rings := [sum(ring_of(r).values()) for _, r in g.iterrows() if syscalls_of(r)]:
        if any(rings):
            ev[f"io_uring operations per message ({mean_of})"] = r2(float(np.mean(rings)))
    ev["connection counts"] = ", ".join(str(int(c)) for c in sorted(g["connections"].unique()))
    return ev


@rule("loader_bottleneck", consolidate=True, plots=("throughput",))
def loader_bottleneck(ctx: Context) -> list[Anomaly]:
    """The loader used ≳ 90% of its CPU: the figures are capped by the instrument, not the backend."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        lf = num(r, "loader_cpu.cpu_frac")
        if lf is None or lf < t.loader_saturated:
            continue
        busy = num(r, "cpu.busy_frac")
        ev = {"loader CPU (share of its CPUs)": r2(lf), "backend busy (share of one CPU)": r2(busy),
              "loader CPUs": ",".join(map(str, ctx.meta.get("pinning", {}).get("loader_cpus", []) or [])) or None}
        text = (f"The loader ran at {100 * lf:.0f}% of its CPU while measuring {where(r)}: the load generator, not "
                f"the backend, may have set the pace, so this {units.rate_unit(r.get('protocol'))} is a lower bound of "
                "what the backend can do. ")
        sev = "warning"
        if busy is not None and busy < t.backend_idle_busy_frac:
            sev = "critical"
            text += (f"The backend was busy only {100 * busy:.0f}% of one CPU, so it was waiting for the loader. ")
        if r.get("reads") == "frames" and (r.get("zmq_client") or schema.RUN_SETTINGS["zmq_client"]) == "libzmq":
            # libzmq's I/O thread and the loader's own share its CPUs; the loader's ZMTP client is one thread
            text += ("The loader drove this ZeroMQ server through libzmq (--zmq-client libzmq, the default, as the "
                     "reference harness does): libzmq's I/O thread and the loader's thread share its CPU. "
                     "--zmq-client native speaks ZMTP from the loader's one thread, at less CPU per message. ")
        text += "Give the loader more CPUs or threads, or compare backends at a scale where it is not saturated."
        found.append(Anomaly.at(r, "loader_bottleneck", sev, f"Loader saturated: {where(r)}", text, ev))
    return found
