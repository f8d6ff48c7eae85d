"""What `netprof watch` shows while it runs: on a terminal, a table redrawn every window (rich's Live); off one
(a pipe, a log), one line per window. Both read a window's figures (figures.py) and nothing else."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from netprof.probes.breakdown.breakdown import TIMER, TIMER_MOSTLY
from netprof.profiler.core import units
from netprof.profiler.core.safetext import clean_text
from netprof.profiler.watch.figures import UNSAMPLED_ROUTE, protocol

TOP_PARTS = 3
TOP_ROUTES = 10


def _ms(us: float | None) -> str:
    if us is None:
        return "-"
    return f"{us / 1e3:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def top_parts(f: dict[str, Any], n: int = TOP_PARTS) -> str:
    """"loop_wait 49%, queue_wait 48%, on_cpu 2%": the parts' shares of the breakdown's mean (of the watch's or a
    route's); "off_cpu_io 97% (timers)" when most of it was the event loop asleep until a timer."""
    parts = f["breakdown"]["parts_mean_us"]
    total = sum(v or 0 for v in parts.values())
    if not total:
        return "-"
    io, timer = parts.get("off_cpu_io") or 0, (f["breakdown"].get("detail_mean_us") or {}).get(TIMER) or 0
    said = {"off_cpu_io": " (timers)"} if io > 0 and timer >= TIMER_MOSTLY * io else {}
    ranked = sorted(parts.items(), key=lambda kv: -(kv[1] or 0))[:n]
    return ", ".join(f"{p} {100 * (v or 0) / total:.0f}%{said.get(p, '')}" for p, v in ranked)


def line(f: dict[str, Any], protocol: str | None = units.HTTP) -> str:
    """One window's figures in `protocol`'s words (req/s and /req for HTTP, msgs/s and /msg for an echo server)."""
    st = f["server_time_us"]
    capped = f.get("duty", 1.0) < 1.0  # --max-overhead: the requests answered in the whole set's share only
    follow = f"  (followed {f['duty']:.0%} of the window: --max-overhead)" if capped else ""
    # connections the server has not accepted yet: their requests are in no figure here until it does
    queued = f"  {n:,} waiting to be accepted" if (n := f.get("accept_queue")) else ""
    # threads ready to run with no CPU for them, half of one or more on average (a thread pool outgrowing its CPUs)
    if (w := f.get("threads_waiting")) is not None and w >= 0.5:
        queued += f"  {w:.1f} threads waiting for a CPU" if w < 10 else f"  {w:.0f} threads waiting for a CPU"
    if not f["requests_per_sec"]:  # no per-request figure to give, not a zero of each
        return f"0 {units.rate_unit(protocol)}: no {units.exchange(protocol)} answered" + queued + follow
    return (f"{f['requests_per_sec']:,.0f} {units.rate_unit(protocol)}  "
            f"server p50 {_ms(st['p50'])} p99 {_ms(st['p99'])}  "
            f"{top_parts(f)}  {f['syscalls_per_request'] or 0:.1f} syscalls"
            # (a figure that rounds to 0.0 is left out: "+ 0.0 io_uring ops" says nothing)
            + (f" + {ring:.1f} io_uring ops" if (ring := f.get("ring_ops_per_request") or 0) >= 0.05 else "")
            + units.per_abbrev(protocol) + queued
            + follow)


def table(f: dict[str, Any], title: str, protocol: str | None = units.HTTP) -> Group:
    head = Text(f"{title}: {line(f, protocol)}")
    t = Table(box=None, pad_edge=False)
    for col in ("route", units.rate_unit(protocol), "p50", "p99", f"syscalls{units.per_abbrev(protocol)}", "top parts"):
        t.add_column(col, justify="left" if col in ("route", "top parts") else "right")
    # the routes followed, most requests first, then those answered while the set was light (as the report's table)
    routed = [r for r in f["routes"] if r["route"] != UNSAMPLED_ROUTE][:TOP_ROUTES]
    for r in routed + [r for r in f["routes"] if r["route"] == UNSAMPLED_ROUTE]:
        st = r["server_time_us"]
        calls = r["syscalls_per_request"]  # None: not counted (the route "(unsampled)")
        t.add_row(Text(clean_text(r["route"])), f"{r['requests_per_sec'] or 0:,.0f}", _ms(st["p50"]), _ms(st["p99"]),
                  "-" if calls is None else units.calls_and_ring(calls, r.get("ring_ops_per_request")), top_parts(r))
    return Group(head, t)


class View:
    """Shows each window: live on a terminal, a line each off one (to stderr: stdout is --json's)."""

    def __init__(self, console: Console, title: str) -> None:
        self.console, self.title = console, title
        self.live: Live | None = None
        # what the server speaks, from the last window that read a request (figures.protocol); HTTP's words until
        # one has: a window under --max-overhead may read none
        self.protocol: str = units.HTTP

    def __enter__(self) -> View:
        if self.console.is_terminal:
            self.live = Live(Text(f"{self.title}: attached, first window in a moment"), console=self.console,
                             auto_refresh=False, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def window(self, f: dict[str, Any]) -> None:
        self.protocol = protocol(f["routes"]) or self.protocol
        if self.live is not None:
            self.live.update(table(f, self.title, self.protocol), refresh=True)
        else:
            self.console.print(Text(f"{self.title}: {line(f, self.protocol)}"), soft_wrap=True)
