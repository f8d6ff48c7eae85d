"""What a run will do: the validated configuration and the list of cells it expands to.

All input checks live here, so that bad input is rejected — with one line naming the fix — before
any process is started.
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import math
import os
import re
import resource
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from netprof.backends import registry
from netprof.probes import registry as instruments
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import schema

# Each side (backend and loader) holds one fd per connection plus a few of its own.
FD_RESERVE = 100
LIMITS = {
    "duration": (0.2, 3600.0),
    "warmup": (0.0, 600.0),
    "rounds": (1, 100),
    "msize": (1, 1 << 20),
    "pipeline": (1, 1024),
    "probe_share": (0.0, 1.0),
    "workers": (1, 64),
    "loader_threads": (1, 64),
}
# The local port range (32768–60999) gives ~28k ports per source address: a hard ceiling. But connect()
# picks its port from one half of the range first (Linux ≥ 6.2 prefers odd ports for connect, even for
# bind) and then searches: measured on this machine, one source: 10k connections set up in 0.2 s,
# 15k in 1.7 s, 19.5k in 10 s (past the loader's connect_timeout → FF); two sources: 19.5k in 0.45 s.
# So `--sources auto` (the CLI default) uses one 127.0.0.x address per 12,000 connections.
CONNECTIONS_PER_SOURCE = 28_000
AUTO_CONNECTIONS_PER_SOURCE = 12_000
REMOTE_MODES = ("", "netns")
# --zmq-client → the loader's RunRequest transport for a ZeroMQ server (RunConfig.loader_transport): libzmq's
# DEALER sockets (the reference harness's client, so the default; closed loop only), or the loader's own
# ZMTP 3.0 DEALER on its epoll loop (the thread that times an answer reads it: no libzmq I/O-thread queue).
ZMQ_CLIENTS = {"libzmq": "zmq", "native": "zmtp"}
# --warmup-after (PROTOCOL.md, "Warm-up after"): the loader's warm-up begins once every connection is up
# (connected: the default, as the reference harness loads once it has connected) or once every connection has had
# one request answered (served: the server has accepted them all; a loop that accepts one connection per turn, as
# libuv's, otherwise opens a 1000-connection window with hundreds still in its listen queue).
WARMUP_AFTER = ("connected", "served")


@dataclass(frozen=True)
class Cell:
    """One cell of the plan and one round of it (its dimensions: profiler/model/schema.py)."""

    backend: str
    connections: int
    pipeline: int
    round: int  # 1-based; 0 = an evidence round (stacks, flamegraphs)
    python: str = ""  # --python spec the backend runs under; "" = netprof's own interpreter
    framing: str = "message"
    pinned: bool = True  # the backend pinned to --backend-cpu (False: unpinned, or a --pin both cell)
    # Dimensions declared only in schema.py (recorded in rows, labels and slugs, in the run's order): ((name,
    # value), ...), from RunConfig.extra_dims. No process needs them but `rate`, which the loader's request
    # carries (the typed field below), and `io_uring`, which the server's start does.
    extra: tuple[tuple[str, Any], ...] = ()
    # --rate: the open-loop target of this cell, requests/s; 0 = closed loop. Read from `extra` once, here (as
    # parse_rates gave it: a whole number stays an int, so the loader's request and the row are what they were).
    rate: float = field(init=False, default=0)

    def __post_init__(self) -> None:
        rate = dict(self.extra).get("rate", 0)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate < 0:
            raise TypeError(f"Cell rate must be a number of requests/s ≥ 0, not {rate!r}")
        object.__setattr__(self, "rate", rate)

    @property
    def io_uring(self) -> str:
        """--io-uring: "off" starts the server with io_uring_setup denied (procs.spawn's deny_io_uring)."""
        return dict(self.extra).get("io_uring", "on")

    def label(self) -> str:
        row = {"backend": self.backend, "interpreter": self.python, "framing": self.framing,
               "connections": self.connections, "pipeline": self.pipeline, "pinned": self.pinned,
               "round": self.round, **dict(self.extra)}
        return schema.cell_label(row, with_round=True)


@dataclass
class RunConfig:
    backends: list[str]
    connections: list[int] = field(default_factory=lambda: [10, 100, 1000])
    pipeline: list[int] = field(default_factory=lambda: [1])
    duration: float = 5.0
    warmup: float = 1.0
    rounds: int = 3
    msize: int = 64
    work: str = "none"
    think: str = "none"
    # --arrivals: how an open-loop load (--rate, a run dimension in extra_dims) spaces its requests:
    # constant or poisson; "" = not given (validate() makes it "constant" with --rate).
    arrivals: str = ""
    # --max-connections: with --rate, the most connections the loader may have open at once; it opens them as
    # requests need them (a request due while every connection has --pipeline in flight goes on a new one).
    # 0 = not given: MAX_CONNECTIONS_DEFAULT, or a cell's -c when that is more (max_connections_for).
    max_connections: int = 0
    zmq_client: str = "libzmq"  # --zmq-client: what drives the ZeroMQ servers (ZMQ_CLIENTS)
    warmup_after: str = "connected"  # --warmup-after: when the loader's warm-up begins (WARMUP_AFTER)
    probes: bool = True
    stacks: bool = False
    flamegraph: bool = False
    pin: bool = True  # pinning at all: the loader on its CPUs, the backend on --backend-cpu
    pin_both: bool = False  # --pin both: every cell also unpinned (backend free; the loader stays pinned)
    backend_cpu: str = "0"
    loader_cpus: str = ""  # empty: every CPU but the backend's
    loader_threads: int = 1
    workers: int = 2  # --workers: processes/threads of the multi-worker backends (prefork, prethread, ...)
    out_dir: str = ""
    evidence_only: bool = False  # `netprof flamegraph`: sampling rounds only, no throughput rounds
    remote: str = ""  # "" (loopback) or "netns" (two namespaces of our own, see profiler/run/link/netns.py)
    netem: str = ""  # netem spec for --remote netns, e.g. "delay=500us,jitter=50us"
    sources: list[str] = field(default_factory=lambda: ["127.0.0.1"])  # loader source addresses
    loader_hosts: list[str] = field(default_factory=list)  # --loader-hosts: the loader over ssh (sshlink.py)
    server_host: str = ""  # --server-host: the whole run by the netprof on that host (sshlink.py)
    ssh_config: str = ""  # --ssh-config FILE for those ssh sessions ("": the user's own)
    remote_netprof: str = ""  # --remote-netprof PATH on the loader hosts ("": this interpreter's path)
    pythons: list[str] = field(default_factory=lambda: [""])  # --python specs; "" = netprof's own
    # Values of the dimensions only schema.py declares, by name (see Cell.extra); checked against it.
    extra_dims: dict[str, list] = field(default_factory=dict)
    # message: each receive asks for the rest of one message (the reference harness's way);
    # stream: read up to 64 KiB and echo what came. A run dimension (comma list on the CLI).
    framings: list[str] = field(default_factory=lambda: ["message"])
    # The user's own servers (--cmd, --attach): their names are in `backends` too.
    own: list = field(default_factory=list)  # [servers.ServerSpec]
    env: list[str] = field(default_factory=list)  # --env NAME=VALUE for the --cmd servers (in their specs too)
    # echo | http | line: what one message is (one request/response exchange); validate() sets it
    # from the built-in backends' registry entries (builtin_protocol)
    protocol: str = "echo"
    request: str = "GET /"  # http: METHOD /path
    headers: list[str] = field(default_factory=list)  # http: extra "Name: value" headers
    body: str | None = None  # http: request body (--body, or --body-file's content)
    keep_secrets: bool = False  # --keep-secrets: meta.json and the reports keep header values and the body
    line: str = "PING"  # line: the request line
    force: bool = False  # --force: replace the run already in out_dir
    wait: bool = False  # --wait: queue behind another netprof run instead of refusing
    # Share of each cell's window, in its middle, with the counting probes attached; the rest is
    # unprobed and gives the headline figures (1 = probes throughout, 0 = no probes).
    probe_share: float = 0.3
    syscall_time: bool = False  # --syscall-time: also time syscalls (the sys_exit program)
    # --sockwait: the socket-wait set (probes/sockwait/) attached for the whole of each cell, so it
    # sees every connection from its first byte; its cost is in the headline figures too.
    sockwait: bool = False
    # --instrument NAME: further instruments of probes/registry.py (those with an option of their own,
    # the counting set and --sockwait, are asked for by it).
    instruments: tuple[str, ...] = ()

    def cells(self) -> Iterator[Cell]:
        """Rounds outermost, so a noisy period of the machine spreads over all backends alike."""
        for rnd in range(1, 0 if self.evidence_only else self.rounds + 1):
            yield from self.combinations(rnd)

    def combinations(self, rnd: int) -> Iterator[Cell]:
        """Every combination of the run dimensions, for round `rnd` (0: an evidence round). The
        user's own servers have their own interpreter and framing: one cell per scale; the HTTP
        backends have their own framing (their HTTP parser): one cell per scale and interpreter."""
        own = {s.name for s in self.own}
        own_framing = {b for b in self.backends if self.server(b).frames_own}
        pins = [True, False] if self.pin_both else [self.pin]
        names = list(self.extra_dims)
        for extra in itertools.product(*self.extra_dims.values()):
            tagged = tuple(zip(names, extra))
            for conns in self.connections:
                for pipe in self.pipeline:
                    for framing, pinned in itertools.product(self.framings, pins):
                        for python in self.pythons:
                            for backend in self.backends:
                                if backend not in own_framing:
                                    yield Cell(backend, conns, pipe, rnd, python, framing, pinned, tagged)
                                elif backend not in own and framing == self.framings[0]:
                                    yield Cell(backend, conns, pipe, rnd, python, "own", pinned, tagged)
                                elif framing == self.framings[0] and python == self.pythons[0]:
                                    yield Cell(backend, conns, pipe, rnd, "", "own", pinned, tagged)

    def server(self, name: str):
        """The ServerSpec of a cell's server: the user's own, or a built-in backend."""
        from netprof.profiler.run import servers

        return next((s for s in self.own if s.name == name), None) or servers.builtin(name)

    def zmq_servers(self) -> list[str]:
        """The run's ZeroMQ servers (ServerSpec.transport "zmq"): those --zmq-client concerns."""
        return [b for b in self.backends if self.server(b).transport == "zmq"]

    def loader_transport(self, name: str) -> str:
        """The RunRequest transport that drives server `name`: its own ("tcp") for a TCP server, the
        --zmq-client's (ZMQ_CLIENTS) for a ZeroMQ one."""
        kind = self.server(name).transport
        return ZMQ_CLIENTS[self.zmq_client] if kind == "zmq" else kind

    @property
    def open_loop(self) -> bool:
        return bool(self.extra_dims.get("rate"))

    def arrivals_setting(self) -> str:
        """What rows record as `arrivals` (schema.RUN_SETTINGS): the open-loop spacing, or "closed"."""
        return (self.arrivals or ARRIVALS[0]) if self.open_loop else schema.RUN_SETTINGS["arrivals"]

    def max_connections_for(self, connections: int) -> int:
        """The connection cap of an open-loop cell with `connections` (-c) opened before its load: --max-connections,
        else MAX_CONNECTIONS_DEFAULT (at most what `ulimit -n` allows), never below -c. 0 for a closed-loop run
        (its connections are the -c ones): what rows record as `max_connections` (schema.RUN_SETTINGS)."""
        if not self.open_loop:
            return schema.RUN_SETTINGS["max_connections"]
        return connection_cap(connections, self.max_connections)

    def warmup_after_field(self) -> str | None:
        """RunRequest.warmup_after: None for the default (the field is absent: the request is what it always was)."""
        return None if self.warmup_after == schema.RUN_SETTINGS["warmup_after"] else self.warmup_after

    def protocol_fields(self) -> dict:
        """What the loader needs to speak this run's protocol (RunRequest fields)."""
        if self.protocol == "http":
            return {"protocol": "http", "request": self.request, "headers": list(self.headers), "body": self.body}
        if self.protocol == "line":
            return {"protocol": "line", "line": self.line}
        return {}

    def n_cells(self) -> int:
        rounds = 0 if self.evidence_only else self.rounds
        return len(list(self.combinations(0))) * rounds

    def n_sampling(self) -> int:
        """The sampling rounds after the throughput rounds: one per combination for --stacks and one for
        --flamegraph (`netprof flamegraph`: those only)."""
        return len(list(self.combinations(0))) * (int(self.stacks) + int(self.flamegraph))

    def estimate_s(self) -> float:
        """Seconds the rounds take at least (warm-up + window per cell, plus ~1 s of start-up)."""
        return (self.n_cells() + self.n_sampling()) * (self.warmup + self.duration + 1.0)

    def to_dict(self) -> dict:
        return asdict(self)


def parse_pythons(text: str) -> list[str]:
    """`--python 3.11,3.13` or paths → specs; empty → [""] (netprof's own interpreter)."""
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if len(set(specs)) != len(specs):
        raise InputError("--python: an interpreter is listed twice")
    return specs or [""]


FRAMINGS = ("message", "stream")


def parse_pin(mode: str, no_pin: bool) -> tuple[bool, bool]:
    """`--pin yes|no|both` (and `--no-pin`, = `--pin no`) → (pin, pin_both)."""
    if mode not in ("yes", "no", "both"):
        raise InputError(f"--pin '{mode}' is not understood: use yes, no or both")
    if no_pin and mode != "yes":
        raise InputError("--no-pin and --pin say the same thing twice: give one of them")
    return (not no_pin and mode != "no"), mode == "both"


def _choices(text: str, option: str, allowed: tuple[str, ...], fix: str) -> list[str]:
    """A comma list of some of `allowed`, each once; else one line: what `option` takes (`fix`)."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or any(v not in allowed for v in values):
        raise InputError(f"{option} '{text}' is not understood: {fix}")
    if len(set(values)) != len(values):
        raise InputError(f"{option}: a value is listed twice")
    return values


def parse_framings(text: str) -> list[str]:
    """`--framing message,stream` → ["message", "stream"]."""
    return _choices(text, "--framing", FRAMINGS, "use message (one message per receive, the default), stream "
                    "(64 KiB per receive), or both: message,stream")


TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,31}")  # it lands in file names (schema.cell_slug)


def parse_tags(text: str) -> dict[str, list[str]]:
    """`--tag a,b` → RunConfig.extra_dims {"tag": ["a", "b"]}; "" → {} (no tag dimension)."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        return {}
    bad = [v for v in values if not TAG.fullmatch(v)]
    if bad:
        raise InputError(f"--tag '{bad[0]}': a tag is 1-32 letters, digits and _.+- (it names files), e.g. "
                         "--tag before,after")
    if len(set(values)) != len(values):
        raise InputError("--tag: a tag is listed twice")
    return {"tag": values}


IO_URING = ("on", "off")


def parse_io_uring(text: str) -> dict[str, list[str]]:
    """`--io-uring on,off` → RunConfig.extra_dims {"io_uring": ["on", "off"]}; every run has the dimension (its
    default "on" names nothing in labels and file names), so every row records it."""
    fix = ("use on, off or on,off (off starts the server with io_uring_setup failing with ENOSYS, as in a container "
           "whose seccomp profile forbids it)")
    return {"io_uring": _choices(text, "--io-uring", IO_URING, fix)}


RATE_MAX = 1e7  # requests/s over all connections: the loader's bound (PROTOCOL.md, "Run request")
# --max-connections when not given: as many as k6's and vegeta's open-loop users would want for a rate whose
# answers take a few ms (25k/s × 40 ms), well under the machine's `ulimit -n` (20,000 here).
MAX_CONNECTIONS_DEFAULT = 1000


def connection_cap(connections: int, given: int = 0) -> int:
    """The most connections an open-loop load with `connections` (-c) may have open: --max-connections (`given`,
    0: not given: MAX_CONNECTIONS_DEFAULT, at most what `ulimit -n` allows), never below -c."""
    return max(connections, given or min(MAX_CONNECTIONS_DEFAULT, max_connections()))
ARRIVALS = ("constant", "poisson")
_RATE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([km]?)", re.IGNORECASE)


def parse_rates(text: str) -> dict[str, list[float]]:
    """`--rate 500,2k,1.5m` → RunConfig.extra_dims {"rate": [500, 2000, 1500000]} (whole numbers as
    int); "" → {} (closed loop, no rate dimension)."""
    items = [v.strip() for v in text.split(",")]
    if not text.strip():
        return {}
    values: list[float] = []
    for item in items:
        m = _RATE.fullmatch(item)
        if not m:
            raise InputError(f"--rate '{item}' is not a rate: give requests/s as a comma list, e.g. --rate 500,2k,1.5m "
                             "(k = thousand, m = million)")
        v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()]
        values.append(int(v) if v.is_integer() else v)
    check_rates(values)
    return {"rate": values}


