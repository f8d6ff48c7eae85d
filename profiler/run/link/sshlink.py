"""Loaders on other hosts, over OpenSSH (`--loader-hosts`): the controller's side of `netprof agent`.

For each host, `ssh HOST NETPROF agent` is started with both ends of its stdio on one end of a socketpair
(ssh carries the agent's private JSON-lines stream, agent.py), the agent is asked who it is (the same
netprof version and protocol, or the run stops with one line), the clocks are compared, and the agent
starts a loader whose control channel the same stream then carries: a `Loader` like a local one.

ssh runs as the invoking user (SUDO_UID, with that user's HOME, so their ~/.ssh and agent keys), never as
root with a configuration a user supplied: ssh_config's ProxyCommand, LocalCommand and `Match exec` run
commands (docs/threat-model.md). BatchMode: a host that would prompt fails at once instead. The remote
command is fixed (the netprof path, quoted, and `agent`); nothing the user typed reaches the remote shell.

The server runs here, listening on the address the loader hosts reach this host by (the source of their
ssh connection, SSH_CONNECTION), and each loader connects from its own address there. That address comes
from the other host: it is used only when it is one of this host's own (check_addresses).
"""

from __future__ import annotations

import contextlib
import glob
import ipaddress
import json
import os
import pwd
import re
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import netprof
from netprof.profiler.core import paths
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.procs import ProcessError, ProcessGroup
from netprof.profiler.core.safetext import clean_text
from netprof.profiler.run.link.agent import PROTOCOL
from netprof.profiler.run.link.loaderset import LoaderSet
from netprof.profiler.run.link.netns import DEFAULT_CONNECT_TIMEOUT_S
from netprof.profiler.run.loader_client import Loader, LoaderError, _LineReader

HELLO_TIMEOUT_S = 20.0  # ssh's connect, key exchange and the far side's Python start
CLOCK_SAMPLES = 5  # the offset is the one of the quickest round trip
# A host name as ssh_config names it: no option-like or shell-special text (it also goes after "--").
_HOST = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}@)?[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}$")


def parse_hosts(text: str, option: str = "--loader-hosts") -> list[str]:
    hosts = [h.strip() for h in text.split(",") if h.strip()] if text else []
    for h in hosts:
        if not _HOST.match(h):
            raise InputError(f"{option}: '{h}' is not a host name ([USER@]HOST as in your ssh config)")
    if len(set(hosts)) != len(hosts):
        raise InputError(f"{option}: a host is listed twice")
    return hosts


def remote_command(remote_netprof: str) -> str:
    """The command line the far side's shell runs: the netprof there and `agent`, quoted."""
    if remote_netprof:
        return f"{shlex.quote(remote_netprof)} agent"
    return f"{shlex.quote(sys.executable)} -m netprof.profiler agent"  # the same path as ours


def ssh_argv(host: str, ssh_config: str, remote_netprof: str) -> list[str]:
    argv = ["ssh", "-T", "-x", "-a", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3"]
    if ssh_config:
        argv += ["-F", ssh_config]
    return [*argv, "--", host, remote_command(remote_netprof)]


# How deep ssh follows Include (OpenSSH's READCONF_MAX_DEPTH): a deeper chain fails in ssh itself.
MAX_INCLUDE_DEPTH = 16
_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.*)$", re.IGNORECASE)


def check_ssh_config(given: str) -> str:
    """`--ssh-config FILE`, absolute (ssh runs in /, so a relative path would name another file there), when
    it may be read by the ssh netprof starts; InputError (one line, exit 2) otherwise.

    ssh runs a config's ProxyCommand, LocalCommand and `Match exec`, and does not check a -F file's owner: run
    by plain root (no SUDO_UID: root's own shell, doas, pkexec), ssh and what the file says run as root. So the
    file, and every file it includes, is trusted as the other inputs root executes are (paths.untrusted_reason):
    owned by root, the effective user or the sudo caller, writable by nobody else, nor any directory above it
    (a sticky one like /tmp aside). Include lines are followed as ssh reads them (every one, whatever Host or
    Match block holds it; `~` and relative names as ssh expands them for a user configuration; glob patterns),
    to ssh's own depth: a pattern, or a file not there yet, needs its directory trusted too, as anyone who can
    write there could add a file it matches. `ssh -G` would print the result, but it runs `Match exec`: the
    files are read here instead, before ssh sees them."""
    path = os.path.abspath(given)
    if not os.path.isfile(path):
        raise InputError(f"--ssh-config {given}: no such file")
    _check_config_file(path, given, [], set())
    return path


