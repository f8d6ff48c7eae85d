"""Which processes `netprof watch` follows: --pid (and its descendants), --port (the process listening on it,
found as `ss -ltnp` would) or --cgroup (a container's or a systemd unit's processes: the oldest one is the root,
the others are followed as its descendants are)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from netprof.profiler.core import proc_label, procs
from netprof.profiler.core.errors import InputError
from netprof.profiler.run import servers

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Target:
    pid: int                      # the root of the followed tree
    also: tuple[int, ...]         # other members (a cgroup's), each with its descendants
    label: str                    # how the user named it
    start_time: int               # the root's (procs.start_ticks), to tell it from a later process with the same pid
    note: str = ""                # said once when the watch starts: why it may see no request


def _process(pid: int, how: str) -> tuple[psutil.Process, int]:
    """The process and its start (procs.start_ticks)."""
    try:
        p = psutil.Process(pid)
        p.status()
    except psutil.Error:
        raise InputError(f"{how}: no such process; give the pid of a running server") from None
    started = procs.start_ticks(pid)
    if started is None:
        raise InputError(f"{how}: no such process; give the pid of a running server")
    return p, started


def by_pid(pid: int) -> Target:
    if pid <= 0:
        raise InputError(f"--pid {pid}: give the pid of a running server")
    _, started = _process(pid, f"--pid {pid}")
    label = f"pid {pid} ({proc_label.of_process(pid)})"
    # a pre-fork master's worker holds the socket too: the tree's
    note = "" if servers.listening(pid) else (f"{label} has no listening TCP socket in this network namespace, "
                                              "nor has a process below it: if it is not the server, give the server's "
                                              "pid or --port")
    return Target(pid, (), label, started, note)


def accept_queue(t: Target, ports: frozenset[int]) -> int | None:
    """Connections waiting to be accepted on the ports the tree listens on (the watch snapshot's `ports`), now: a
    server that falls behind accepting shows here before any request of theirs is read. None when none was read."""
    return servers.accept_queue(t.pid, ports) if ports else None


def listener(port: int) -> int | None:
    """The pid of the oldest process listening on TCP `port` (this network namespace), or None."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    pids = {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    alive = [(started, pid) for pid in pids if (started := procs.start_ticks(pid)) is not None]
    return min(alive)[1] if alive else None  # the oldest: a pre-fork server's master, not a worker


def by_port(port: int) -> Target:
    if not 0 < port < 65536:
        raise InputError(f"--port {port}: give a TCP port between 1 and 65535")
    pid = listener(port)
    if pid is None:
        raise InputError(f"--port {port}: no process listens on it here; give the server's port, or --pid")
    _, started = _process(pid, f"--port {port}")
    return Target(pid, (), f"port {port}: pid {pid} ({proc_label.of_process(pid)})", started)


def by_cgroup(path: str) -> Target:
    rel = path.strip()
    full = (CGROUP_ROOT / rel.lstrip("/")).resolve()
    if CGROUP_ROOT not in full.parents and full != CGROUP_ROOT:
        raise InputError(f"--cgroup {path}: give a path under {CGROUP_ROOT}, e.g. system.slice/nginx.service")
    try:
        members = [int(x) for x in (full / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        raise InputError(f"--cgroup {path}: no such cgroup (looked for {full}/cgroup.procs)") from None
    alive = [(started, pid) for pid in members if (started := procs.start_ticks(pid)) is not None]
    if not alive:
        raise InputError(f"--cgroup {path}: no process in it; start the server first")
    alive.sort()
    root = alive[0][1]
    return Target(root, tuple(pid for _, pid in alive[1:]), f"cgroup {rel} ({len(alive)} processes)", alive[0][0])


def resolve(pid: int | None, port: int | None, cgroup: str | None) -> Target:
    """The processes --pid, --port or --cgroup name (InputError: none, several, or netprof itself)."""
    given = [x for x in (pid, port, cgroup) if x is not None]
    if len(given) != 1:
        raise InputError("watch: give exactly one of --pid PID, --port PORT or --cgroup PATH")
    if pid is not None:
        t = by_pid(pid)
    elif port is not None:
        t = by_port(port)
    else:
        assert cgroup is not None
        t = by_cgroup(cgroup)
    if t.pid == os.getpid():
        raise InputError("watch: that is netprof itself; give the server's pid")
    return t


def alive(t: Target) -> bool:
    """The root is still the process that was watched (not gone, not its pid reused)."""
    return procs.start_ticks(t.pid) == t.start_time