def check_rates(values: list) -> None:
    for v in values:
        if not 0 < v <= RATE_MAX:
            raise InputError(f"--rate {v:g} is out of range: use more than 0 and at most 10m (10,000,000) requests/s")
    if len(set(values)) != len(values):
        raise InputError("--rate: a rate is listed twice")


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise InputError(f"{what} must be a comma list of whole numbers, e.g. 10,100,1000 (got '{text}')") from None
    if not values:
        raise InputError(f"{what} is empty: give a comma list such as 10,100")
    return values


def fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def max_connections() -> int:
    return fd_limit() - FD_RESERVE


def parse_sources(text: str) -> list[str]:
    """`--sources 127.0.0.1,127.0.0.2` or `auto` (resolved by validate()); only loopback addresses."""
    text = text.replace(" ", "")
    if text == "auto":
        return ["auto"]
    values = [v for v in text.split(",") if v]
    if not values:
        raise InputError("--sources is empty: give 127.0.0.1,127.0.0.2 or auto")
    for v in values:
        try:
            addr = ipaddress.IPv4Address(v)
        except ValueError:
            raise InputError(f"--sources: '{v}' is not an IPv4 address; use e.g. 127.0.0.1,127.0.0.2 or auto") from None
        if not addr.is_loopback:
            raise InputError(f"--sources: {v} is not a loopback address (127.0.0.0/8); only loopback may carry load")
    if len(set(values)) != len(values):
        raise InputError("--sources: an address is listed twice")
    return values


