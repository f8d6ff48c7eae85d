"""The Python side of the loader's control protocol (cpp_server/PROTOCOL.md).

`Loader.start()` spawns `netprof-loader --control-fd N` through `procs`, N being one end of a
`socket.socketpair()` whose other end only this process holds: the control channel is private (no
listening port, nothing another local user could connect to). `Loader.run()` sends one run request on
it, hands every event line to `on_event` as soon as it arrives (the orchestrator snapshots probes on
`measure_start`/`measure_stop` and, with `probe_share`, `probe_start`/`probe_stop` (with `probe_guard`,
`guard_start`/`guard_stop` around them, where it attaches and detaches the probes); with `progress`, the
live `progress` events too) and returns the final stats dict. Requests on the channel are served one
after the other: a Loader is not for concurrent use from several threads. Closing the channel
(`stop()`, or this process dying) makes the loader exit at once; it also dies with this process
through PR_SET_PDEATHSIG, which fires when the *thread* that called `Loader.start()` exits: start it
from a thread that outlives it (the main thread).
Validation of the request fields belongs to the loader (one owner per concept): a bad field comes back
as `LoaderError(kind="bad_request")` naming the field.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Protocol

from netprof.profiler.core import safetext
from netprof.profiler.core.errors import NetprofError
from netprof.profiler.core.paths import loader_binary
from netprof.profiler.core.procs import ManagedProcess, ProcessError, ProcessGroup, parse_cpus
from netprof.profiler.run.stop import STOP_POLL_S, raise_if_stopped

PROTOCOL_VERSION = 1
MAX_REPLY_LINE = 256 * 1024 * 1024  # a result carries one count per connection: allow it to be long
# Another host's lines (an agent, the loader it relays) are capped by what they can need, not by what this one's
# loader could send: 4 MiB (an agent's `file` event carries 256 KiB in base64), and a loader's result up to 96 bytes
# more per connection (one count per connection in the window and in each of its three phases, 20 digits at most).
UNTRUSTED_LINE = 4 * 1024 * 1024
RESULT_BYTES_PER_CONNECTION = 96


def result_line_cap(connections: int) -> int:
    """The longest line a loader on another host may send for a run of `connections` (-c or, opened as
    needed, --max-connections)."""
    return UNTRUSTED_LINE + RESULT_BYTES_PER_CONNECTION * connections
STALL_GRACE_S = 15.0  # on top of connect_timeout + warmup + duration

# Error kinds the loader sends, plus two the client raises itself.
LOADER_ERROR_KINDS = ("bad_request", "connect", "backend_gone", "internal", "aborted")
STALL = "stall"  # no final event within the timeout; the run is aborted, the loader stays usable
LOADER_GONE = "loader_gone"  # the control channel broke or the loader process exited


@dataclass
class RunRequest:
    """One run; the fields are the protocol's run fields (PROTOCOL.md, "Run request")."""

    target: str
    connections: int
    msize: int = 64
    duration: float = 10.0
    warmup: float = 1.0
    pipeline: int = 1
    think: str = "none"
    connect_timeout: float = 10.0
    sources: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    # "zmq": libzmq DEALER sockets against a ZeroMQ ROUTER backend (PROTOCOL.md, "ZeroMQ mode"; closed loop only);
    # "zmtp": DEALER connections the loader speaks itself (ZMTP 3.0, NULL mechanism, one frame of msize bytes per
    # message) on its TCP engine's epoll loop: rate, timeline, alternate and threads as with "tcp" (echo only).
    # netprof picks one per server with RunConfig.loader_transport (--zmq-client).
    transport: str = "tcp"
    # Probed share of the window (PROTOCOL.md, "Probe phases"): None = single phase (no probe events, no
    # "phases" in the stats); 0 < share <= 1 adds probe_start/probe_stop events and per-phase stats.
    probe_share: float | None = None
    # Seconds on each side of the probed sub-window that count in neither phase (needs probe_share):
    # guard_start/guard_stop events, stats phases.guard. None = no guards (the field is absent).
    probe_guard: float | None = None
    # What one message is (PROTOCOL.md, "Protocols"): "echo" (msize bytes echoed back), "http" (one
    # HTTP/1.1 keep-alive request and its response) or "line" (one line and its newline-terminated reply).
    protocol: str = "echo"
    request: str | None = None  # http: "METHOD /path" (the loader's default: "GET /")
    headers: list[str] = field(default_factory=list)  # http: "Name: value" each
    body: str | None = None  # http: the request body (text; e.g. a --body-file's content); sent with Content-Length
    host: str | None = None  # http: the Host header's value (the loader's default: the target)
    line: str | None = None  # line: the request line without its newline (required for "line")
    # Seconds between `progress` events (PROTOCOL.md, "Progress"): live counts during warm-up and the
    # window. None = none are sent (the field is absent: the event sequence of old loaders and clients).
    progress: float | None = None
    # Open loop (PROTOCOL.md, "Run request"): requests/s over all connections, sent on a schedule whatever the
    # replies do, latency from each one's intended time; `arrivals` "constant" or "poisson". None = closed loop
    # (the fields are absent: a closed-loop request is byte for byte what it always was).
    rate: float | None = None
    arrivals: str | None = None
    # With `rate`: connections as needed (PROTOCOL.md, "Connections as needed"): a request that comes due while
    # every open connection has `pipeline` in flight goes out on a new one, up to this many open at once (at
    # least `connections`, the ones opened before the load). None: absent (`connections`: none are opened).
    max_connections: int | None = None
    # Every latency object of the stats also carries its histogram's buckets (PROTOCOL.md, "Histograms"),
    # to merge several loaders' stats (loaderset.py). False: the field is absent.
    histograms: bool = False
    # The window starts no earlier than this time.monotonic() (seconds, this host's clock: Loader.run moves
    # it to the loader's): loaders on several hosts begin their windows together (loaderset.py). None: absent.
    start_at: float | None = None
    # The window in this many equal slices, each with its latency figures (PROTOCOL.md, "Timeline"): overload
    # shows as latency growing through the window. None: absent.
    timeline: int | None = None
    # Turns (PROTOCOL.md, "Turns"): further targets that share the connections with `target` (connection i
    # talks to target i % (1 + len(alternate))) and are served one at a time, `turn` seconds each, in rounds
    # A B, B A, …; the stats gain "turns" (each turn's messages and mean latency, each target's latency).
    # None: absent (one target).
    alternate: list[str] | None = None
    turn: float | None = None
    # When the connect phase ends (PROTOCOL.md, "Warm-up after"): "served" once every connection has had one
    # message answered (the stats gain "served_first"); None: absent ("connected", once every one is up).
    warmup_after: str | None = None
    # Seconds the loader keeps its connections open after measure_stop, sending nothing, until Loader.run releases
    # them once `on_event` has had measure_stop (PROTOCOL.md, "Hold"): a server's thread per connection is still
    # there when the cell reads its /proc counts at that mark. None: absent (closed at once).
    hold: float | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["sources"] = list(self.sources)
        if d["probe_share"] is None:
            del d["probe_share"]  # old loaders and single-phase runs: the field is absent
        # Protocol fields only when they differ from the default: an echo request is what it always was.
        if d["protocol"] == "echo":
            del d["protocol"]
        for key in ("request", "body", "host", "line", "progress", "probe_guard", "rate", "arrivals", "start_at",
                    "timeline", "alternate", "turn", "max_connections", "warmup_after", "hold"):
            if d[key] is None:
                del d[key]
        if d.get("alternate") is not None:
            d["alternate"] = list(self.alternate or [])
        if not d["histograms"]:
            del d["histograms"]
        if d["headers"]:
            d["headers"] = list(self.headers)
        else:
            del d["headers"]
        return {"cmd": "run", **d}

    def default_timeout(self) -> float:
        return self.connect_timeout + self.warmup + self.duration + STALL_GRACE_S