def _untrusted_config(why: str, what: str) -> InputError:
    runs_as = "root" if os.geteuid() == 0 and paths.sudo_caller() is None else "you"
    return InputError(f"{what} is not trusted: {why}; ssh runs what a config says (ProxyCommand, Match exec) as "
                      f"{runs_as}: make it owned by root or you and not writable by others (chown root, chmod go-w: "
                      "the file and its directories)")


def _check_config_file(path: str, given: str, chain: list[str], seen: set[str]) -> None:
    what = f"--ssh-config {given}" + "".join(f", its Include {c}" for c in chain)
    if why := paths.untrusted_reason(path, uids=paths.caller_uids()):
        raise _untrusted_config(why, what)
    real = os.path.realpath(path)
    if real in seen or not os.path.isfile(real):
        return  # read already (ssh fails on a loop at its depth), or nothing ssh reads lines from
    seen.add(real)
    with open(real, "rb") as f:
        text = f.read().decode(errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        if not (m := _INCLUDE.match(line)):
            continue
        try:
            words = shlex.split(m.group(1))
        except ValueError:
            raise InputError(f"{what}: line {n} (Include) cannot be read: a quote is not closed") from None
        for word in words:
            if word.startswith("#"):
                break  # a comment ends ssh's arguments
            if len(chain) >= MAX_INCLUDE_DEPTH:
                raise InputError(f"{what}: Include nested deeper than {MAX_INCLUDE_DEPTH} files (ssh's own limit)")
            pattern = _include_pattern(word)
            shown = f"{word} (line {n})"
            if glob.has_magic(pattern) or not os.path.lexists(pattern):
                parent = _existing_parent(pattern)  # where a match could be added
                if why := paths.untrusted_reason(parent, uids=paths.caller_uids()):
                    raise _untrusted_config(why, f"{what}, its Include {shown}")
            for match in sorted(glob.glob(pattern)):
                _check_config_file(match, given, [*chain, shown], seen)


def _include_pattern(word: str) -> str:
    """An Include argument as ssh reads it in a user configuration (a -F file is one): relative to ~/.ssh,
    `~` the home of the user ssh runs as (its HOME), `~user` that user's; absolute."""
    if not word.startswith(("/", "~")):
        word = "~/.ssh/" + word
    if word.startswith("~"):
        name, _, rest = word[1:].partition("/")
        try:
            word = os.path.join(pwd.getpwnam(name).pw_dir if name else _as_caller()[2]["HOME"], rest)
        except KeyError:
            pass  # no such user: glob(3) leaves the name as it is, relative to ssh's directory, /
    return os.path.join("/", word)


def _existing_parent(pattern: str) -> str:
    """The deepest existing directory above `pattern` with no glob character up to it."""
    parts = pattern.split("/")
    cut = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts) - 1)
    d = "/".join(parts[:cut]) or "/"
    while not os.path.isdir(d):
        d = os.path.dirname(d)
    return d


def _as_caller() -> tuple[int | None, int | None, dict[str, str]]:
    """(uid, gid, env) for ssh: the sudo caller's, with their HOME and SSH_AUTH_SOCK; root's own otherwise."""
    caller = paths.sudo_caller()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM")}
    if caller is None:
        return None, None, {**env, "HOME": os.environ.get("HOME", "/root")}
    uid, gid = caller
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        raise InputError(f"SUDO_UID {uid} has no entry in the password database: run netprof through sudo "
                         f"as a real user for --loader-hosts") from None
    if sock := os.environ.get("SSH_AUTH_SOCK"):
        env["SSH_AUTH_SOCK"] = sock
    return uid, gid, {**env, "HOME": home, "USER": pwd.getpwuid(uid).pw_name}


@dataclass
class Clock:
    offset_s: float  # the agent's CLOCK_MONOTONIC minus ours
    error_s: float  # half the round trip the offset was measured over: the bound of its error