def n_auto_sources(connections: int) -> int:
    return max(1, math.ceil(connections / AUTO_CONNECTIONS_PER_SOURCE))


def auto_sources(connections: int) -> list[str]:
    """As many 127.0.0.x addresses as keep each under AUTO_CONNECTIONS_PER_SOURCE connections."""
    n = n_auto_sources(connections)
    return [f"127.0.0.{i}" for i in range(1, n + 1)]


def _check_range(name: str, value) -> None:
    lo, hi = LIMITS[name]
    if not lo <= value <= hi:
        raise InputError(f"--{name} {value} is out of range: use {lo} … {hi}")


PROTOCOLS = ("echo", "http", "line")


def builtin_protocol(cfg: RunConfig, builtin: list[str]) -> None:
    """A built-in backend speaks the protocol its registry entry declares (BackendInfo.protocol), and
    the run speaks it: `netprof run http_asyncio aiohttp` is an HTTP run of registry.HTTP_REQUEST
    without --protocol. One protocol per run, so echo and HTTP backends are run separately."""
    spoken = {registry.get(b).protocol for b in builtin}
    if len(spoken) > 1:
        http = [b for b in builtin if registry.get(b).protocol != "echo"]
        raise InputError(f"echo and HTTP backends cannot share a run (the HTTP ones: {', '.join(http)}): "
                         "run them in separate runs")
    if not spoken or spoken == {"echo"}:
        if cfg.protocol != "echo" and builtin:
            raise InputError(f"--protocol {cfg.protocol} needs your own server (--cmd or --attach): the built-in "
                             f"backends ({', '.join(builtin)}) are echo servers")
        return
    (proto,) = spoken
    if cfg.protocol not in ("echo", proto):  # "echo" is the default: --protocol not given
        raise InputError(f"--protocol {cfg.protocol}: the built-in backends ({', '.join(builtin)}) speak {proto}; "
                         "drop --protocol")
    cfg.protocol = proto
    if cfg.request == RunConfig.request:  # the default (`--request 'GET /'` given reads the same)
        cfg.request = registry.HTTP_REQUEST
    elif cfg.request != registry.HTTP_REQUEST:
        raise InputError(f"--request '{cfg.request}': the built-in HTTP backends answer '{registry.HTTP_REQUEST}' "
                         "only; drop --request")
    if cfg.framings != list(FRAMINGS[:1]):
        raise InputError("--framing is for the echo backends; the HTTP backends read with their own HTTP parser: "
                         "drop --framing")


HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+: [^\r\n]*")  # one request header: 'Name: value'


def parse_header_file(text: str, path: str) -> list[str]:
    """--header-file: one 'Name: value' per line; blank lines and # comments skipped. A bad line is
    named by its number only: the file may hold secrets."""
    headers = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not HEADER.fullmatch(line):
            raise InputError(f"--header-file {path}: line {n} is not 'Name: value' (blank lines and # comments "
                             "are skipped)")
        headers.append(line)
    return headers


def parse_env_file(text: str, path: str) -> list[str]:
    """--env-file: one NAME=VALUE per line (as --env); blank lines and # comments skipped. A bad line is named by
    its number only: the file may hold secrets."""
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise InputError(f"--env-file {path}: line {n} is not NAME=VALUE (blank lines and # comments are skipped)")
        items.append(line)
    return items


def check_loader_hosts(cfg: RunConfig) -> None:
    """--loader-hosts: what goes with it (sshlink.py runs the sessions)."""
    if cfg.remote:
        raise InputError("--loader-hosts and --remote netns both put the loader elsewhere: use one of them")
    for spec in cfg.own:  # the server must listen where the loader hosts reach this one
        if spec.kind != "cmd" or "{host}" not in spec.template or "{port}" not in spec.template:
            raise InputError(f"--loader-hosts: your server '{spec.name}' must listen where the loader hosts reach "
                             "this host: give --cmd with {host} and {port} where the address and port go, e.g. "
                             "'python -m uvicorn app:app --host {host} --port {port}' (--attach is not for them)")
    if min(cfg.connections) < len(cfg.loader_hosts):
        raise InputError(f"--connections {min(cfg.connections)} is fewer than the {len(cfg.loader_hosts)} loader "
                         f"hosts that share them: give each at least one")
    if cfg.sources not in (["127.0.0.1"], ["auto"]):
        raise InputError("--sources is for loopback runs; a loader host connects from its own address")
    if not shutil.which("ssh"):
        raise InputError("--loader-hosts needs OpenSSH's `ssh`: run `make setup` (Debian openssh-client)")
    check_ssh_config(cfg)