class RunsLoad(Protocol):
    """What a cell needs of its loader: one run (a Loader, or loaderset.LoaderSet for several hosts)."""

    def run(self, req: RunRequest, on_event: Callable[[dict], None] | None = None,
            timeout: float | None = None) -> dict | None: ...

    def abort(self) -> None: ...


class LoaderError(NetprofError, RuntimeError):
    """The loader reported an error (or stalled, or went away). Inside a cell it makes the cell FF
    (cell.run_cell); elsewhere it is netprof's own error (exit 3, finished cells kept).

    `kind` is one of LOADER_ERROR_KINDS, STALL or LOADER_GONE; `stats` the partial stats dict the loader
    sent before the error (a run that had started), else None.
    """

    def __init__(self, kind: str, message: str, stats: dict | None = None) -> None:
        super().__init__(f"loader {kind}: {message}")
        self.kind = kind
        self.message = message
        self.stats = stats


class _LineReader:
    """JSON lines from a socket, each read bounded by an absolute deadline. `untrusted`: the other end is
    another host (an agent, and the loader it relays: sshlink.py), so every string of every object loses
    its control characters as it is read (safetext.clean): nothing it says reaches a terminal or a file as
    an escape sequence."""

    def __init__(self, sock: socket.socket, untrusted: bool = False) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.untrusted = untrusted
        self.max_line = UNTRUSTED_LINE if untrusted else MAX_REPLY_LINE  # Loader.run raises it for a result

    def read(self, deadline: float) -> dict | None:
        """The next object; None on EOF; TimeoutError past the deadline; ValueError on garbage."""
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                if not line.strip():
                    continue
                obj = json.loads(line)
                if not isinstance(obj, dict) or "event" not in obj:
                    raise ValueError(f"not an event: {line[:200]!r}")
                return safetext.clean(obj) if self.untrusted else obj
            if len(self.buf) > self.max_line:
                raise ValueError(f"a line longer than {self.max_line:,} bytes (the cap on what "
                                 f"{'another host' if self.untrusted else 'the loader'} may send in one line)")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            self.buf += chunk


