"""What several rules share: a cell in a sentence, evidence figures rounded, the requests the loader
left unanswered, the syscall groups they reason about, and the reference host's pauses of a busy CPU."""

from __future__ import annotations

from dataclasses import dataclass

from netprof.profiler.core import units
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num

READ_SYSCALLS = ("recvfrom", "read", "recvmsg", "readv", "recvmmsg")
MEMORY_SYSCALLS = ("mmap", "munmap", "mremap", "brk")
WAITS = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect6", "poll", "ppoll")  # a loop's wait
# The evidence key of a starved cell's listen queue when its window opened (the rule sets it, the headline reads it).
QUEUED_AT_OPEN = "connections in its listen queue when the window opened"


def of(per: dict, names: tuple[str, ...]) -> float:
    """The calls per message of a group (READ_SYSCALLS, WAITS) in a row's syscalls per message."""
    return sum(per.get(k, 0.0) for k in names)

where = schema.cell_phrase  # 'asyncio_sock at 100 connections, 8 in flight (message framing)'

# How often netprof's reference host stops a busy CPU (bench/RESULTS.md, "A busy CPU's pauses", bench/cpu_pauses.py,
# 2026-12-04): with both CPUs busy, as in a loaded run, pauses of 1 ms or more per second per CPU and the longest
# (`longest_ms_top`: the longest seen). A few late sends in a burst, or a thousandth of the requests held by a few
# ms, are what such a pause of a loader's or a server's CPU leaves behind.
@dataclass(frozen=True)
class Pauses:
    source: str
    per_s: str  # pauses of 1 ms or more a second, per CPU (a range over rounds and CPUs)
    longest_ms: str  # the longest pause of a round (a range)
    longest_ms_top: float  # the longest of all


PAUSE_REF = Pauses("bench/cpu_pauses.py, 2026-12-04", per_s="0.5-1.8", longest_ms="3.4-13.5", longest_ms_top=13.5)


def r2(v: float | None, digits: int = 2):
    return None if v is None else round(v, digits)


def _count(v: float) -> str:
    """A count that may be the mean of a cell's rounds: '40', '533' (of 533.3: no third of a request), or '0.3'."""
    return units.count(v) if float(v).is_integer() or v >= 10 else f"{v:.1f}"


def unanswered(r) -> tuple[dict, str]:
    """The requests the loader left waiting at the window's end, older than any it measured (the row's
    `unanswered` group), as evidence and a sentence; empty when there were none (or an older loader)."""
    n = num(r, "unanswered.count")
    if not n:
        return {}, ""
    c = num(r, "unanswered.connections") or 0
    requests, conns = _count(n), _count(c)
    mean = "" if float(n).is_integer() and float(c).is_integer() else " (the mean of its rounds)"
    oldest = units.duration_us(num(r, "unanswered.max_age_us"))
    text = (f"At the window's end {requests} requests on {conns} connections{mean} were still unanswered, the oldest "
            f"for {oldest}, longer than any request the window measured: they are missing from its latency "
            "figures, so the real tail is longer (a load generator that waits for them, like wrk, reports a "
            "higher p99). ")
    ev = {"still unanswered at the window's end": f"{requests} on {conns} connections, the oldest waiting {oldest}"}
    return ev, text