def check_ssh_config(cfg: RunConfig) -> None:
    """--ssh-config: trusted as root's other inputs are, and every file it includes; made absolute."""
    if cfg.ssh_config:
        from netprof.profiler.run.link.sshlink import check_ssh_config as check

        cfg.ssh_config = check(cfg.ssh_config)


def validate(cfg: RunConfig, whole_run: bool = True) -> RunConfig:
    """`whole_run` False: cfg is one of netprof ab's variants, validated as a run of its own but for the checks
    about the run as a whole, which ab.plan makes over all the variants (check_zmq_client)."""
    known = registry.names(include_test_only=True)
    own = [s.name for s in cfg.own]
    if len(set(own)) != len(own) or set(own) & set(cfg.backends):
        raise InputError("two servers share a name: give each --cmd its own --name")
    for b in cfg.backends:
        if b not in known:
            close = difflib.get_close_matches(b, known, n=1)
            raise InputError(f"unknown backend '{b}'" + (f"; did you mean {close[0]}?" if close else "")
                             + f" Known: {', '.join(registry.names())} (see `netprof list`)")
    cfg.backends = [*cfg.backends, *own]
    for name in cfg.extra_dims:
        if name not in schema.BY_NAME:
            raise InputError(f"run dimension '{name}' is not declared in profiler/model/schema.py")
    for name in cfg.instruments:
        if instruments.by_name(name) is None:
            raise InputError(f"--instrument '{name}' is not known; use one of {', '.join(instruments.NAMES)}")
    if not cfg.backends:
        raise InputError("name at least one backend, e.g. `netprof run selector` (see `netprof list`), "
                         "or your own server with --cmd or --attach")
    if cfg.protocol not in PROTOCOLS:
        raise InputError(f"--protocol '{cfg.protocol}' is not known; use {', '.join(PROTOCOLS)}")
    builtin_protocol(cfg, [b for b in cfg.backends if b not in own])
    if cfg.protocol == "http" and not re.fullmatch(r"[A-Z]+ /\S*", cfg.request):
        raise InputError(f"--request '{cfg.request}' is not 'METHOD /path', e.g. 'GET /plaintext'")
    for h in cfg.headers:
        if not HEADER.fullmatch(h):
            raise InputError(f"--header '{h}' is not 'Name: value'")
    if own and cfg.remote:
        raise InputError("--cmd/--attach run on this host's loopback; drop --remote")
    if "off" in cfg.extra_dims.get("io_uring", ()) and any(cfg.server(b).kind == "attach" for b in own):
        raise InputError("--io-uring off starts the server with io_uring denied: an --attach server is already "
                         "running; use --cmd, or drop --io-uring off")
    ceiling = max_connections()
    for c in cfg.connections:
        if c < 1:
            raise InputError(f"--connections {c}: each count must be at least 1")
        if c > ceiling:
            raise InputError(
                f"--connections {c} exceeds what `ulimit -n` ({fd_limit()}) allows: at most {ceiling}; "
                f"raise the limit (`ulimit -n {c + FD_RESERVE}`, needs CAP_SYS_RESOURCE) or use fewer"
            )
    for p in cfg.pipeline:
        _check_range("pipeline", p)
    _check_range("duration", cfg.duration)
    _check_range("warmup", cfg.warmup)
    _check_range("rounds", cfg.rounds)
    _check_range("msize", cfg.msize)
    _check_range("probe_share", cfg.probe_share)
    _check_range("workers", cfg.workers)
    _check_range("loader_threads", cfg.loader_threads)
    if cfg.probe_share == 0:
        cfg.probes = False  # `--probe-share 0`: no probes, as --no-probes
    for framing in cfg.framings:
        if framing not in FRAMINGS:
            raise InputError(f"--framing '{framing}' is not known; use {' or '.join(FRAMINGS)}")
    check_work(cfg.work)
    check_remote_work(cfg)
    check_think(cfg.think)
    check_zmq_client(cfg, cfg.zmq_servers() if whole_run else None)
    check_open_loop(cfg)
    check_warmup_after(cfg)
    if cfg.remote not in REMOTE_MODES:
        raise InputError(f"--remote '{cfg.remote}' is not known; use --remote netns (or leave it out for loopback)")
    if cfg.netem and cfg.remote != "netns":
        raise InputError("--netem needs --remote netns (netem shapes the link between our own namespaces)")
    if cfg.netem:
        from netprof.profiler.run.link.netns import Netem

        try:
            Netem.parse(cfg.netem).check()
        except ValueError as e:
            raise InputError(str(e)) from None
    if cfg.loader_hosts:
        check_loader_hosts(cfg)
    elif (cfg.ssh_config or cfg.remote_netprof) and not cfg.server_host:
        raise InputError("--ssh-config and --remote-netprof are for --loader-hosts or --server-host: add one, "
                         "or drop them")
    if cfg.server_host:
        if cfg.remote:
            raise InputError("--server-host and --remote netns: the server host's own link is its network; "
                             "drop --remote")
        if not shutil.which("ssh"):
            raise InputError("--server-host needs OpenSSH's `ssh`: run `make setup` (Debian openssh-client)")
        check_ssh_config(cfg)
    if cfg.remote == "netns":
        if os.geteuid() != 0:
            raise InputError("--remote netns needs root (it creates network namespaces); run as root or drop --remote")
        if not shutil.which("ip") or (cfg.netem and not shutil.which("tc")):
            raise InputError("--remote netns needs iproute2 (`ip`, `tc`): run `make setup`")
        if cfg.sources not in (["127.0.0.1"], ["auto"]):
            raise InputError("--sources is for loopback runs; with --remote netns the loader connects from "
                             "198.18.0.2 (and .3 … when a run needs more than one address)")
        from netprof.profiler.run.link.netns import MAX_LOADER_ADDRS

        n = min(MAX_LOADER_ADDRS, n_auto_sources(max(cfg.connections)))
        cfg.sources = [f"198.18.0.{2 + i}" for i in range(n)]  # the loader's end of the link (netns.py)
    elif cfg.loader_hosts:
        cfg.sources = []  # the loader host's own address, known once its agent answers (sshlink.py)
    elif cfg.sources == ["auto"]:
        cfg.sources = auto_sources(max(cfg.connections))
    elif len(cfg.sources) * CONNECTIONS_PER_SOURCE < max(cfg.connections):
        need = math.ceil(max(cfg.connections) / CONNECTIONS_PER_SOURCE)
        raise InputError(f"--connections {max(cfg.connections)} needs at least {need} source addresses "
                         f"(~{CONNECTIONS_PER_SOURCE} ports each): use --sources auto")
    ncpu = os.cpu_count() or 1
    if cfg.pin_both and not cfg.pin:
        raise InputError("--pin both pins the loader and half the cells' backends: it cannot go with --no-pin")
    if cfg.pin and ncpu < 2:
        raise InputError("pinning needs at least 2 CPUs (backend and loader apart); pass --no-pin")
    if cfg.pin:
        check_cpus(cfg)
    check_out(cfg)
    return cfg