def measure_clock(send, read) -> Clock:
    best: tuple[float, float] | None = None
    for _ in range(CLOCK_SAMPLES):
        t0 = time.monotonic()
        send({"cmd": "clock"})
        evt = read()
        t1 = time.monotonic()
        if evt.get("event") != "clock" or not isinstance(evt.get("t"), (int, float)):
            raise ProcessError(f"the agent answered {evt!r} to clock")
        rtt = t1 - t0
        if best is None or rtt < best[0]:
            best = (rtt, evt["t"] - (t0 + t1) / 2)
    assert best is not None
    return Clock(offset_s=best[1], error_s=best[0] / 2)


@dataclass
class RemoteLoader:
    host: str
    loader: Loader
    hello: dict
    clock: Clock

    @property
    def controller_addr(self) -> str:
        """This host's address as the loader host sees it (its ssh connection's source)."""
        return self.hello["ssh_connection"].split()[0]

    @property
    def own_addr(self) -> str:
        """The loader host's address its ssh connection came in on: the loader connects from it."""
        return self.hello["ssh_connection"].split()[2]


class Session:
    """`ssh HOST NETPROF agent`, its hello checked and its clock compared; `option` names the option the
    host came from in every error (one line, exit 2)."""

    def __init__(self, group: ProcessGroup, host: str, option: str, ssh_config: str = "",
                 remote_netprof: str = "") -> None:
        self.host, self.option, self.ssh_config = host, option, ssh_config
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        uid, gid, env = _as_caller()
        try:
            self.proc = group.spawn(f"ssh {host}", ssh_argv(host, ssh_config, remote_netprof),
                                    stdio=theirs.fileno(), env=env, user=uid, group=gid)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel = ours
        self.reader = _LineReader(ours, untrusted=True)  # every string it reads loses its control characters
        try:
            self.send({"cmd": "hello", "protocol": PROTOCOL, "version": netprof.__version__})
            self.hello = self.read()
            self._check_hello()
            self.clock = measure_clock(self.send, self.read)
        except BaseException:
            ours.close()
            raise

    def send(self, obj: dict) -> None:
        try:
            self.channel.sendall((json.dumps(obj) + "\n").encode())
        except OSError:  # ssh exited already (an unknown host, a refused key): say why it did
            raise self._ended() from None

    def read(self, timeout: float = HELLO_TIMEOUT_S) -> dict:
        """The next event; InputError naming the host (and ssh's own last words) when the session ended."""
        try:
            evt = self.reader.read(time.monotonic() + timeout)
        except (TimeoutError, OSError):
            evt = None
        except ValueError as e:
            evt = {"event": "error", "message": str(e)}
        if evt is None:
            raise self._ended()
        return evt

    def _ended(self) -> InputError:
        """The one line for a session that ended: the host, ssh's last line on stderr, what to try."""
        self.channel.close()
        try:
            self.proc.popen.wait(timeout=2)
        except Exception:  # noqa: BLE001 (still running: stopped with the group)
            pass
        why = (self.proc.stderr_tail() or "").strip().splitlines()
        try_it = " ".join(["ssh", *(["-F", self.ssh_config] if self.ssh_config else []), self.host, "true"])
        return InputError(f"{self.option} {self.host}: ssh or the agent failed: "
                          f"{why[-1] if why else 'no answer'} (try `{try_it}`; keys, not passwords: BatchMode)")

    def _check_hello(self) -> None:
        hello, where = self.hello, f"{self.option} {self.host}"
        if hello.get("event") != "hello":
            raise InputError(f"{where}: the far side did not answer as a netprof agent: {hello!r}")
        if hello.get("protocol") != PROTOCOL or hello.get("version") != netprof.__version__:
            raise InputError(f"{where}: its netprof is {hello.get('version')} (agent protocol "
                             f"{hello.get('protocol')}), this one {netprof.__version__} (protocol {PROTOCOL}): "
                             f"install the same netprof there (`make setup`), or point --remote-netprof at it")
        if len(str(hello.get("ssh_connection", "")).split()) != 4:
            raise InputError(f"{where}: the agent has no SSH_CONNECTION: it must be started by sshd")


