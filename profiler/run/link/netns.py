"""A "remote" link of our own: two network namespaces joined by one link, optionally with netem.

    with RemoteLink("delay=500us,jitter=50us") as link:
        backend argv = link.backend_prefix + [...] (listens on link.backend_host)
        loader argv  = link.loader_prefix + [...] (connects from link.loader_hosts, round-robin)

Layout (nothing is ever configured in the root namespace, and only RFC 2544 benchmarking
addresses are used — never a private or public range):

    netprof-<pid>-b  (backend)                        netprof-<pid>-l  (loader)
      lo up, 198.18.0.1/30 on npb<pid>  <──link──>  198.18.0.2/30 on npl<pid>, lo up

`RemoteLink(netem, sources=k)` gives the loader's end k addresses 198.18.0.2 … (1+k) (then /29, k ≤ 5):
one source address serves ~12k connections with a quick connect phase (see profiler/run/plan.py).

The link is a veth pair. With `netem`, both ends get `tc qdisc … root netem …` (so the delay is paid
once per direction: a ping-pong round trip costs at least 2 × delay). Kernels without the netem qdisc
(CONFIG_NET_SCH_NETEM unset — the case on this project's machines) get the same emulation in user
space instead: the link is then a pair of TUN devices, one in each namespace, and a small forwarder
process (this module's `forward` entry point, living in the loader's namespace) moves every IP packet
from one to the other after the delay (± uniform jitter, random loss, a rate's serialisation time),
as netem would. Like netem's `limit` (1000 packets), each direction holds at most QUEUE_LIMIT
packets in flight and drops what comes beyond, counting the drops (`forwarder_stats()`, recorded in
`describe()`). `describe()` says which one a run got. The forwarder is Python: measured here it
carries ~40–60k ping-pong messages/s (selector, 10–100 connections, delay=0us) where the veth carries
~125k, so with the user-space netem a backend faster than that measures the forwarder.

The loader abandons a connect attempt that has no answer after 100 ms, doubling that for each further
unanswered attempt up to LOADER_ATTEMPT_TIMEOUT_S (cpp_server/src/engine.cpp `kAttemptTimeoutNs`): a
link whose round trip is longer than that never connects. `Netem.check()` refuses such a delay;
`RemoteLink.connect_timeout_s()` is the whole connect phase's bound a link needs (it grows with the
round trip and the number of connections).

In the backend's namespace `net.core.somaxconn` and `net.ipv4.tcp_max_syn_backlog` are raised to
65535 so a 20k-connection connect burst is not throttled by the accept queue; these sysctls are per
namespace, so nothing of the machine's own configuration changes.

Teardown (also on exceptions and Ctrl-C) stops the forwarder, kills whatever still runs inside the two
namespaces (only our own children can be there) and deletes them; deleting a namespace deletes its
link end. A netprof killed with SIGKILL cannot tear down: the processes inside die with it
(PR_SET_PDEATHSIG, see profiler/core/procs.py), and `cleanup_leftovers()` removes every `netprof-<pid>-*`
namespace whose creating pid is gone — run by netprof's watchdog as soon as it died
(`procs.start_watchdog`), by each netns run first, and by `netprof doctor`.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import gzip
import heapq
import json
import math
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from netprof.profiler.core.errors import NetprofError
from netprof.profiler.core.procs import ManagedProcess, pid_alive, run, spawn

NS_PREFIX = "netprof-"
_NS_RE = re.compile(r"^netprof-(\d+)-[bl]$")
BACKEND_ADDR = "198.18.0.1"  # a /29 inside the RFC 2544 benchmarking range 198.18.0.0/15
MAX_LOADER_ADDRS = 5  # 198.18.0.2 … 198.18.0.6 in the /29
BACKLOG_SYSCTLS = {"net.core.somaxconn": "65535", "net.ipv4.tcp_max_syn_backlog": "65535"}
IP_TIMEOUT = 15.0
NETEM_SYNTAX = "delay=200us[,jitter=50us][,loss=0.1%][,rate=1gbit]"
# The loader's connect pacing (cpp_server/src/engine.cpp): an attempt without an answer after
# kAttemptTimeoutNs is abandoned and retried; at most kMaxConnecting attempts per worker in flight.
LOADER_ATTEMPT_TIMEOUT_S = 3.2  # the longest attempt (100 ms doubling per unanswered one)
LOADER_FIRST_ATTEMPT_S = 0.1
LOADER_MAX_CONNECTING = 128
ATTEMPT_MARGIN = 0.9  # a round trip must fit in this share of an attempt (forwarder and accept lag)
DEFAULT_CONNECT_TIMEOUT_S = 10.0  # the loader's default; enough on loopback and a bare veth
SYN_BYTES = 60  # a SYN with options, for the serialisation time at a netem rate
QUEUE_LIMIT = 1000  # packets per direction in the user-space forwarder (netem's default `limit`)


class LinkError(NetprofError):
    """The link could not be set up (one line naming the cause and the fix)."""


# ------------------------------------------------------------------------------------------------
# netem spec

_TIME_UNITS = {"us": 1.0, "usec": 1.0, "ms": 1e3, "msec": 1e3, "s": 1e6, "sec": 1e6}
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


@dataclass(frozen=True)
class Netem:
    """One direction's impairment (both ends get the same)."""

    delay_us: float = 0.0
    jitter_us: float = 0.0
    loss_pct: float = 0.0
    rate_bps: int = 0  # 0 = unlimited

    @classmethod
    def parse(cls, spec: str) -> Netem:
        """`delay=200us[,jitter=50us][,loss=0.1%][,rate=1gbit]` (keys in any order, each at most once);
        ValueError with one line naming the syntax otherwise."""

        def bad(why: str) -> ValueError:
            return ValueError(f"--netem '{spec}': {why}; use {NETEM_SYNTAX}")

        values: dict[str, float] = {}
        for part in spec.replace(" ", "").split(","):
            key, sep, val = part.partition("=")
            if not sep or not val:
                raise bad(f"'{part}' is not key=value")
            if key in values:
                raise bad(f"'{key}' given twice")
            if key in ("delay", "jitter"):
                m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|usec|ms|msec|s|sec)", val)
                if not m:
                    raise bad(f"{key} '{val}' needs a unit: us, ms or s")
                values[key] = float(m.group(1)) * _TIME_UNITS[m.group(2)]
            elif key == "loss":
                m = re.fullmatch(r"(\d+(?:\.\d+)?)%", val)
                if not m or float(m.group(1)) > 100:
                    raise bad(f"loss '{val}' must be a percentage 0%…100%")
                values[key] = float(m.group(1))
            elif key == "rate":
                m = re.fullmatch(r"(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)", val.lower())
                if not m or float(m.group(1)) <= 0:
                    raise bad(f"rate '{val}' must be a positive number with bit, kbit, mbit or gbit")
                values[key] = float(m.group(1)) * _RATE_UNITS[m.group(2)]
            else:
                raise bad(f"unknown key '{key}'")
        if "jitter" in values and not values.get("delay"):
            raise bad("jitter needs a delay")
        if values.get("jitter", 0) > values.get("delay", 0):
            raise bad("jitter cannot exceed the delay")
        return cls(values.get("delay", 0.0), values.get("jitter", 0.0), values.get("loss", 0.0),
                   int(values.get("rate", 0)))

    def spec(self) -> str:
        parts = [f"delay={self.delay_us:g}us"]
        if self.jitter_us:
            parts.append(f"jitter={self.jitter_us:g}us")
        if self.loss_pct:
            parts.append(f"loss={self.loss_pct:g}%")
        if self.rate_bps:
            parts.append(f"rate={self.rate_bps}bit")
        return ",".join(parts)

    def rtt_s(self) -> float:
        """The longest round trip of a handshake over the link: delay + jitter each way (both ends
        carry the netem), plus a SYN's serialisation at the rate."""
        serialise = SYN_BYTES * 8 / self.rate_bps if self.rate_bps else 0.0
        return 2 * ((self.delay_us + self.jitter_us) / 1e6 + serialise)

    def check(self, attempt_timeout_s: float = LOADER_ATTEMPT_TIMEOUT_S) -> Netem:
        """ValueError (one line naming the fix) when a handshake's round trip does not fit in one of the
        loader's connect attempts: every attempt would be abandoned and no connection would open."""
        rtt = self.rtt_s()
        if rtt > attempt_timeout_s * ATTEMPT_MARGIN:
            most = attempt_timeout_s * ATTEMPT_MARGIN / 2 * 1e3
            raise ValueError(
                f"--netem: a round trip of {rtt * 1e3:g} ms (delay + jitter, both ways) is longer than the loader's "
                f"{attempt_timeout_s * 1e3:g} ms connect attempt, so no connection would open; use "
                f"delay + jitter of at most {most:g} ms")
        return self

    def tc_args(self) -> list[str]:
        args = ["delay", f"{self.delay_us:g}us"]
        if self.jitter_us:
            args.append(f"{self.jitter_us:g}us")
        if self.loss_pct:
            args += ["loss", f"{self.loss_pct:g}%"]
        if self.rate_bps:
            args += ["rate", f"{self.rate_bps}bit"]
        return args