def _cpu_list(spec: str, option: str) -> list[int]:
    from netprof.profiler.core.procs import parse_cpus

    usable = sorted(os.sched_getaffinity(0))
    try:
        cpus = parse_cpus(spec) or []
    except ValueError:
        raise InputError(f"{option} '{spec}' is not a CPU list; use e.g. 0, 1,2 or 1-3 (this machine: "
                         f"{','.join(map(str, usable))})") from None
    if not cpus:
        raise InputError(f"{option} is empty; give a CPU list such as 0 or 1,2")
    bad = [c for c in cpus if c not in usable]
    if bad:
        raise InputError(f"{option} {spec}: CPU {bad[0]} is not available to this process; "
                         f"use {','.join(map(str, usable))}")
    return cpus


def check_cpus(cfg: RunConfig) -> None:
    """Backend and loader CPUs exist, and do not overlap (the loader would steal the backend's CPU)."""
    backend = set(_cpu_list(cfg.backend_cpu, "--backend-cpu"))
    if cfg.loader_cpus:
        shared = backend & set(_cpu_list(cfg.loader_cpus, "--loader-cpus"))
        if shared:
            raise InputError(f"--backend-cpu and --loader-cpus share CPU {min(shared)}: the loader would compete "
                             "with the backend it measures; give them different CPUs, or --no-pin")
    elif not set(os.sched_getaffinity(0)) - backend:
        raise InputError(f"--backend-cpu {cfg.backend_cpu} leaves no CPU for the loader; pin the backend to fewer CPUs")