def local_addresses() -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses of this host's interfaces (in its network namespace), without an IPv6 scope."""
    import psutil  # deferred: only --loader-hosts asks

    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    found.add(ipaddress.ip_address(a.address.split("%")[0]))
                except ValueError:
                    continue
    return found


def check_addresses(hello: dict, host: str) -> None:
    """The addresses a loader host's agent names (SSH_CONNECTION, docs/agent-protocol.md), before the server
    listens on the first: it must be an address of one of this host's interfaces, not the unspecified one
    (0.0.0.0 or :: would make the server listen on every interface, where any host can connect); the
    third, the loader host's own, an IP address. InputError naming the host and the reason otherwise."""
    where = f"--loader-hosts {host}"
    ours, _, theirs, _ = str(hello.get("ssh_connection", "")).split()
    try:
        ip = ipaddress.ip_address(ours.split("%")[0])
        ipaddress.ip_address(theirs.split("%")[0])
    except ValueError:
        raise InputError(f"{where}: its agent's SSH_CONNECTION ({hello.get('ssh_connection')}) does not hold IP "
                         "addresses: it must be started by sshd") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped  # ::ffff:a.b.c.d, as a dual-stack sshd may say: the IPv4 address
    if ip.is_unspecified:
        raise InputError(f"{where}: its agent says this host is {ours}, the unspecified address: the server would "
                         "listen on every interface; netprof listens only on an address of this host's own")
    if ip not in local_addresses():
        raise InputError(f"{where}: its agent says this host is {ours}, which is no address of this host's "
                         f"interfaces: the server listens only on one of its own (is {host} reached through NAT or "
                         "a proxy? --loader-hosts needs a direct route)")


def start_loader(group: ProcessGroup, host: str, ssh_config: str = "", remote_netprof: str = "",
                 cpus: str | None = None, threads: int = 1) -> RemoteLoader:
    """An agent on `host` over ssh, checked (its versions, the addresses it names), and its loader started;
    InputError naming the host on failure."""
    s = Session(group, host, "--loader-hosts", ssh_config, remote_netprof)
    try:
        check_addresses(s.hello, host)
        s.send({"cmd": "loader", "cpus": cpus, "threads": threads})
        started = s.read()
        if started.get("event") != "loader":
            raise InputError(f"--loader-hosts {host}: the agent could not start a loader: "
                             f"{started.get('message', started)}")
        loader = Loader(s.proc, s.channel, reader=s.reader)
        loader.clock_offset_s = s.clock.offset_s  # its events' times, read in ours
        loader.clock_error_s = s.clock.error_s
        try:
            loader.ping(timeout=10.0)
        except LoaderError as e:
            raise ProcessError(f"the loader on {host} did not answer: {e.message}") from None
        return RemoteLoader(host, loader, s.hello, s.clock)
    except BaseException:
        s.channel.close()
        raise


_SAFE_PART = re.compile(r"^[A-Za-z0-9_.@+=,-]+$")

# What a server host may send back (issue 52, finding 3): its results directory's files are written here as they
# come, one open at a time (never held whole in memory: 192 MiB of files once took the root controller to 565 MiB),
# within these caps; past one the run ends with it named. A real results directory is a few MiB to a few hundred
# (flamegraphs, per-connection tables); the caps are there to bound a hostile one.
MAX_RESULT_FILE = 1 << 30  # bytes of one file
MAX_RESULT_TOTAL = 4 << 30  # bytes of all of them
MAX_RESULT_FILES = 10_000
MAX_RESULT_DEPTH = 8  # directories below the results directory


def _result_path(out: Path, rel: object) -> Path:
    """Where a file the server host sent goes: under `out`, by a relative path of plain names only."""
    parts = str(rel).split("/") if isinstance(rel, str) else []
    if not parts or any(p in ("", ".", "..") or not _SAFE_PART.match(p) for p in parts):
        raise ProcessError(f"the server host sent a result file with a path netprof does not write: {rel!r}")
    if len(parts) - 1 > MAX_RESULT_DEPTH:
        raise ProcessError(f"the server host sent a result file {len(parts) - 1} directories deep: netprof writes "
                           f"at most {MAX_RESULT_DEPTH} (MAX_RESULT_DEPTH)")
    return out.joinpath(*parts)


