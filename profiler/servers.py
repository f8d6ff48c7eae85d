"""The server a cell measures: one of netprof's built-in backends, the user's own command (`--cmd`),
or a process that is already running (`--attach`). Each is a `ServerSpec`; `start()` brings it up
for one cell and says where it listens and which process tree the probes follow.

A `--cmd` template is split with shlex (never a shell, unless the user writes `sh -c`), `{port}` is
replaced by a free loopback port, and the command runs as the user who invoked netprof through sudo
(SUDO_UID/SUDO_GID) unless `as_root`: only the probes and samplers need root.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import time
from dataclasses import dataclass

import psutil

from netprof.backends import registry
from netprof.profiler.errors import InputError
from netprof.profiler.procs import ManagedProcess, ProcessError, ProcessGroup

READY_TIMEOUT = 20.0
PORT_PLACEHOLDER = "{port}"


@dataclass(frozen=True)
class ServerSpec:
    name: str  # the label in every row, table and file name
    kind: str  # builtin | cmd | attach
    family: str
    reads: str  # how it reads under --framing message (registry.READS); "own" for the user's servers
    transport: str = "tcp"
    template: str = ""  # cmd: the command line, with {port} or listening on `target`
    ready_regex: str = ""  # cmd: ready when this matches a line of its stdout (else: when the port accepts)
    target: str = ""  # host:port it listens on (attach; cmd without {port})
    pid: int = 0  # attach
    as_root: bool = False  # cmd: run as root instead of the sudo caller
    ready_timeout: float = READY_TIMEOUT  # cmd: how long it may take to become ready (--ready-timeout)

    @property
    def frames_own(self) -> bool:
        """It splits requests with its own parser (the user's servers, the HTTP backends): --framing
        does not apply, and its cells have framing "own"."""
        return self.kind != "builtin" or self.reads == "http"

    @property
    def multiprocess(self) -> bool:
        return self.kind != "builtin" or registry.get(self.name).multiprocess


@dataclass
class Running:
    """A server up for one cell: the process to watch (its tree), where it listens, and the
    process netprof started (None when attached)."""

    pid: int
    host: str
    port: int
    proc: ManagedProcess | None


def builtin(name: str) -> ServerSpec:
    info = registry.get(name)
    return ServerSpec(name, "builtin", info.family, info.reads, info.transport)


def parse_target(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    try:
        value = int(port)
    except ValueError:
        value = -1
    if not sep or not host or not 0 < value < 65536:
        raise InputError(f"--target '{text}' is not HOST:PORT; use e.g. 127.0.0.1:8080")
    if not host.startswith("127.") and host != "localhost":
        raise InputError(f"--target {text}: only loopback (127.0.0.0/8) may carry netprof's load")
    return ("127.0.0.1" if host == "localhost" else host), value


def from_cmd(template: str, name: str = "", ready_regex: str = "", target: str = "",
             as_root: bool = False, ready_timeout: float = READY_TIMEOUT) -> ServerSpec:
    try:
        argv = shlex.split(template)
    except ValueError as e:
        raise InputError(f"--cmd '{template}': {e}; quote it as a shell would") from None
    if not argv:
        raise InputError("--cmd is empty: give the command that starts your server, e.g. 'python app.py --port {port}'")
    if PORT_PLACEHOLDER not in template and not target:
        raise InputError(f"--cmd '{template}' has no {PORT_PLACEHOLDER}: put {PORT_PLACEHOLDER} where the port goes, "
                         "or give --target HOST:PORT where the command listens")
    if target:
        parse_target(target)
    if ready_regex:
        try:
            re.compile(ready_regex)
        except re.error as e:
            raise InputError(f"--ready-regex '{ready_regex}': {e}") from None
    if not 0.1 <= ready_timeout <= 3600:
        raise InputError(f"--ready-timeout {ready_timeout:g}: give seconds between 0.1 and 3600, "
                         "e.g. --ready-timeout 60")
    label = name or re.sub(r"[^A-Za-z0-9_.+-]", "_", os.path.basename(argv[0]))
    return ServerSpec(label, "cmd", "cmd", "own", template=template, ready_regex=ready_regex, target=target,
                      as_root=as_root, ready_timeout=ready_timeout)


def attached(pid: int, target: str, name: str = "") -> ServerSpec:
    host, port = parse_target(target)
    try:
        proc = psutil.Process(pid)
        proc.status()
    except psutil.Error:
        raise InputError(f"--attach {pid}: no such process; give the pid of your running server") from None
    if not _listens(pid, port):
        raise InputError(f"--attach {pid}: that process (and its children) does not listen on port {port}; "
                         f"check --target {target}")
    label = name or re.sub(r"[^A-Za-z0-9_.+-]", "_", proc.name()) or f"pid{pid}"
    return ServerSpec(label, "attach", "attach", "own", target=f"{host}:{port}", pid=pid)


def _listens(pid: int, port: int) -> bool:
    """`pid` or one of its descendants has a listening TCP socket on `port`."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for p in procs:
        try:
            conns = p.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (the command binds it a moment later)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _sudo_ids() -> tuple[int | None, int | None]:
    """The invoking user's uid/gid when netprof runs through sudo, else (None, None)."""
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return None, None
    return (uid, gid) if uid != 0 else (None, None)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def start_cmd(group: ProcessGroup, spec: ServerSpec, cpus: str | None) -> Running:
    """Start the user's command for one cell and wait until it is ready."""
    if PORT_PLACEHOLDER in spec.template:
        host, port = "127.0.0.1", free_port()
        argv = [a.replace(PORT_PLACEHOLDER, str(port)) for a in shlex.split(spec.template)]
    else:
        (host, port), argv = parse_target(spec.target), shlex.split(spec.template)
    uid, gid = (None, None) if spec.as_root else _sudo_ids()
    # The user's command runs where the user is (their app is there), as the user: it is their code,
    # not one of netprof's root children, so the caller's directory is where it belongs.
    proc = group.spawn(f"cmd-{spec.name}", argv, cpus=cpus, user=uid, group=gid,
                       capture_stdout=bool(spec.ready_regex), cwd=os.getcwd())
    deadline = time.monotonic() + spec.ready_timeout
    pattern = re.compile(spec.ready_regex) if spec.ready_regex else None
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ProcessError(f"--cmd {spec.name} exited with code {proc.returncode()} before it was ready"
                               f"{': ' + proc.stderr_tail() if proc.stderr_tail() else ''}")
        if pattern is not None:
            line = proc.readline(0.2)
            if line is not None and pattern.search(line) and _accepts(host, port):
                return Running(proc.pid, host, port, proc)
        elif _accepts(host, port):
            return Running(proc.pid, host, port, proc)
        else:
            time.sleep(0.05)
    tail = proc.stderr_tail()
    where = f"port {port}" + (f" (and --ready-regex '{spec.ready_regex}')" if pattern else "")
    raise ProcessError(f"--cmd {spec.name} did not become ready on {where} within {spec.ready_timeout:g} s: does it "
                       f"listen on 127.0.0.1:{port}? (a slow start: --ready-timeout)"
                       + (f" Its stderr: {tail}" if tail else ""))


def attach(spec: ServerSpec) -> Running:
    host, port = parse_target(spec.target)
    if not psutil.pid_exists(spec.pid):
        raise ProcessError(f"--attach {spec.pid}: the process is gone")
    return Running(spec.pid, host, port, None)