# ------------------------------------------------------------------------------------------------
# helpers


def _ip(*args: str, check: bool = True, timeout: float = IP_TIMEOUT) -> subprocess.CompletedProcess:
    res = run(args, timeout=timeout)
    if check and res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise LinkError(f"`{' '.join(args)}` failed: {msg[-1] if msg else f'exit {res.returncode}'}")
    return res


def list_namespaces() -> list[str]:
    """Names of every named network namespace (`ip netns list`)."""
    if not shutil.which("ip"):
        return []
    res = _ip("ip", "netns", "list", check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def _pids_in(ns: str) -> list[int]:
    res = _ip("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def _kill_and_delete(ns: str) -> None:
    """Kill every process inside `ns` (only our own children can be there) and delete it."""
    for _ in range(3):
        pids = _pids_in(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
    _ip("ip", "netns", "delete", ns, check=False)


def cleanup_leftovers() -> list[str]:
    """Delete every `netprof-<pid>-b|l` namespace whose creating process is gone (a netprof killed with
    SIGKILL), with any process still inside it. Returns the names removed."""
    removed = []
    for ns in list_namespaces():
        m = _NS_RE.match(ns)
        if not m or pid_alive(int(m.group(1))):
            continue
        _kill_and_delete(ns)
        removed.append(ns)
    return removed


_CLONE_NEWNET = 0x40000000
_libc = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def in_netns(name: str):
    """Run the body with the calling thread in network namespace `name` (sockets created inside stay
    in it for good); the thread's own namespace is restored afterwards, also on exceptions."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def socket_in_netns(name: str | None, family=socket.AF_INET, type_=socket.SOCK_STREAM) -> socket.socket:
    """A socket that lives in namespace `name` (None: ours)."""
    if not name:
        return socket.socket(family, type_)
    with in_netns(name):
        return socket.socket(family, type_)


def kernel_has_netem() -> bool | None:
    """Whether the running kernel has the netem qdisc (None: cannot tell)."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            for line in f:
                if line.startswith("CONFIG_NET_SCH_NETEM="):
                    return True
        return os.path.isdir("/sys/module/sch_netem") or None
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------
# the link


class RemoteLink:
    """Context manager: two namespaces of our own, a link between them, netem on both ends."""

    cleanup_leftovers = staticmethod(cleanup_leftovers)

    def __init__(self, netem: str | None = None, sources: int = 1) -> None:
        self.netem = Netem.parse(netem) if netem else None  # ValueError before anything is created
        if not 1 <= sources <= MAX_LOADER_ADDRS:
            raise ValueError(f"sources={sources}: the loader's end has 1 … {MAX_LOADER_ADDRS} addresses")
        self.prefixlen = 30 if sources == 1 else 29
        pid = os.getpid()
        self.ns_backend = f"{NS_PREFIX}{pid}-b"
        self.ns_loader = f"{NS_PREFIX}{pid}-l"
        self.dev_backend = f"npb{pid}"[:15]
        self.dev_loader = f"npl{pid}"[:15]
        self.backend_host = BACKEND_ADDR
        self.loader_hosts = [f"198.18.0.{2 + i}" for i in range(sources)]
        self.loader_host = self.loader_hosts[0]
        self.backend_prefix = ["ip", "netns", "exec", self.ns_backend]
        self.loader_prefix = ["ip", "netns", "exec", self.ns_loader]
        self.kind = "veth"
        self.netem_impl: str | None = None
        self.sysctls: dict[str, str] = {}
        self.setup_s: float | None = None
        self._forwarder: ManagedProcess | None = None
        self._control: socket.socket | None = None  # our end of the forwarder's stats channel
        self._final_stats: dict | None = None  # the forwarder's counters when it was stopped
        self._created: list[str] = []

    # -- lifecycle

    def __enter__(self) -> RemoteLink:
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _setup(self) -> None:
        t0 = time.monotonic()
        if os.geteuid() != 0:
            raise LinkError("--remote netns needs root (network namespaces); run as root")
        for tool in ("ip", "tc") if self.netem else ("ip",):
            if not shutil.which(tool):
                raise LinkError(f"`{tool}` not found: install iproute2 (make setup)")
        existing = set(list_namespaces())
        for ns in (self.ns_backend, self.ns_loader):
            if ns in existing:
                raise LinkError(f"namespace {ns} already exists (one RemoteLink per process at a time)")
        for ns in (self.ns_backend, self.ns_loader):
            _ip("ip", "netns", "add", ns)
            self._created.append(ns)
            _ip("ip", "-n", ns, "link", "set", "lo", "up")
        for key, value in BACKLOG_SYSCTLS.items():
            res = _ip("ip", "netns", "exec", self.ns_backend, "sysctl", "-q", "-w", f"{key}={value}", check=False)
            if res.returncode == 0:
                self.sysctls[key] = value
        use_userspace = self.netem is not None and kernel_has_netem() is False
        if not use_userspace:
            self._make_veth()
            if self.netem is not None:
                try:
                    for ns, dev in ((self.ns_backend, self.dev_backend), (self.ns_loader, self.dev_loader)):
                        _ip("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem", *self.netem.tc_args())
                    self.netem_impl = "kernel (tc netem)"
                except LinkError as e:
                    if "unknown" not in str(e).lower():
                        raise
                    _ip("ip", "-n", self.ns_backend, "link", "del", self.dev_backend, check=False)
                    use_userspace = True
        if use_userspace:
            self._make_tun_pair()
        self._wait_reachable()
        self.setup_s = time.monotonic() - t0

    def _make_veth(self) -> None:
        b, l_ = self.dev_backend, self.dev_loader
        _ip("ip", "link", "add", "name", b, "netns", self.ns_backend, "type", "veth",
            "peer", "name", l_, "netns", self.ns_loader)
        self._address(self.ns_backend, b, [BACKEND_ADDR], self.prefixlen)
        self._address(self.ns_loader, l_, self.loader_hosts, self.prefixlen)
        self.kind = "veth"

    def _address(self, ns: str, dev: str, addrs: list[str], prefixlen: int, route: bool = False) -> None:
        """Addresses on `dev` in `ns`, the device up; `route`: /32 addresses and a route to the /prefix
        through the device (a TUN device is point-to-point: no neighbour discovery)."""
        for addr in addrs:
            _ip("ip", "-n", ns, "addr", "add", f"{addr}/{32 if route else prefixlen}", "dev", dev)
        _ip("ip", "-n", ns, "link", "set", dev, "up")
        if route:
            _ip("ip", "-n", ns, "route", "add", f"{BACKEND_ADDR[:-1]}0/{prefixlen}", "dev", dev)

    def _make_tun_pair(self) -> None:
        assert self.netem is not None  # the user-space forwarder stands in for netem

        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [*self.loader_prefix, sys.executable, "-m", "netprof.profiler.run.link.netns", "forward",
                "--ns-backend", self.ns_backend, "--dev-backend", self.dev_backend,
                "--dev-loader", self.dev_loader, "--netem", self.netem.spec(),
                "--control-fd", str(theirs.fileno())]
        try:
            self._forwarder = spawn("netem-forwarder", argv, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        try:
            self._forwarder.wait_line("ready", 10.0)
        except Exception as e:
            raise LinkError(f"the user-space netem forwarder did not start: {e}") from None
        self._address(self.ns_backend, self.dev_backend, [BACKEND_ADDR], self.prefixlen, route=True)
        self._address(self.ns_loader, self.dev_loader, self.loader_hosts, self.prefixlen, route=True)
        self.kind = "tun"
        self.netem_impl = ("user space (TUN forwarder, ceiling ~40-60k msgs/s; this kernel has no "
                           "netem qdisc: CONFIG_NET_SCH_NETEM unset)")

    def _wait_reachable(self, timeout: float = 5.0) -> None:
        """A TCP connect from the loader's side to a listener on the backend's side (bounded)."""
        deadline = time.monotonic() + timeout
        with socket_in_netns(self.ns_backend) as ls:
            ls.bind((BACKEND_ADDR, 0))
            ls.listen(1)
            port = ls.getsockname()[1]
            last = None
            while time.monotonic() < deadline:
                with socket_in_netns(self.ns_loader) as c:
                    c.settimeout(1.0)
                    try:
                        c.connect((BACKEND_ADDR, port))
                        return
                    except OSError as e:
                        last = e
                time.sleep(0.05)
        raise LinkError(f"the link {self.loader_host} → {BACKEND_ADDR} does not carry TCP ({last})")

    def forwarder_stats(self, timeout: float = 2.0) -> dict | None:
        """The user-space forwarder's counters per direction (`forwarded`, `dropped_queue` beyond
        QUEUE_LIMIT, `dropped_loss` by the loss rate) since the link was set up; None without one."""
        if self._control is None:
            return self._final_stats
        try:
            self._control.settimeout(timeout)
            self._control.sendall(b"stats\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = self._control.recv(4096)
                if not chunk:
                    return self._final_stats
                reply += chunk
            return json.loads(reply)
        except (OSError, ValueError):
            return self._final_stats

    def close(self) -> None:
        if self._forwarder is not None:
            self._final_stats = self.forwarder_stats()
            assert self._control is not None  # opened before the forwarder was started
            self._control.close()
            self._control = None
            self._forwarder.discard()
            self._forwarder = None
        for ns in reversed(self._created):
            _kill_and_delete(ns)
        self._created.clear()

    # -- what runs and reports use

    def describe(self) -> dict:
        return {
            "mode": "netns",
            "namespaces": {"backend": self.ns_backend, "loader": self.ns_loader},
            "addresses": {"backend": f"{BACKEND_ADDR}/{self.prefixlen}",
                          "loader": [f"{a}/{self.prefixlen}" for a in self.loader_hosts]},
            "link": self.kind,
            "devices": {"backend": self.dev_backend, "loader": self.dev_loader},
            "netem": ({**asdict(self.netem), "spec": self.netem.spec(), "both_ends": True,
                       "impl": self.netem_impl} if self.netem else None),
            "sysctls_backend_ns": dict(self.sysctls),
            "setup_s": self.setup_s,
            "forwarder": ({"queue_limit": QUEUE_LIMIT, "counters": self.forwarder_stats()}
                          if self.kind == "tun" else None),
        }

    def connect_timeout_s(self, connections: int = 1) -> float:
        """The bound for the loader's whole connect phase over this link: the default on a bare link;
        with netem, 20 round trips plus two per wave of LOADER_MAX_CONNECTING attempts, each wave
        repeated as often as the loss rate makes a SYN or SYN-ACK go missing."""
        if self.netem is None:
            return DEFAULT_CONNECT_TIMEOUT_S
        rtt = max(self.netem.rtt_s(), 1e-3)
        waves = math.ceil(max(connections, 1) / LOADER_MAX_CONNECTING)
        delivered = (1 - min(self.netem.loss_pct, 90.0) / 100) ** 2
        return max(DEFAULT_CONNECT_TIMEOUT_S, 20 * rtt + 2 * waves * max(rtt, LOADER_FIRST_ATTEMPT_S) / delivered)


# ------------------------------------------------------------------------------------------------
# user-space netem: the TUN forwarder

_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_PR_SET_TIMERSLACK = 29


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH22x", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


def forward(fd_a: int, fd_b: int, netem: Netem, stop: list[bool] | None = None, *, limit: int = QUEUE_LIMIT,
            names: tuple[str, str] = ("a_to_b", "b_to_a"), control: socket.socket | None = None) -> dict:
    """Move IP packets a→b and b→a, each after netem's delay (± uniform jitter), loss and rate.

    Packets wait in a time-ordered heap per direction (like netem's tfifo: jitter may reorder); a
    direction holding `limit` packets drops the next ones, as netem's `limit` does. select() sleeps
    with µs resolution; the timer slack is set to 1 µs so wake-ups are punctual. `control`: a stream
    socket on which each line `stats` is answered with the counters as one JSON line; its EOF (the
    parent is gone) ends the loop. Returns the counters per direction (`names`: a→b, b→a)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except Exception:
        pass
    rng = random.Random()
    delay, jitter = netem.delay_us / 1e6, netem.jitter_us / 1e6
    loss = netem.loss_pct / 100.0
    rate = float(netem.rate_bps)
    out_of = {fd_a: fd_b, fd_b: fd_a}
    heaps: dict[int, list] = {fd_a: [], fd_b: []}  # keyed by the fd to write to
    link_free = {fd_a: 0.0, fd_b: 0.0}  # rate: when the "wire" towards that fd is free again
    counters = {fd_b: dict.fromkeys(("forwarded", "dropped_queue", "dropped_loss"), 0),
                fd_a: dict.fromkeys(("forwarded", "dropped_queue", "dropped_loss"), 0)}
    stats = {names[0]: counters[fd_b], names[1]: counters[fd_a]}
    readers = [fd_a, fd_b] + ([control] if control is not None else [])
    pending = b""
    seq = 0
    clock = time.monotonic
    while not (stop and stop[0]):
        now = clock()
        due = min((h[0][0] for h in heaps.values() if h), default=None)
        timeout = None if due is None else max(0.0, due - now)
        try:
            readable, _, _ = select.select(readers, [], [], timeout)
        except InterruptedError:
            continue
        now = clock()
        for fd in readable:
            if fd is control:
                chunk = control.recv(4096)
                if not chunk:
                    return stats
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip() == b"stats":
                        control.sendall(json.dumps(stats).encode() + b"\n")
                continue
            assert isinstance(fd, int)  # the other readers are the two TUN fds
            dst = out_of[fd]
            count = counters[dst]
            for _ in range(256):  # bounded batch per wake-up
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not pkt:
                    break
                if loss and rng.random() < loss:
                    count["dropped_loss"] += 1
                    continue
                if len(heaps[dst]) >= limit:
                    count["dropped_queue"] += 1
                    continue
                when = now + (delay + (rng.uniform(-jitter, jitter) if jitter else 0.0))
                if rate:
                    start = max(now, link_free[dst])
                    link_free[dst] = start + len(pkt) * 8 / rate
                    when = max(when, link_free[dst] + delay)
                seq += 1
                heapq.heappush(heaps[dst], (when, seq, pkt))
        now = clock()
        for dst, heap in heaps.items():
            while heap and heap[0][0] <= now:
                _, _, pkt = heapq.heappop(heap)
                try:
                    os.write(dst, pkt)
                    counters[dst]["forwarded"] += 1
                except OSError:
                    pass  # a full/down device drops the packet, as a wire would
    return stats


def _forward_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m netprof.profiler.run.link.netns forward")
    p.add_argument("--ns-backend", required=True)
    p.add_argument("--dev-backend", required=True)
    p.add_argument("--dev-loader", required=True)
    p.add_argument("--netem", required=True)
    p.add_argument("--control-fd", type=int, help="a stream socket from the parent: stats on request, EOF = stop")
    args = p.parse_args(argv)
    netem = Netem.parse(args.netem)
    control = socket.socket(fileno=args.control_fd) if args.control_fd is not None else None
    with in_netns(args.ns_backend):  # the backend's end is created inside the backend's namespace
        fd_b = _open_tun(args.dev_backend)
    fd_l = _open_tun(args.dev_loader)  # we run in the loader's namespace (`ip netns exec`)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    print("ready", flush=True)
    forward(fd_l, fd_b, netem, names=("loader_to_backend", "backend_to_loader"), control=control)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["forward"]:
        sys.exit(_forward_main(sys.argv[2:]))
    if sys.argv[1:2] == ["cleanup"]:
        print("\n".join(cleanup_leftovers()))
        sys.exit(0)
    print("usage: python -m netprof.profiler.run.link.netns forward … | cleanup", file=sys.stderr)
    sys.exit(2)