class ResultFiles:
    """The server host's results directory, written under `out` as its `file` events come: a file's pieces come one
    after another (agent.py), so one file is open at a time, written beside its name and renamed onto it once
    the next begins or the run ends (atomic.open_atomic: through no link). ProcessError, naming the cap, past
    one of the caps above, for a piece of a file that is not the one being written, or a file sent twice."""

    def __init__(self, out: Path, max_file: int = MAX_RESULT_FILE, max_total: int = MAX_RESULT_TOTAL,
                 max_files: int = MAX_RESULT_FILES) -> None:
        self.out, self.max_file, self.max_total, self.max_files = out, max_file, max_total, max_files
        self.written: set[Path] = set()
        self.total = 0
        self._open: tuple[Path, contextlib.ExitStack, IO[bytes]] | None = None
        self._size = 0

    def add(self, rel: object, data: bytes, append: bool) -> None:
        path = _result_path(self.out, rel)
        if append:
            if self._open is None or self._open[0] != path:
                raise ProcessError(f"the server host sent a piece of result file {rel!r} out of turn")
        else:
            if path in self.written:
                raise ProcessError(f"the server host sent result file {rel!r} twice")
            if len(self.written) >= self.max_files:
                raise ProcessError(f"the server host sent more than {self.max_files:,} result files (MAX_RESULT_FILES)")
            self.commit()
            self._begin(path)
        self._size += len(data)
        self.total += len(data)
        if self._size > self.max_file:
            raise ProcessError(f"the server host sent result file {rel!r} of more than {self.max_file:,} bytes "
                               f"(MAX_RESULT_FILE)")
        if self.total > self.max_total:
            raise ProcessError(f"the server host sent more than {self.max_total:,} bytes of result files "
                               f"(MAX_RESULT_TOTAL)")
        assert self._open is not None
        self._open[2].write(data)

    def _begin(self, path: Path) -> None:
        from netprof.profiler.core import atomic

        atomic.ensure_out_dir(self.out)
        rel = path.relative_to(self.out)
        if len(rel.parts) > 1:
            atomic.make_subdir(self.out, str(rel.parent))
        stack = contextlib.ExitStack()
        f = stack.enter_context(atomic.open_atomic(path, "wb"))
        self._open, self._size = (path, stack, f), 0
        self.written.add(path)

    def commit(self) -> None:
        """The file being written, renamed onto its name (complete)."""
        if self._open is not None:
            stack, self._open = self._open[1], None
            stack.close()

    def discard(self) -> None:
        """The file being written, removed (the run ended before it was complete)."""
        if self._open is not None:
            stack, self._open = self._open[1], None
            stack.__exit__(ProcessError, ProcessError("incomplete"), None)


def run_on_server_host(host: str, args: list[str], out: Path, ssh_config: str = "", remote_netprof: str = "",
                       probes: bool = True, secrets: dict | None = None) -> int:
    """`--server-host HOST`: the whole run (server, probes, cells, report) by the netprof on HOST, started by
    its agent; its output shown here as it comes, its results directory copied into `out` (created here),
    its exit code returned. Loaders given with --loader-hosts are reached from HOST (it needs ssh to them).
    `secrets` (headers, body, env items) go over the agent's channel, not on the remote command line."""
    with ProcessGroup() as group:
        s = Session(group, host, "--server-host", ssh_config, remote_netprof)
        if probes and s.hello.get("bpf"):
            raise InputError(f"--server-host {host} cannot run the probes: {s.hello['bpf']}; or pass --no-probes")
        s.send({"cmd": "run", "args": args, "secrets": secrets or {}})
        files = ResultFiles(out)
        try:
            return _relay_run(s, host, out, files)
        finally:
            files.discard()  # what is still open was not complete (a normal end committed it)


