"""Which descriptor off_cpu_io waited on: the server threads' time blocked in fd syscalls, by process,
syscall and descriptor (breakdown.bpf.h's bd_iowait), with each descriptor named from /proc while the
process lives (a socket by its addresses, else what the fd links to).

Two kinds of wait are the server's own, not a request's: its accepted connections (a thread per
connection blocks reading the next request; local port = one the process listens on) and readiness waits
(epoll, poll, select: an event loop idle between turns). What is left is what handlers waited on — a
database, another service — and `name_waits` says where most of it went:

    a = read(table); names = describe(a)       # at the window's end, while the server lives
    top = name_waits(first, last, names)       # IoWait("recvfrom", "TCP to 127.0.0.1:41000", 10, 0.98)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psutil

from ..base import syscall_name

# Readiness waits (an event loop between turns), not a handler's wait on one descriptor.
READINESS = frozenset({"poll", "select", "pselect6", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2",
                       "io_uring_enter"})

Key = tuple[int, int, int]  # (tgid, syscall number, descriptor)


@dataclass(frozen=True)
class FdName:
    what: str     # "TCP to 127.0.0.1:41000", "pipe:[123]", "/var/db.sqlite"
    client: bool  # an accepted connection of the server (a port it listens on)


@dataclass(frozen=True)
class IoWait:
    syscall: str
    what: str
    descriptors: int  # how many (process, fd) pairs the wait was spread over (a thread each, say)
    share: float      # of the server's waits on descriptors other than its clients and readiness waits
    ms: float         # their total, over the window

    def text(self) -> str:
        fds = "one descriptor" if self.descriptors == 1 else f"{self.descriptors} descriptors"
        return f"{self.syscall} on {fds}, {self.what}"


def read(table: Any) -> dict[Key, int]:
    return {(k.tgid, k.sc, k.fd): v.value for k, v in table.items()}


def _addr(a: Any) -> str:
    return f"[{a.ip}]:{a.port}" if ":" in a.ip else f"{a.ip}:{a.port}"


def _sockets(tgid: int) -> dict[int, FdName]:
    try:
        conns = psutil.Process(tgid).net_connections(kind="all")
    except psutil.Error:
        return {}
    listening = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}
    out = {}
    for c in conns:
        if c.fd < 0 or not c.laddr or isinstance(c.laddr, str):
            continue
        proto = "TCP" if c.type == 1 else "UDP"  # socket.SOCK_STREAM
        what = f"{proto} to {_addr(c.raddr)}" if c.raddr else f"{proto} on {_addr(c.laddr)}"
        out[c.fd] = FdName(what, client=c.laddr.port in listening and bool(c.raddr))
    return out


def describe(waits: dict[Key, int]) -> dict[tuple[int, int], FdName]:
    """The descriptors `waits` names, as they are now (call it while the server runs)."""
    names: dict[tuple[int, int], FdName] = {}
    for tgid in {k[0] for k in waits}:
        socks = _sockets(tgid)
        for fd in {k[2] for k in waits if k[0] == tgid}:
            if fd in socks:
                names[(tgid, fd)] = socks[fd]
                continue
            try:
                names[(tgid, fd)] = FdName(os.readlink(f"/proc/{tgid}/fd/{fd}"), client=False)
            except OSError:  # closed since, or the process is gone
                pass
    return names


def name_waits(first: dict[Key, int], last: dict[Key, int], names: dict[tuple[int, int], FdName],
               top: int = 3) -> list[IoWait]:
    """The handlers' waits between two readings, grouped by syscall and what the descriptor is (a thread
    per connection has a descriptor each to the same service), largest first."""
    groups: dict[tuple[str, str], list] = {}
    total = 0
    for key, ns in last.items():
        ns -= first.get(key, 0)
        tgid, sc, fd = key
        call = syscall_name(sc)
        name = names.get((tgid, fd))
        if ns <= 0 or call in READINESS or (name is not None and name.client):
            continue
        total += ns
        g = groups.setdefault((call, name.what if name else f"fd {fd} (closed before the window's end)"), [0, set()])
        g[0] += ns
        g[1].add((tgid, fd))
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]
    return [IoWait(call, what, len(fds), ns / total, ns / 1e6) for (call, what), (ns, fds) in ranked]