def check_out(cfg: RunConfig) -> None:
    """--out is a directory netprof may write as root (profiler/core/atomic.py: not under /proc, not a
    file, nobody else's), and not a finished run's directory unless --force (its rows would go)."""
    if not cfg.out_dir:
        return
    from netprof.profiler.core.atomic import check_out_dir
    from netprof.profiler.model.results import RESULTS_PARQUET

    check_out_dir(cfg.out_dir)
    if os.path.exists(os.path.join(cfg.out_dir, RESULTS_PARQUET)) and not cfg.force:
        raise InputError(f"--out {cfg.out_dir} already holds a run; give a new directory, or --force to replace it")

def check_warmup_after(cfg: RunConfig) -> None:
    if cfg.warmup_after not in WARMUP_AFTER:
        raise InputError(f"--warmup-after '{cfg.warmup_after}' is not known; use connected (the default: every "
                         "connection up) or served (every connection answered once)")


def check_open_loop(cfg: RunConfig) -> None:
    """--rate and --arrivals: the rates in range, and nothing the loader's open-loop mode refuses
    (think time, ZeroMQ under libzmq) reaches it; --arrivals defaults to constant with --rate."""
    if cfg.arrivals and cfg.arrivals not in ARRIVALS:
        raise InputError(f"--arrivals '{cfg.arrivals}' is not known; use constant (evenly spaced) or poisson")
    if not cfg.open_loop:
        if cfg.arrivals:
            raise InputError("--arrivals says how requests arrive at a --rate: add --rate R (e.g. --rate 1000), "
                             "or drop --arrivals")
        if cfg.max_connections:
            raise InputError("--max-connections caps the connections an open-loop load opens as its requests need "
                             "them: add --rate R (e.g. --rate 1000), or drop --max-connections (closed loop uses -c)")
        return
    check_max_connections(cfg)
    check_rates(list(cfg.extra_dims["rate"]))
    if cfg.think != "none":
        raise InputError("--rate and --think cannot go together: an open-loop load sends on a schedule, not after "
                         "a think time; drop one of them")
    closed = closed_loop_only(cfg)
    if closed:
        raise InputError(f"--rate is not for the ZeroMQ backends ({', '.join(closed)}) under --zmq-client libzmq: "
                         "libzmq's DEALER sockets are driven closed-loop only; add --zmq-client native")
    cfg.arrivals = cfg.arrivals or ARRIVALS[0]