_TIMES = ("t", "t_start", "t_stop")  # the loader's CLOCK_MONOTONIC times in events and stats (PROTOCOL.md)


def _to_our_clock(obj: dict, offset_s: float) -> None:
    """An event (and the stats in it, their phases too) with the loader's times moved into our clock."""
    for key in _TIMES:
        if isinstance(obj.get(key), (int, float)):
            obj[key] -= offset_s
    for inner in (obj.get("stats"), *((obj.get("phases") or {}).values())):
        if isinstance(inner, dict):
            _to_our_clock(inner, offset_s)


class Loader:
    """A running `netprof-loader --control-fd` process and our end of its private control channel."""

    def __init__(self, proc: ManagedProcess, channel: socket.socket, netns: str | None = None,
                 reader: _LineReader | None = None) -> None:
        """`proc` is the loader, or what carries its channel (an ssh session to an agent: sshlink.py, whose
        handshake read the channel with `reader` first)."""
        self.proc = proc
        self.channel = channel  # our end of the socketpair; the loader holds the other
        self.netns = netns  # the network namespace the loader runs in (None: ours)
        self.link = None  # the RemoteLink the loader runs in (set by the runner), None on loopback
        self._reader = reader or _LineReader(channel)
        # The loader's CLOCK_MONOTONIC minus ours (a loader on another host: sshlink.Clock). run() moves the
        # times it sends into the loader's clock and the times it reads back into ours.
        self.clock_offset_s = 0.0
        self.clock_error_s = 0.0  # the offset's error bound (sshlink.Clock.error_s): in the result as clock_error_s
        self._closed = False

    @classmethod
    def start(
        cls,
        group: ProcessGroup,
        cpus: Iterable[int] | str | None = None,
        threads: int = 1,
        startup_timeout: float = 10.0,
        prefix: list[str] | None = None,
        netns: str | None = None,
    ) -> "Loader":
        """`prefix` goes before the loader's argv (e.g. `ip netns exec NS`, which execs, so the pid is
        the loader's and the channel's descriptor survives); `netns` names the namespace it then runs
        in. Returns once the loader has answered a ping; ProcessError if it does not start."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            argv = [*(prefix or []), loader_binary(), "--control-fd", str(theirs.fileno()),
                    "--threads", str(int(threads))]
            # The loader pins each worker thread itself; spawn() pins the whole process to the same set.
            cpu_list = None
            if cpus is not None and cpus != "":
                cpu_list = parse_cpus(cpus if isinstance(cpus, str) else list(cpus))
                argv += ["--cpus", ",".join(str(c) for c in cpu_list)]
            proc = group.spawn("loader", argv, cpus=cpu_list, capture_stdout=False, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # only the loader holds that end now: its EOF means we are gone, and ours means it is
        loader = cls(proc, ours, netns=netns)
        try:
            loader.ping(timeout=startup_timeout)
        except LoaderError as e:
            loader._close()
            raise ProcessError(f"the loader did not start: {e.message}") from None
        return loader

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _gone(self, what: str) -> LoaderError:
        try:
            self.proc.popen.wait(timeout=1.0)  # a channel that broke usually means the loader exited
        except subprocess.TimeoutExpired:
            pass
        if not self.proc.alive():
            return LoaderError(
                LOADER_GONE,
                f"{what}: the loader exited with code {self.proc.returncode()}: "
                f"{self.proc.stderr_tail() or 'no stderr'}",
            )
        return LoaderError(LOADER_GONE, f"{what}: the control channel closed")

    def _close(self) -> None:
        """Closes our end of the channel: the loader exits at once (aborting a run in progress)."""
        if not self._closed:
            self._closed = True
            self.channel.close()

    def _send(self, obj: dict) -> None:
        if self._closed:
            raise self._gone("the control channel was closed earlier")
        self.channel.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def abort(self) -> None:
        """End the run in progress now, from another thread than run()'s: run() then raises LoaderError
        "aborted" with the stats so far. Outside a run the loader ignores it (PROTOCOL.md), so a call that
        comes just after the run ended is harmless; the next run's request is written after it."""
        self._send({"cmd": "abort"})

    def send_raw(self, data: bytes) -> None:
        """Bytes as they are onto the channel (for tests of the loader's input handling)."""
        self.channel.sendall(data)

    def read_event(self, timeout: float) -> dict | None:
        """The next event line (for tests); None on EOF; TimeoutError, ValueError as _LineReader.read."""
        return self._reader.read(time.monotonic() + timeout)

    def _resync(self, grace: float, pongs_owed: int = 0) -> dict | None:
        """After a request we stopped following (a stall, an exception in on_event): asks the loader to
        abort a run in progress and reads up to the pong of our own ping (after `pongs_owed` earlier
        ones), so the channel is in step again. Returns the stats of a `result` line read on the way.
        If the loader does not answer within `grace`, closes the channel (the loader then exits) and
        later calls fail as `loader_gone`."""
        stats = None
        pongs = pongs_owed + 1
        try:
            self._send({"cmd": "abort"})  # a run in progress ends (result, error "aborted"); else ignored
            self._send({"cmd": "ping"})
            deadline = time.monotonic() + grace
            while True:
                evt = self._reader.read(deadline)
                if evt is None:
                    break
                if evt.get("event") == "result":
                    stats = evt.get("stats")
                elif evt.get("event") == "pong":
                    pongs -= 1
                    if pongs == 0:
                        return stats
        except (OSError, ValueError, TimeoutError, LoaderError):
            pass
        self._close()
        return stats

    def ping(self, timeout: float = 5.0) -> dict:
        """{"event": "pong", "version": 1}; LoaderError otherwise."""
        deadline = time.monotonic() + timeout
        try:
            self._send({"cmd": "ping"})
            evt = self._reader.read(deadline)
        except TimeoutError:
            self._resync(2.0, pongs_owed=1)
            raise LoaderError(STALL, f"no pong within {timeout:.1f}s") from None
        except (OSError, ValueError) as e:
            raise self._gone(f"ping failed ({e})") from e
        if evt is None:
            raise self._gone("no pong")
        if evt.get("event") == "error":
            raise LoaderError(evt.get("error", "internal"), evt.get("message", ""))
        return evt

    def run(
        self,
        req: RunRequest,
        on_event: Callable[[dict], None] | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Runs `req`; returns the final stats dict. Raises LoaderError (with partial stats when the run
        had started) on an error event, a stall (`timeout`, default connect_timeout + warmup + duration
        + 15 s) or a lost loader. On a stall, an exception in `on_event` or Ctrl-C the run is aborted
        (`{"cmd":"abort"}`) and the loader stays usable for the next run."""
        if timeout is None:
            timeout = req.default_timeout()
        deadline = time.monotonic() + timeout
        stats: dict | None = None
        off = self.clock_offset_s
        if self._reader.untrusted:  # a loader on another host: its result may be as long as this run needs
            self._reader.max_line = result_line_cap(max(req.connections, req.max_connections or 0))
        try:
            self._send(req.to_json() if not off or req.start_at is None
                       else {**req.to_json(), "start_at": req.start_at + off})
            while True:
                try:  # in slices, so that an interrupt Python swallowed ends the run soon (run/stop.py)
                    evt = self._reader.read(min(deadline, time.monotonic() + STOP_POLL_S))
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise
                    raise_if_stopped()
                    continue
                if off and evt is not None:
                    _to_our_clock(evt, off)
                if evt is None:
                    err = self._gone("no result")
                    err.stats = stats
                    raise err
                if on_event is not None:
                    on_event(evt)  # synchronously: the orchestrator snapshots probes here
                kind = evt["event"]
                if kind == "measure_stop" and req.hold:
                    self._send({"cmd": "release"})  # what was read at the mark is read: the connections may close
                if kind == "result":
                    stats = evt.get("stats")
                    if off and isinstance(stats, dict):  # its times are ours within this (cell.instrument_rows)
                        stats["clock_error_s"] = self.clock_error_s
                    if not stats or not stats.get("aborted"):
                        return stats
                    # An aborted run: the error line that says why follows at once.
                    deadline = min(deadline, time.monotonic() + 5.0)
                elif kind == "error":
                    raise LoaderError(evt.get("error", "internal"), evt.get("message", ""), stats)
        except TimeoutError:
            stats = self._resync(5.0) or stats
            raise LoaderError(STALL, f"no result from the loader within {timeout:.1f}s (run aborted)", stats) from None
        except ValueError as e:
            self._resync(5.0)
            raise LoaderError("internal", f"unreadable reply from the loader: {e}", stats) from e
        except OSError as e:
            raise self._gone(f"control channel failed ({e})") from e
        except LoaderError:
            raise
        except BaseException:
            # on_event raised (or Ctrl-C): stop the run, keep the channel in step, re-raise.
            self._resync(2.0)
            raise

    def stop(self) -> int | None:
        """Closes the channel (the loader exits at once) and reaps the process; its exit code."""
        self._close()
        try:
            self.proc.popen.wait(timeout=3.0)
        except subprocess.TimeoutExpired:
            pass
        return self.proc.stop()


__all__ = [
    "RunRequest",
    "LoaderError",
    "Loader",
    "PROTOCOL_VERSION",
    "LOADER_ERROR_KINDS",
    "STALL",
    "LOADER_GONE",
    "ProcessError",
]
