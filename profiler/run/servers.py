"""The server a cell measures: one of netprof's built-in backends, the user's own command (`--cmd`),
or a process that is already running (`--attach`). Each is a `ServerSpec`; `start()` brings it up
for one cell and says where it listens and which process tree the probes follow.

A `--cmd` template is split with shlex (never a shell, unless the user writes `sh -c`), `{port}` is
replaced by a free loopback port, and the command runs as the user who invoked netprof through sudo
(SUDO_UID/SUDO_GID) unless `as_root`: only the probes and samplers need root. Run as that user it gets
that user's environment (`cmd_env`), not root's; `--env NAME=VALUE` (`parse_env`) is the one way to
add to a child's environment.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from netprof.backends import registry
from netprof.profiler.core import paths, proc_label, procs, rootenv, units
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.procs import LineTimeout, ManagedProcess, ProcessError, ProcessGroup

READY_TIMEOUT = 20.0
PORT_PLACEHOLDER = "{port}"
HOST_PLACEHOLDER = "{host}"  # the address to listen on: 127.0.0.1, or where --loader-hosts reach this host


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
    env: tuple[tuple[str, str], ...] = ()  # cmd: --env NAME=VALUE pairs, added to its environment
    start_time: int = 0  # attach: the process's start (procs.start_ticks), to tell a reused pid

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


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env(items: Iterable[str]) -> dict[str, str]:
    """`--env NAME=VALUE` options → {NAME: VALUE} (a later NAME wins); InputError names the fix."""
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise InputError(f"--env '{item}' is not NAME=VALUE with NAME a variable name (letters, digits, _; "
                             "not starting with a digit), e.g. --env PATH=/home/me/bin:/usr/bin")
        env[name] = value
    return env


def cmd_env(extra: dict[str, str], uid: int | None) -> dict[str, str]:
    """The environment of the user's command, plus `extra` (--env). Run as the invoking user (`uid`):
    the caller's environment as netprof got it (their PATH, not root's) with HOME, USER, LOGNAME and
    SHELL of that user from the password database (netprof's own HOME is root's), no SUDO_*, and no
    forced PYTHONSAFEPATH (the user's `python app.py` imports the modules beside it). Run as root:
    procs.child_env(), whose rules keep the working directory off a Python child's sys.path."""
    if uid is None:
        base = procs.child_env()
    else:
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            raise InputError(f"SUDO_UID {uid} has no entry in the password database: run netprof through sudo "
                             "as an existing user, or pass --as-root") from None
        base = rootenv.as_the_caller_had(dict(os.environ)) | {
            "HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name,
            "SHELL": entry.pw_shell or "/bin/sh"}
    return {k: v for k, v in base.items() if not k.startswith("SUDO_")} | extra


def _check_program(argv: list[str], env: dict[str, str]) -> None:
    """The program must be found on the PATH the command gets: under sudo that is the caller's PATH
    only if sudo kept it (sudo's secure_path is not the user's)."""
    path = env.get("PATH", os.defpath)
    if "/" in argv[0] or shutil.which(argv[0], path=path):
        return
    raise InputError(f"--cmd: '{argv[0]}' is not found on the PATH the command gets ({path}; under sudo that may be "
                     "sudo's secure_path, not your PATH): give its full path, or --env PATH=DIRS")


def from_cmd(template: str, name: str = "", ready_regex: str = "", target: str = "",
             as_root: bool = False, ready_timeout: float = READY_TIMEOUT,
             env: dict[str, str] | None = None) -> ServerSpec:
    try:
        argv = shlex.split(template)
    except ValueError as e:
        raise InputError(f"--cmd '{template}': {e}; quote it as a shell would") from None
    if not argv:
        raise InputError("--cmd is empty: give the command that starts your server, e.g. 'python app.py --port {port}'")
    env = env or {}
    caller = None if as_root else paths.sudo_caller()
    _check_program(argv, cmd_env(env, caller[0] if caller else None))
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
    label = name or proc_label.label(argv) or "cmd"
    return ServerSpec(label, "cmd", "cmd", "own", template=template, ready_regex=ready_regex, target=target,
                      as_root=as_root, ready_timeout=ready_timeout, env=tuple(env.items()))


def attached(pid: int, target: str, name: str = "") -> ServerSpec:
    """--attach PID's server, loaded at --target, or where it listens on loopback when that is one port."""
    try:
        proc = psutil.Process(pid)
        proc.status()
    except psutil.Error:
        raise InputError(f"--attach {pid}: no such process; give the pid of your running server") from None
    started = procs.start_ticks(pid)
    if started is None:
        raise InputError(f"--attach {pid}: no such process; give the pid of your running server")
    host, port = parse_target(target or _only_listener(pid))
    if not _listens(pid, port):
        raise InputError(f"--attach {pid}: that process (and its children) does not listen on port {port}; "
                         f"check --target {target}")
    label = name or proc_label.of_process(pid)
    return ServerSpec(label, "attach", "attach", "own", target=f"{host}:{port}", pid=pid, start_time=started)


def _tree(pid: int) -> set[int]:
    """`pid` and its descendants (those that could be listed)."""
    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return {pid}


def _listener(port: int, pid: int) -> str | None:
    """'pid 123 (python3, uid 1000)' of a process outside `pid`'s tree listening on TCP `port` (in this network
    namespace), or None. The tree is read after the listeners, so that the command's own listener (bound, or
    inherited by a child forked, since it was last looked for) is never taken for another's; a listener no
    process could be found for yet is left for the next look."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    ours = _tree(pid)
    for c in conns:
        if (c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid is not None
                and c.pid not in ours):
            try:
                p = psutil.Process(c.pid)
                return f"pid {c.pid} ({p.name()}, uid {p.uids().real})"
            except psutil.Error:
                return f"pid {c.pid}"
    return None


def listening(pid: int, tree: bool = True) -> set[tuple[str, int]]:
    """The (address, port) of every listening TCP socket of `pid` and (`tree`) its descendants."""
    try:
        root = psutil.Process(pid)
        members = [root, *(root.children(recursive=True) if tree else ())]
    except psutil.Error:
        return set()
    found = set()
    for p in members:
        try:
            conns = p.net_connections(kind="tcp")
        except psutil.Error:
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}
    return found


def accept_queue(pid: int, ports: Iterable[int]) -> int | None:
    """Connections waiting in the accept queues of the listening TCP sockets on `ports` in `pid`'s network namespace:
    handshaken (connected, for the client) but not accepted yet. None when none was found (the process is gone, or
    nothing listens there).
    From /proc/PID/net/tcp{,6}: psutil's connections carry no queue lengths; for a LISTEN socket (state 0A) the
    kernel writes its accept backlog where a connected socket has its receive queue (rx_queue)."""
    wanted, found, waiting = set(ports), False, 0
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}", encoding="ascii") as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split()  # sl local_address rem_address st tx_queue:rx_queue ...
                    if len(fields) < 5 or fields[3] != "0A":
                        # The kernel lists the listening sockets first: stopping here spares it writing out every
                        # connection (thousands in a loaded cell) while the window opens.
                        break
                    if int(fields[1].rpartition(":")[2], 16) in wanted:
                        found, waiting = True, waiting + int(fields[4].partition(":")[2], 16)
        except OSError:
            continue
    return waiting if found else None


def _listens(pid: int, port: int) -> bool:
    """`pid` or one of its descendants has a listening TCP socket on `port`."""
    return any(p == port for _, p in listening(pid))


# Addresses a loopback client reaches: every IPv4 address, every address of a dual-stack socket, or loopback's own
ANY = ("0.0.0.0", "::")


def _only_listener(pid: int) -> str:
    """'127.0.0.1:8000': where --attach's server takes loopback connections, when that is one port (else
    InputError asks for --target). Its own sockets only: a pre-fork server's master holds the one its workers
    share, and every process descends from pid 1."""
    where = {f"{ip if ip.startswith('127.') else '127.0.0.1'}:{port}" for ip, port in listening(pid, tree=False)
             if ip in ANY or ip.startswith("127.")}
    if len(where) == 1:
        return where.pop()
    if not where:
        raise InputError(f"--attach {pid}: that process listens on no loopback TCP port itself; give --target "
                         "HOST:PORT (where it, or a child of it, listens)")
    ports = sorted(where, key=lambda w: int(w.rpartition(":")[2]))
    raise InputError(f"--attach {pid} listens on {units.joined(ports)}: give --target HOST:PORT, the one to load")


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (the command binds it a moment later)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _safe_path_hint(tail: str, uid: int | None, env: tuple[tuple[str, str], ...]) -> str:
    """Why a Python command run as root found no module beside it: netprof starts it with PYTHONSAFEPATH=1
    (procs.child_env: root imports nothing from a directory another user may write), and the fix."""
    given = {k for k, _ in env}
    if uid is not None or "ModuleNotFoundError" not in tail or given & {"PYTHONPATH", "PYTHONSAFEPATH"}:
        return ""
    return (" (run as root, a --cmd gets PYTHONSAFEPATH=1: its script's directory is not on sys.path, so root "
            "imports nothing another user could plant there; run netprof through sudo as yourself, or give "
            "--env PYTHONPATH=DIR with the directory your app imports from)")


def start_cmd(group: ProcessGroup, spec: ServerSpec, cpus: str | None, listen: str = "127.0.0.1",
              deny_io_uring: bool = False) -> Running:
    """Start the user's command for one cell and wait until it is ready: its --ready-regex line (if
    any) and then its port, both within --ready-timeout. `listen`: the address {host} stands for.

    Ready means the command's own process tree listens on the port (as --attach checks), not merely that
    something accepts there: the port is on the command line, which every local user can read in
    /proc/PID/cmdline, and a Python server takes hundreds of milliseconds to bind it, so another user could
    bind it first and receive the load, headers and secrets included (issue 52). A listener there that is not
    the command's fails the cell, naming it."""
    if PORT_PLACEHOLDER in spec.template:
        host, port = listen, free_port(listen)
        argv = [a.replace(PORT_PLACEHOLDER, str(port)).replace(HOST_PLACEHOLDER, host)
                for a in shlex.split(spec.template)]
    else:
        (host, port), argv = parse_target(spec.target), shlex.split(spec.template)
    caller = None if spec.as_root else paths.sudo_caller()
    uid, gid = caller if caller else (None, None)
    # The user's command runs where the user is (their app is there), as the user: it is their code,
    # not one of netprof's root children, so the caller's directory is where it belongs.
    proc = group.spawn(f"cmd-{spec.name}", argv, cpus=cpus, user=uid, group=gid, env=cmd_env(dict(spec.env), uid),
                       deny_io_uring=deny_io_uring,
                       capture_stdout=bool(spec.ready_regex), cwd=os.getcwd())
    deadline = time.monotonic() + spec.ready_timeout
    pattern = re.compile(spec.ready_regex) if spec.ready_regex else None
    matched = pattern is None
    while time.monotonic() < deadline:
        if not proc.alive():
            tail = proc.stderr_tail()
            raise ProcessError(f"--cmd {spec.name} exited with code {proc.returncode()} before it was ready"
                               f"{': ' + tail if tail else ''}{_safe_path_hint(tail, uid, spec.env)}")
        if not matched:
            matched = _ready_line(proc, pattern, deadline)
        elif _listens(proc.pid, port):
            if pattern is not None:
                proc.drain_stdout()
            return Running(proc.pid, host, port, proc)
        elif (thief := _listener(port, proc.pid)) is not None:
            raise ProcessError(f"--cmd {spec.name}: port {port} is held by another process ({thief}), not by the "
                               "command's processes; it would have received the load: nothing was sent")
        else:
            time.sleep(0.05)
    tail = proc.stderr_tail()
    where = f"port {port}" + (f" (and --ready-regex '{spec.ready_regex}')" if pattern else "")
    raise ProcessError(f"--cmd {spec.name} did not become ready on {where} within {spec.ready_timeout:g} s: does it "
                       f"listen on {host}:{port}? (a slow start: --ready-timeout)"
                       + (f" Its stderr: {tail}" if tail else ""))


def _ready_line(proc: ManagedProcess, pattern, deadline: float) -> bool:
    """Whether the next stdout line (waited for up to 0.2 s, so the caller sees an exit) matches. A
    quiet moment is no failure: the caller's deadline is."""
    try:
        line = proc.readline(max(0.0, min(0.2, deadline - time.monotonic())))
    except LineTimeout:
        return False
    if line is None:  # stdout closed: no line can match; the deadline (or its exit) decides
        time.sleep(0.05)
        return False
    return bool(pattern.search(line))


def attach(spec: ServerSpec) -> Running:
    """The attached server for one cell: still the process validated at start (same pid, same start
    time: a pid the kernel reused belongs to another process) and still listening on the target port."""
    host, port = parse_target(spec.target)
    started = procs.start_ticks(spec.pid)
    if started is None:
        raise ProcessError(f"--attach {spec.pid}: the process is gone")
    if started != spec.start_time:
        raise ProcessError(f"--attach {spec.pid}: the process was replaced (PID reused)")
    if not _listens(spec.pid, port):
        raise ProcessError(f"--attach {spec.pid}: no longer listens on port {port}")
    return Running(spec.pid, host, port, None)