def check_max_connections(cfg: RunConfig) -> None:
    """--max-connections (given: not 0) at least every -c (they count under it) and within `ulimit -n`."""
    n = cfg.max_connections
    if not n:
        return
    if n < 1:
        raise InputError(f"--max-connections {n}: give at least 1 (and at least -c)")
    if n < max(cfg.connections):
        raise InputError(f"--max-connections {n} is below -c {max(cfg.connections)}: the connections opened before "
                         f"the load count under it; give --max-connections {max(cfg.connections)} or more")
    if n > (ceiling := max_connections()):
        raise InputError(f"--max-connections {n} exceeds what `ulimit -n` ({fd_limit()}) allows: at most {ceiling}; "
                         f"raise the limit (`ulimit -n {n + FD_RESERVE}`, needs CAP_SYS_RESOURCE) or ask for fewer")


def closed_loop_only(cfg: RunConfig) -> list[str]:
    """The run's servers the loader can drive closed-loop only: the ZeroMQ ones under --zmq-client libzmq
    (libzmq's engine takes no rate, timeline nor turns: PROTOCOL.md, "ZeroMQ mode")."""
    return [b for b in cfg.backends if cfg.loader_transport(b) == ZMQ_CLIENTS["libzmq"]]


def check_zmq_client(cfg: RunConfig, zmq_servers: list[str] | None) -> None:
    """--zmq-client names a client, and native only with ZeroMQ servers to drive (`zmq_servers`: the run's; None:
    only the name is checked, the caller checks the rest over a larger run, as ab.plan over its variants)."""
    if cfg.zmq_client not in ZMQ_CLIENTS:
        raise InputError(f"--zmq-client '{cfg.zmq_client}' is not known; use libzmq (the default) or native")
    if zmq_servers is not None and not zmq_servers and cfg.zmq_client != "libzmq":  # the default never is in the way
        zmq = [n for n in registry.names() if registry.get(n).transport == "zmq"]
        raise InputError(f"--zmq-client is for the ZeroMQ backends ({', '.join(zmq)}); none is in this run: drop it")


def check_work(spec: str) -> None:
    """A malformed --work fails before any process starts, by the backends' own parser."""
    from netprof.backends.common import BadWorkSpec, WorkModel

    try:
        WorkModel.parse(spec)
    except BadWorkSpec as e:
        raise InputError(str(e)) from None


def check_remote_work(cfg: RunConfig, command: str = "run") -> None:
    """--work remote:US: a helper on this host answers the backend's handlers (profiler/core/remote_work.py), so
    only built-in Python backends on loopback can use it, and only under the commands whose run starts the
    helper (runner.execute: run, flamegraph); `ab` and `knee` keep warm servers of their own."""
    from netprof.backends.common import WorkModel

    if WorkModel.parse(cfg.work).kind != "remote":  # parsed already by check_work
        return
    if command not in ("run", "flamegraph"):
        raise InputError(f"--work remote:US is for `netprof run` (its helper starts with the run's cells), not "
                         f"`netprof {command}`: use --work sleep:US")
    where = ("--remote" if cfg.remote else "--loader-hosts" if cfg.loader_hosts
             else "--server-host" if cfg.server_host else "")
    if where:
        raise InputError(f"--work remote:US runs its helper on this host's loopback: leave out {where}")
    cpp = [b for b in cfg.backends if b.startswith("cpp_")]
    if cpp:
        raise InputError(f"--work remote:US is a Python handler's blocking call; {', '.join(cpp)} has none: "
                         "leave it out or use --work sleep:US")


# The loader owns think-time parsing (cpp_server/src/think.hpp); this pattern only lets a bad spec
# fail before any process starts, and the loader re-validates whatever passes.
THINK = (r"none|fixed:\d+(\.\d+)?|uniform:\d+(\.\d+)?-\d+(\.\d+)?|poisson:\d+(\.\d+)?",
         "none, fixed:US, uniform:MIN-MAX or poisson:MEAN (microseconds)")


THINK_MAX_US = 6e7  # the loader's bound (think.hpp kMaxUs)


def check_think(spec: str) -> None:
    values = [float(v) for v in re.findall(r"\d+(?:\.\d+)?", spec)]
    if not re.fullmatch(THINK[0], spec) or any(v > THINK_MAX_US for v in values) \
            or spec.startswith("uniform:") and values[0] > values[1]:
        raise InputError(f"--think '{spec}' is not understood; use {THINK[1]}, MIN <= MAX, at most 60 s")


def loader_cpus(cfg: RunConfig) -> str | None:
    """The loader's CPUs: as given, else every CPU except the backend's; None when not pinning."""
    if not cfg.pin:
        return None
    if cfg.loader_cpus:
        return cfg.loader_cpus
    from netprof.profiler.core.procs import parse_cpus

    backend = set(parse_cpus(cfg.backend_cpu) or [])
    rest = [c for c in sorted(os.sched_getaffinity(0)) if c not in backend]
    return ",".join(map(str, rest)) if rest else None
