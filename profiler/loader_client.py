"""The Python side of the loader's control protocol (cpp_server/PROTOCOL.md).

`Loader.start()` spawns `netprof-loader --control 127.0.0.1:0` through `procs`, and `Loader.run()` sends one
run request on a fresh control connection, hands every event line to `on_event` as soon as it arrives
(the orchestrator snapshots probes on `measure_start`/`measure_stop`) and returns the final stats dict.
Validation of the request fields belongs to the loader (one owner per concept): a bad field comes back
as `LoaderError(kind="bad_request")` naming the field.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from netprof.profiler.paths import loader_binary
from netprof.profiler.procs import ManagedProcess, ProcessError, ProcessGroup

PROTOCOL_VERSION = 1
MAX_REQUEST_LINE = 64 * 1024  # the loader refuses longer request lines
MAX_REPLY_LINE = 256 * 1024 * 1024  # a result carries one count per connection: allow it to be long
STALL_GRACE_S = 15.0  # on top of connect_timeout + warmup + duration

# Error kinds the loader sends, plus two the client raises itself.
LOADER_ERROR_KINDS = ("bad_request", "connect", "backend_gone", "internal")
STALL = "stall"  # no final event within the timeout; the control connection is closed (aborts the run)
LOADER_GONE = "loader_gone"  # the control connection broke or the loader process exited


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
    transport: str = "tcp"  # "zmq": DEALER sockets against a ZeroMQ ROUTER backend (PROTOCOL.md, "ZeroMQ mode")

    def to_json(self) -> dict:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return {"cmd": "run", **d}

    def default_timeout(self) -> float:
        return self.connect_timeout + self.warmup + self.duration + STALL_GRACE_S


class LoaderError(RuntimeError):
    """The loader reported an error (or stalled, or went away).

    `kind` is one of LOADER_ERROR_KINDS, STALL or LOADER_GONE; `stats` the partial stats dict the loader
    sent before the error (a run that had started), else None.
    """

    def __init__(self, kind: str, message: str, stats: dict | None = None) -> None:
        super().__init__(f"loader {kind}: {message}")
        self.kind = kind
        self.message = message
        self.stats = stats


class _LineReader:
    """JSON lines from a socket, each read bounded by an absolute deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

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
                return obj
            if len(self.buf) > MAX_REPLY_LINE:
                raise ValueError("reply line too long")
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


class Loader:
    """A running `netprof-loader --control` process."""

    def __init__(self, proc: ManagedProcess, host: str, port: int, netns: str | None = None) -> None:
        self.proc = proc
        self.host = host
        self.port = port
        self.netns = netns  # the network namespace the control port lives in (None: ours)
        self.link = None  # the RemoteLink the loader runs in (set by the runner), None on loopback

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
        the loader's); `netns` names the namespace it then runs in, where its control port is."""
        argv = [*(prefix or []), loader_binary(), "--control", "127.0.0.1:0", "--threads", str(int(threads))]
        # The loader pins each worker thread itself; spawn() pins the whole process to the same set.
        cpu_list = None
        if cpus is not None and cpus != "":
            from netprof.profiler.procs import parse_cpus

            cpu_list = parse_cpus(cpus if isinstance(cpus, str) else list(cpus))
            argv += ["--cpus", ",".join(str(c) for c in cpu_list)]
        proc = group.spawn("loader", argv, cpus=cpu_list)
        line = proc.wait_line("control ", startup_timeout)
        host, _, port = line.split(" ", 1)[1].strip().rpartition(":")
        return cls(proc, host, int(port), netns=netns)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _gone(self, what: str) -> LoaderError:
        if not self.proc.alive():
            return LoaderError(
                LOADER_GONE,
                f"{what}: the loader exited with code {self.proc.returncode()}: "
                f"{self.proc.stderr_tail() or 'no stderr'}",
            )
        return LoaderError(LOADER_GONE, f"{what}: the control connection closed")

    def _connect(self, timeout: float) -> socket.socket:
        try:
            if self.netns:
                from netprof.profiler.netns import socket_in_netns

                sock = socket_in_netns(self.netns)
                try:
                    sock.settimeout(timeout)
                    sock.connect((self.host, self.port))
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as e:
            raise self._gone(f"cannot reach the control port {self.address} ({e})") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    @staticmethod
    def _send(sock: socket.socket, obj: dict) -> None:
        sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def ping(self, timeout: float = 5.0) -> dict:
        """{"event": "pong", "version": 1}; LoaderError otherwise."""
        deadline = time.monotonic() + timeout
        with self._connect(timeout) as sock:
            try:
                self._send(sock, {"cmd": "ping"})
                evt = _LineReader(sock).read(deadline)
            except TimeoutError:
                raise LoaderError(STALL, f"no pong within {timeout:.1f}s (is a run in progress?)") from None
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
        + 15 s) or a lost loader. Closing the connection early (exception, Ctrl-C) aborts the run."""
        if timeout is None:
            timeout = req.default_timeout()
        deadline = time.monotonic() + timeout
        stats: dict | None = None
        with self._connect(min(timeout, 10.0)) as sock:
            reader = _LineReader(sock)
            try:
                self._send(sock, req.to_json())
                while True:
                    evt = reader.read(deadline)
                    if evt is None:
                        err = self._gone("no result")
                        err.stats = stats
                        raise err
                    if on_event is not None:
                        on_event(evt)  # synchronously: the orchestrator snapshots probes here
                    kind = evt["event"]
                    if kind == "result":
                        stats = evt.get("stats")
                        if not stats or not stats.get("aborted"):
                            return stats
                        # An aborted run: the error line that says why follows at once.
                        deadline = min(deadline, time.monotonic() + 5.0)
                    elif kind == "error":
                        raise LoaderError(evt.get("error", "internal"), evt.get("message", ""), stats)
            except TimeoutError:
                raise LoaderError(
                    STALL, f"no result from the loader within {timeout:.1f}s (run aborted)", stats
                ) from None
            except ValueError as e:
                raise LoaderError("internal", f"unreadable reply from the loader: {e}", stats) from e
            except OSError as e:
                raise self._gone(f"control connection failed ({e})") from e

    def stop(self) -> int | None:
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