def _relay_run(s: Session, host: str, out: Path, files: ResultFiles) -> int:
    """The server host's run, relayed: its output printed as it comes, its files written; its exit code."""
    import base64

    remote_out = None
    while True:
        evt = s.read(timeout=24 * 3600.0)  # the run's own length: it says when it ends
        kind = evt.get("event")
        if kind == "started":
            remote_out = str(evt.get("out") or "") or None
        elif kind in ("out", "err"):
            text = clean_text(str(evt.get("text", "")))  # cleaned as read (untrusted reader), and here
            if remote_out:
                text = rewrite_path(text, remote_out, str(out))  # paths in the summary, the JSON: ours
            print(text, file=sys.stdout if kind == "out" else sys.stderr, flush=True)
        elif kind == "file":
            files.add(evt.get("path"), base64.b64decode(evt.get("data", "")), bool(evt.get("append")))
        elif kind == "exit":
            files.commit()
            return int(evt.get("code", 1))
        elif kind == "error":
            raise InputError(f"--server-host {host}: {evt.get('message', evt)}")


# Around a path in a line of output: what may stand before it (the line's start, a space, a quote, `=`, `:`,
# an opening bracket) and after it (the line's end, a "/" and more of the path, a space, a quote, a closing
# bracket, punctuation, a full stop that ends a sentence): the path is whole, not part of a longer name.
_PATH_BEFORE = r"(?<![^\s\"'`=:,;(\[<{])"
_PATH_AFTER = r"(?=$|[/\s\"'`,;:)\]>}]|\.(?:$|\s))"


def rewrite_path(text: str, theirs: str, ours: str) -> str:
    """`text` with the path `theirs` (the server host's results directory) made `ours` where it stands whole,
    or begins a path below it; nothing rewritten when `theirs` is not a plain absolute directory ("/", a
    relative or a dotted path, a path with spaces or quotes): the server host chose it."""
    if (not theirs.startswith("/") or theirs == "/" or os.path.normpath(theirs) != theirs
            or re.search(r"[\s\"'`]", theirs)):
        return text
    return re.sub(_PATH_BEFORE + re.escape(theirs) + _PATH_AFTER, lambda _m: ours, text)


class SshLink:
    """`--loader-hosts`: the server here, its loaders on other hosts (runner.py opens it like a netns link)."""

    backend_prefix = None
    ns_loader = None
    loader_prefix = None

    def __init__(self, hosts: list[str], ssh_config: str = "", remote_netprof: str = "") -> None:
        self.hosts, self.ssh_config, self.remote_netprof = hosts, ssh_config, remote_netprof
        self.remotes: list[RemoteLoader] = []
        self.backend_host = ""
        self.loader_hosts: list[str] = []

    def __enter__(self) -> SshLink:
        return self

    def __exit__(self, *exc) -> None:
        """The sessions end with the run's process group (runner.py), which stops each ssh client: the
        agent then reads EOF and its loader exits."""

    def start_loader(self, group: ProcessGroup, cpus: str | None, threads: int) -> Loader | LoaderSet:
        """One loader per host (a LoaderSet when there are several); the server's address is the one the
        first host reaches this one by (hosts on other networks would need their own: not supported)."""
        for host in self.hosts:
            self.remotes.append(start_loader(group, host, self.ssh_config, self.remote_netprof, cpus, threads))
        first = self.remotes[0]
        self.backend_host = first.controller_addr
        self.loader_hosts = [first.own_addr]
        if len(self.remotes) == 1:
            return first.loader
        other = [r.host for r in self.remotes if r.controller_addr != self.backend_host]
        if other:
            raise InputError(f"--loader-hosts: {', '.join(other)} reach this host by another address than "
                             f"{self.hosts[0]} does ({self.backend_host}): the server listens on one")
        return LoaderSet([r.loader for r in self.remotes], [[r.own_addr] for r in self.remotes],
                         [r.host for r in self.remotes], [r.clock.error_s for r in self.remotes])

    def connect_timeout_s(self, connections: int = 1) -> float:
        return DEFAULT_CONNECT_TIMEOUT_S

    def describe(self) -> dict:
        return {"mode": "ssh", "server_host": "local", "server_addr": self.backend_host,
                "loaders": [{"host": r.host, "addr": r.own_addr, "agent_host": r.hello.get("host"),
                             "clock_offset_s": r.clock.offset_s, "clock_error_s": r.clock.error_s}
                            for r in self.remotes]}
