"""The socket-wait set: where each message's server-side time goes — unread in the socket's receive
queue (queue wait) or in the handler (the read that took the request → the send that answered it) —
per window and per connection, from probes/sockwait/sockwait.bpf.c.

    with SockWaitProbes() as sw:               # compiles once (~1 s)
        sw.target(backend_pid)                 # the tree's sockets; clears everything
        a = sw.snapshot(); ...; b = sw.snapshot()
        d = sockwait_delta(a, b)               # SockWaitDelta: d.wait.p50_us, d.handler.p99_us,
                                               # d.per_conn[i].wait_mean_us, d.overflow, ...

Lifecycle as CountingProbes: compiled once, target(pid) re-targets (clears every socket and counter;
nothing of the previous target is counted after it returns), attach()/detach() hook the three socket
programs on and off in ~1 ms without recompiling (figures stand still while detached). Attach before
the loader connects to time every connection from its first byte: data that arrived while detached
has no known arrival (its reads count in `unmeasured["unknown"]`).

Method (tracepoints only; exactness):
- Sockets are learned when a connection is established on a port the tree listens on
  (`sock:inet_sock_set_state`; listening ports are read from /proc at target(), and listen() calls
  of the tree add more), and from the tree's own reads/writes (`sock:sock_recv_length` /
  `sock_send_length`, filtered by the shared tree filter). `sock:sk_data_ready` (the sender's context
  on loopback) is filtered by socket. TCP sequence numbers are read from the socket (`rcv_nxt` at
  each arrival, `copied_seq` after each read), at offsets taken from the running kernel's BTF
  (/sys/kernel/btf/vmlinux): a per-socket FIFO of (arrival time, end seq) gives the arrival of the
  oldest byte each read took.
- **Queue wait** (per read): read time − arrival of the oldest byte the read took. Exact, messages
  queued behind others included, as long as no more than `fifo` separate arrivals are unread on a
  socket at once; beyond that the newest entry absorbs later arrivals and those waits are upper
  bounds (counted: `overflow["fifo_merged"]`, `exact` is False). Reads of bytes that were already
  queued when the socket was first seen (or the set attached) are not measured (`unmeasured`).
  Both ends are tracepoint times: the wait includes the receive syscall's own copy (~1–3 µs), and
  "arrival" is when the kernel queued the bytes on the socket (bytes that come while the reader
  holds the socket lock are queued when it lets go: a few µs late).
- **Handler time** (per answered request): the first send after a read − that read (the last read
  before the send: for a request split over reads, the one that completed it). Sends that follow
  no read (a second write of the same answer) are not timed. The send's time is taken after it
  returned (on loopback that includes delivering to the peer, a few µs).
- **Server time** (per answered request): that send − the arrival of the request's first byte =
  its queue wait + handler (+ reads in between); never longer than the client's round trip.
- Only the kernel queue is seen: a server that reads many requests at once and serves them from a
  user-space buffer (asyncio streams, framing=stream) shows its per-message wait in handler time.
- The gate (`gate()`): given the loader's counted window before it opens, the programs count only the reads
  and answers inside it, by their time here, and the figures read at once are its start: the delta from that
  base (each later snapshot's `gate`) is the window's exactly, its maxima too, however late the marks' reads.
- Max is exact when gated or when the two snapshots are consecutive (`max_exact`), else the top of the highest
  non-empty bucket. Percentiles are bucket midpoints (16 log-linear sub-buckets per power of two:
  ≤ 3.2% error).

- Per connection (`per_conn`): reads, bytes, mean wait, answers, mean handler time, and, for data
  still unread at the window's end, its age (`unread_age_us`: the wait of a connection that was
  never read; gated, for a connection first read after the window's end, as that read found it: one the
  loader's stop frees is still there). Keyed by the socket, with the peer port (`dport`: the loader's local port).
- A snapshot takes ~0.5 ms (100 sockets); events during it may land on either side of it.

Bounds: at most `max_sockets` sockets (LRU hash; evictions counted: `overflow["evicted"]`), a FIFO
of `fifo` arrivals per socket, three 512-slot histograms (1 ns … 34 s; longer waits land in the top
slot).
"""

from __future__ import annotations

import functools
import math
import struct
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import tree
from ..base import _TP, LoadedProgram, ProbeError, lookup_batch
from ..base import prefetch as base_prefetch
from ..btf import BTF_PATH, Btf

NSLOTS = 512
SUB_BITS = 4
SUB = 1 << SUB_BITS
KINDS = ("wait", "handler", "server")
_COUNTERS = ("learned", "reused", "fifo_merged", "unknown", "unmatched", "insert_failed")
_CONN_FIELDS = ("reads", "bytes", "waits", "wait_ns", "answers", "handler_ns")
WH = 36  # per-connection log2 wait buckets: [2^i, 2^(i+1)) ns, the last one open (≥ 2^35 ns, 34 s)
BATCH = 1024


# ---------------------------------------------------------------------------------------------
# Field offsets of the running kernel (BTF, probes/btf.py): BCC compiles against Debian's 6.1 headers, whose
# struct sock / struct tcp_sock layouts differ from the running kernel's.

@functools.cache
def kernel_offsets(path: str = BTF_PATH) -> dict[str, int]:
    """Byte offsets, from a `struct sock *`, of the fields the set reads, from the running kernel's
    BTF. Raises ProbeError when BTF is missing or the layout is unexpected."""
    try:
        btf = Btf(path)
        off = {
            "OFF_FAMILY": btf.offset("sock", "__sk_common.skc_family", 2),
            "OFF_PROTOCOL": btf.offset("sock", "sk_protocol", 2),
            "OFF_PORTPAIR": btf.offset("sock", "__sk_common.skc_portpair", 4),
            "OFF_COPIED_SEQ": btf.offset("tcp_sock", "copied_seq", 4),
            "OFF_RCV_NXT": btf.offset("tcp_sock", "rcv_nxt", 4),
        }
        # tcp_sock starts with the struct sock it extends (inet_conn.icsk_inet.sk)
        if btf.offset("tcp_sock", "inet_conn.icsk_inet.sk.__sk_common.skc_family", 2) != off["OFF_FAMILY"]:
            raise ValueError("struct tcp_sock does not start with its struct sock")
    except OSError as e:
        raise ProbeError(f"the socket-wait probes need the kernel's BTF ({path}): {e}") from e
    except (KeyError, ValueError, struct.error) as e:
        raise ProbeError(f"unexpected socket layout in the kernel's BTF ({path}): {e}") from e
    return off


# ---------------------------------------------------------------------------------------------
# Histograms: slot i < SUB holds value i (ns); above, 16 linear sub-buckets per power of two.

def slot_bounds(i: int) -> tuple[int, int]:
    """[low, high) in ns of histogram slot i (the last slot is open-ended: high is its nominal top)."""
    if i < SUB:
        return i, i + 1
    e, sub = i // SUB + SUB_BITS - 1, i % SUB
    return (SUB + sub) << (e - SUB_BITS), (SUB + sub + 1) << (e - SUB_BITS)


def slot_of(v: int) -> int:
    """The slot of value v (ns), as the BPF side computes it."""
    if v < SUB:
        return v
    e = v.bit_length() - 1
    return min((e - SUB_BITS + 1) * SUB + ((v >> (e - SUB_BITS)) & (SUB - 1)), NSLOTS - 1)


@dataclass
class WaitDist:
    """One distribution over a window, in µs (None when count is 0)."""

    count: int
    p50_us: float | None
    p99_us: float | None
    max_us: float | None
    mean_us: float | None
    max_exact: bool = True  # False: max is the top of the highest non-empty bucket (an upper bound)

    @classmethod
    def from_hist(cls, hist: list[int], sum_ns: int, max_ns: int | None) -> WaitDist:
        n = sum(hist)
        if n <= 0:
            return cls(0, None, None, None, None, max_ns is not None)
        top = max(i for i, c in enumerate(hist) if c)
        mx = max_ns / 1e3 if max_ns is not None else slot_bounds(top)[1] / 1e3
        p50, p99 = hist_quantile_us(hist, 0.50), hist_quantile_us(hist, 0.99)
        return cls(n, min(p50, mx), min(p99, mx), mx, sum_ns / n / 1e3, max_ns is not None)


def hist_quantile_us(hist: list[int], q: float) -> float:
    """The q-quantile (µs) of a histogram of slot_of(ns) slots: its slot's middle (within the slot's width);
    a non-empty histogram."""
    rank, seen = max(1, math.ceil(q * sum(hist))), 0
    for i, c in enumerate(hist):
        seen += c
        if seen >= rank:
            lo, hi = slot_bounds(i)
            return (lo + hi - 1) / 2 / 1e3 if i >= SUB else lo / 1e3
    return slot_bounds(NSLOTS - 1)[0] / 1e3


def log2_quantile_us(counts, q: float) -> float | None:
    """The q-quantile of values counted in log2 buckets ([2^i, 2^(i+1)) ns), in µs: the bucket holding
    rank q·n, interpolated geometrically within it (so within a factor 2 of the truth, and exact for
    a bucket's edges); None when empty."""
    n = sum(counts)
    if n <= 0:
        return None
    rank, seen = n * q, 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            return 2 ** (i + (rank - seen) / c) / 1e3
        seen += c
    return None


# A connection's own queue wait, the per-connection starvation figure: the 90th percentile of its
# reads' waits, not the median. Each time a starved connection gets the loop, its K messages in
# flight have all waited the gap; while it keeps the loop, its reads find data a few handler times
# old. Its median shows the gap only if its turns are shorter than about 2K reads: one longer turn
# in the window and the median is fast, though its data waited most of the window (here 2 windows
# of 14 at asyncio_sock ×8 gave median ratios of ×1.4 and ×1.1 between tenths served ×114 and ×20
# apart; CI once ×1.09). The slowest tenth of its reads shows the gap while its turns average under
# about 10K reads; the most-served hold the loop for thousands of reads, so theirs stays at handler
# times (the same 14 windows: ×2,982 to ×25,551).
CONN_WAIT_QUANTILE = 0.9


@dataclass
class ConnWait:
    """One server socket (connection) over a window."""

    sock: int          # kernel address of the socket (an id for the window, not stable across runs)
    tgid: int          # the server process that read or wrote it first (0: not yet touched by the tree)
    lport: int         # server's port
    dport: int         # peer's port: the loader connection's local port
    reads: int         # reads that returned data
    bytes: int         # bytes read
    waits: int         # reads whose queue wait was measured
    wait_mean_us: float | None
    wait_p50_us: float | None  # median of its waits (log2 buckets, within a factor 2)
    wait_p90_us: float | None  # its own wait: CONN_WAIT_QUANTILE of its waits (log2 buckets, within a factor 2)
    answers: int       # timed answers (first send after a read)
    handler_mean_us: float | None
    unread_age_us: float | None = None  # at the window's end: age of the oldest unread arrival, if any


@dataclass
class Totals:
    """The set's figures over its requests as the maps held them (totals()): its distributions and counters as
    one map read copied them, and each connection's; what a counted mark reads before anything else. Summed by
    snapshot()."""

    seq: int       # snapshot number since target(): the max slot these close
    per_cpu: Any   # the stats map's struct on each CPU
    # (sock, ports) -> (tgid, *_CONN_FIELDS, wait buckets (WH counts), oldest unread ns)
    socks: dict[tuple[int, int], tuple]
    present: int   # sockets of this target in the map
    now_ns: int    # CLOCK_MONOTONIC ns when the sockets were read


@dataclass
class Gate:
    """The loader's counted window as the set was gated on it (SockWaitProbes.gate): [lo_ns, hi_ns) of
    CLOCK_MONOTONIC, the snapshot read as the gate was set (before the window opened: the window's start) and
    the window's maxima (per KINDS, None: none recorded)."""

    lo_ns: int
    hi_ns: int
    base: SockWaitSnapshot
    max_ns: list[int | None] = field(default_factory=list)


@dataclass
class SockWaitSnapshot:
    """Cumulative figures since the last target(); `t` is time.monotonic() when read."""

    t: float
    pid: int
    seq: int                         # snapshot number since target(): max_prev covers (seq-1, seq]
    hist: list[list[int]]            # per KINDS: NSLOTS counts
    sum_ns: list[int]                # per KINDS
    max_prev_ns: list[int | None]    # per KINDS: max since the previous snapshot (None: none recorded)
    counters: dict[str, int]         # _COUNTERS
    present: int                     # sockets of this target in the map now
    # (sock, ports) -> (tgid, *_CONN_FIELDS, wait buckets (WH counts), oldest unread ns)
    socks: dict[tuple[int, int], tuple] = field(default_factory=dict)
    now_ns: int = 0                  # CLOCK_MONOTONIC ns when the sockets were read
    gate: Gate | None = None         # the gate the figures were counted under since its base (None: none)

    @property
    def evicted(self) -> int:
        """Sockets of this target dropped from the full LRU hash so far (the counters are read before
        the sockets: a socket learned in between is present but not yet counted, hence the clamp)."""
        return max(0, self.counters["learned"] - self.counters["reused"] - self.present)


@dataclass
class SockWaitDelta:
    """The window between two snapshots."""

    window_s: float
    wait: WaitDist       # per read: read time − arrival of the oldest byte it took
    handler: WaitDist    # per answered request: first send after a read − that read
    server: WaitDist     # per answered request: that send − arrival of the request's first byte
    per_conn: list[ConnWait]
    sockets: int     # sockets that read or wrote in the window
    overflow: dict[str, int]    # evicted (sockets dropped from the LRU hash), fifo_merged, insert_failed
    unmeasured: dict[str, int]  # reads not measured: unknown (queued before seen), unmatched
    reused: int = 0  # socket addresses reused by a new connection (the old one's figures dropped)

    @property
    def exact(self) -> bool:
        """Every measured wait is exact (no FIFO merges) and no socket was evicted."""
        return not self.overflow.get("fifo_merged") and not self.overflow.get("evicted")

    def conn_wait_means_us(self) -> list[float]:
        """Per-connection mean queue wait (connections with a measured wait), in µs."""
        return [c.wait_mean_us for c in self.per_conn if c.wait_mean_us is not None]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["exact"] = self.exact
        return d


def sockwait_delta(a: SockWaitSnapshot, b: SockWaitSnapshot) -> SockWaitDelta:
    """The window from `a` to `b`; from a gate's base (b.gate.base) to `b`, the gated window (its maxima exact)."""
    if a.pid != b.pid:
        raise ValueError(f"snapshots of different targets ({a.pid} vs {b.pid})")
    if b.seq <= a.seq:
        raise ValueError("snapshots out of order")
    gate = b.gate if b.gate is not None and b.gate.base is a else None  # the gated window, from its base
    consecutive = b.seq == a.seq + 1
    dists = {}
    for k, kind in enumerate(KINDS):
        hist = [y - x for x, y in zip(a.hist[k], b.hist[k])]
        # exact max when gated or when b's "since the previous snapshot" is this window; else the histogram's bound
        mx = gate.max_ns[k] if gate else b.max_prev_ns[k] if consecutive else None
        dists[kind] = WaitDist.from_hist(hist, b.sum_ns[k] - a.sum_ns[k], mx)
    # the window's end for the unread data's age: the gate's (a socket read after it: the oldest byte that read
    # took, totals()), or when b read the sockets
    end_ns = gate.hi_ns if gate else b.now_ns
    window_s = (gate.hi_ns - gate.lo_ns) / 1e9 if gate else b.t - a.t
    per_conn = []
    for key, vb in b.socks.items():
        va = a.socks.get(key)
        tgid, *cum, wh, unread_at = vb
        unread_at = unread_at if unread_at and unread_at < end_ns else 0
        d = dict(zip(_CONN_FIELDS, cum if va is None else [x - y for x, y in zip(cum, va[1:-2])]))
        if va is not None:
            wh = [x - y for x, y in zip(wh, va[-2])]
        if not d["reads"] and not d["answers"] and not unread_at:
            continue
        sock, ports = key
        per_conn.append(ConnWait(
            sock=sock, tgid=tgid, lport=ports >> 16,
            dport=int.from_bytes((ports & 0xFFFF).to_bytes(2, "little"), "big"),
            reads=d["reads"], bytes=d["bytes"], waits=d["waits"],
            wait_mean_us=d["wait_ns"] / d["waits"] / 1e3 if d["waits"] else None, wait_p50_us=log2_quantile_us(wh, 0.5),
            wait_p90_us=log2_quantile_us(wh, CONN_WAIT_QUANTILE),
            answers=d["answers"], handler_mean_us=d["handler_ns"] / d["answers"] / 1e3 if d["answers"] else None,
            unread_age_us=(end_ns - unread_at) / 1e3 if unread_at else None))
    c = {k: b.counters[k] - a.counters[k] for k in _COUNTERS}
    evicted = max(0, b.evicted - a.evicted)
    return SockWaitDelta(
        window_s=window_s, wait=dists["wait"], handler=dists["handler"], server=dists["server"],
        per_conn=per_conn, sockets=sum(1 for x in per_conn if x.reads or x.answers),
        overflow={"evicted": evicted, "fifo_merged": c["fifo_merged"], "insert_failed": c["insert_failed"]},
        unmeasured={"unknown": c["unknown"], "unmatched": c["unmatched"]}, reused=c["reused"])


SOURCE = "sockwait/sockwait.bpf.c"
MAX_SOCKETS = 65536  # sockets known per target (an LRU)
FIFO = 16            # unread arrivals tracked per socket


def set_cflags(track_children: bool = True, max_sockets: int = MAX_SOCKETS, fifo: int = FIFO,
               cflags: tuple[str, ...] = ()) -> list[str]:
    """The flags SockWaitProbes(track_children, max_sockets, fifo, cflags=cflags) compiles with (the kernel's
    socket offsets from its BTF: raises ProbeError without them)."""
    return [f"-DTRACK_CHILDREN={int(track_children)}", f"-DMAX_SOCKETS={max_sockets}", f"-DFIFO={fifo}",
            f"-DNSLOTS={NSLOTS}", f"-DWH={WH}", *(f"-D{k}={v}" for k, v in sorted(kernel_offsets().items())),
            *cflags]


def prefetch(cflags: tuple[str, ...] = ()) -> None:
    """Begin compiling the set check_available() compiles (SockWaitProbes(), with a subclass's `cflags`), in
    base.prefetch's worker. Best effort: without BTF offsets, nothing is begun (the set's load says why)."""
    try:
        flags = set_cflags(cflags=cflags)
    except ProbeError:
        return
    base_prefetch(SOURCE, flags)


class SockWaitProbes(LoadedProgram):
    """Compile once, then target() a backend tree and snapshot() around each window.

    `attached=False`: start detached. `max_sockets`: LRU capacity (sockets known per target);
    `fifo`: unread arrivals tracked per socket (a power of two) before waits become bounds; `cflags`:
    a subclass's own (probes/breakdown/ compiles the set with -DBREAKDOWN=1).
    """

    resident = (_TP,)  # the tree's fork/exit bookkeeping: attached from load to close
    # cfg.ring_opcode_off: the breakdown's io_kiocb.opcode offset (BreakdownProbes); unused by this set alone.
    _ring_opcode_off = -1

    def __init__(self, track_children: bool = True, max_sockets: int = MAX_SOCKETS, fifo: int = FIFO,
                 attached: bool = True, cflags: tuple[str, ...] = ()) -> None:
        if fifo < 2 or fifo & (fifo - 1) or fifo > 64:
            raise ValueError("fifo must be a power of two in 2..64")
        if max_sockets < 16:
            raise ValueError("max_sockets must be at least 16")
        self.track_children, self.max_sockets, self.fifo = track_children, max_sockets, fifo
        self.pid = 0
        self._gen = 0
        self._seq = 0
        self._attach_ns = 0
        self._lo_ns = self._hi_ns = self._gate_no = 0  # the gate (gate()); hi 0: none
        self._gate_base: SockWaitSnapshot | None = None
        self._load(SOURCE, set_cflags(track_children, max_sockets, fifo, cflags), attached=False)
        try:
            b = self.bpf
            assert b is not None  # _load() succeeded
            self._cfg, self._children, self._socks = b[b"cfg"], b[b"children"], b[b"socks"]
            self._lports, self._bits = b[b"lports"], b[b"known_bits"]
            self._stats, self._window = b[b"stats"], b[b"window"]
            self._set_window(active=0)
            self._reset(0)  # a set taken over from park() may hold an earlier target
            if attached:
                self.attach()
        except BaseException:
            self.close()
            raise

    # -- window and config ------------------------------------------------------------------------

    def _set_window(self, active: int) -> None:
        w = self._window.Leaf()
        w.attach_ns, w.active, w.seq = self._attach_ns, active, self._seq
        w.lo, w.hi, w.gate = self._lo_ns, self._hi_ns, self._gate_no
        self._window[self._window.Key(0)] = w
        self._active = active

    def _set_gate(self, lo_ns: int, hi_ns: int) -> None:
        """Count only inside [lo_ns, hi_ns) from now on (0, 0: everything); forgets the previous gate's base."""
        self._lo_ns, self._hi_ns = lo_ns, hi_ns
        self._gate_no += 1
        self._gate_base = None
        self._set_window(self._active)

    def gate(self, t_start: float, t_stop: float) -> bool:
        """Count only what happens in [t_start, t_stop) (CLOCK_MONOTONIC s: the loader's window, announced with its
        `connected`): the programs drop the reads and answers outside it (sockwait.bpf.c, the gate), and the
        figures read now, before the window opens, are its start (each later snapshot's `gate`). False, and no
        gate, when the read did not end before t_start (a warm-up too short to set it in): the first mark's read is
        the start then, as without a gate."""
        lo, hi = round(t_start * 1e9), round(t_stop * 1e9)
        self._set_gate(lo, hi)
        base = SockWaitProbes.snapshot(self, SockWaitProbes.totals(self))  # the set's own (a subclass's differ)
        self._gate_read_more()
        if time.monotonic_ns() >= lo:
            self._set_gate(0, 0)
            return False
        self._gate_base = base
        return True

    def _gate_read_more(self) -> None:
        """A subclass's own figures, read as the gate is set (its window's start; cleared by _set_gate)."""

    def attach(self) -> None:
        """Start recording (idempotent, ~1 ms, no recompile). Raises ProbeError."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        if not self.attached:
            self._attach_ns = time.monotonic_ns()  # sockets' FIFOs from before are stale
            self._set_window(active=1)
        super().attach()

    def detach(self) -> None:
        """Stop recording (idempotent); figures keep their values."""
        super().detach()
        if self.bpf is not None:
            self._set_window(active=0)

    def _reset(self, pid: int, also: tuple[int, ...] = ()) -> None:
        cfg = self._cfg

        def write_cfg(n: int, tgid: int = pid) -> None:
            leaf = cfg.Leaf()
            leaf.tgid, leaf.nchildren, leaf.gen, leaf.ring_opcode_off = tgid, n, self._gen, self._ring_opcode_off
            cfg[cfg.Key(0)] = leaf

        write_cfg(0, tgid=0)  # tgid 0: nothing recorded while resetting
        self._gen += 1
        self._seq = 1
        self._set_gate(0, 0)  # no gate until a window is announced (writes the window)
        self._lports.clear()
        _delete_all(self._socks)
        self._bits[self._bits.Key(0)] = self._bits.Leaf()
        self._stats[self._stats.Key(0)] = self._stats.Leaf()
        self._reset_more(pid)
        kids = tree.seed(self._children, pid, self.track_children, also)
        for port in (listening_ports([pid, *kids]) if pid else ()):
            self._lports[self._lports.Key(port)] = self._lports.Leaf(1)
        write_cfg(len(kids))
        tree.catch_late(self._children, pid, kids, self.track_children, write_cfg, also)
        self.pid = pid

    def _reset_more(self, pid: int) -> None:
        """A subclass's own maps, zeroed with the set's at each target(pid) (nothing is recorded meanwhile)."""

    def target(self, pid: int, also: tuple[int, ...] = ()) -> None:
        """Watch `pid` and (track_children) its descendants, and the processes `also` with theirs (a cgroup's
        members); forgets every socket and zeroes every figure (sockets of the previous target are never
        counted again). Attached or not."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        self._reset(pid, also)

    # -- reading ----------------------------------------------------------------------------------

    def totals(self) -> Totals:
        """The figures over every request now (cumulative since target(); each distribution's max since the
        previous read), then each connection's: one per-CPU map read and a batched walk of the sockets (~0.5 ms
        for a hundred), back to back so that the connections' answers add up to the distributions' (summing
        them in Python waits for snapshot())."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        prev = self._seq
        self._seq += 1
        self._set_window(self._active)  # BPF records maxima into the other slot from now on
        per_cpu = self._stats.getvalue(self._stats.Key(0))
        socks: dict[tuple[int, int], tuple] = {}
        present = 0
        now_ns = time.monotonic_ns()
        fifo_mask = self.fifo - 1
        for key, v in _items(self._socks):
            if v.gen != self._gen:
                continue
            present += 1
            if not v.tcp:
                continue
            # the oldest byte unread at the gate's end as the first read after it found it (sockwait.bpf.c's
            # unread_at_hi), else the FIFO's head now: a connection starved through the window and served after its
            # end (the loader's stop frees the loop) keeps its unread age instead of dropping out of per_conn
            gated_end = self._hi_ns and v.hi_gate == self._gate_no
            unread = v.unread_at_hi if gated_end else v.at[v.head & fifo_mask] if v.head != v.tail else 0
            socks[(key, v.ports)] = (v.tgid, *(getattr(v, f) for f in _CONN_FIELDS), tuple(v.wh), unread)
        return Totals(seq=prev, per_cpu=per_cpu, socks=socks, present=present, now_ns=now_ns)

    def snapshot(self, totals: Totals | None = None) -> SockWaitSnapshot:
        """Cumulative figures since target(), plus each distribution's max since the previous snapshot; `totals`:
        those read a moment ago (totals(): a counted mark reads them first), else read now."""
        tot = totals or self.totals()
        mx: list[int | None] = [None] * len(KINDS)
        hist = [[0] * NSLOTS for _ in KINDS]
        sums = [0] * len(KINDS)
        counters = dict.fromkeys(_COUNTERS, 0)
        p = tot.seq & 1
        gmax: list[int | None] = [None] * len(KINDS)
        for s in tot.per_cpu:  # one struct per CPU
            h = s.hist
            for k in range(len(KINDS)):
                row, base = hist[k], k * NSLOTS
                for i in range(NSLOTS):
                    v = h[base + i]
                    if v:
                        row[i] += v
                sums[k] += s.sum_ns[k]
                if s.tag[p] == tot.seq:
                    v = s.max[p * len(KINDS) + k]
                    if v and (mx[k] is None or v > mx[k]):
                        mx[k] = v
                if self._gate_base is not None and s.gtag == self._gate_no:
                    v = s.gmax[k]
                    if v and (gmax[k] is None or v > gmax[k]):
                        gmax[k] = v
            for name in _COUNTERS:
                counters[name] += getattr(s, name)
        gate_base = self._gate_base
        gate = (Gate(self._lo_ns, self._hi_ns, gate_base, gmax)
                if gate_base is not None and gate_base.seq < tot.seq else None)
        return SockWaitSnapshot(t=time.monotonic(), pid=self.pid, seq=tot.seq, hist=hist, sum_ns=sums,
                                max_prev_ns=mx, counters=counters, present=tot.present, socks=tot.socks,
                                now_ns=tot.now_ns, gate=gate)

    def read(self, since: SockWaitSnapshot) -> tuple[SockWaitDelta, SockWaitSnapshot]:
        """The window from `since` to now, and the snapshot that ends it."""
        b = self.snapshot()
        return sockwait_delta(since, b), b


def listening_ports(pids) -> set[int]:
    """TCP ports the processes listen on (their new connections are learned at setup)."""
    import psutil

    ports: set[int] = set()
    for pid in pids:
        try:
            p = psutil.Process(pid)
            conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
        except psutil.Error:
            continue
        ports.update(c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr)
    return ports


def _batch(table, delete: bool):
    """(key, leaf) of every entry, batch lookups (base.lookup_batch) in chunks of BATCH."""
    keys, leaves = (table.Key * BATCH)(), (table.Leaf * BATCH)()
    position = None
    while True:
        n, position, done = lookup_batch(table, keys, leaves, position, delete, what="the socket map")
        for i in range(n):
            yield keys[i].value if hasattr(keys[i], "value") else keys[i], leaves[i]
        if done:
            return


def _items(table):
    return _batch(table, delete=False)


def _delete_all(table) -> None:
    for _ in _batch(table, delete=True):
        pass
    for k in list(table.keys()):  # entries added while deleting (their gen is stale anyway)
        try:
            del table[k]
        except KeyError:
            pass


# ---------------------------------------------------------------------------------------------
# Run-time checks and the set's own cost on this host (`netprof run --sockwait`).

_checked: dict[type, str | None] = {}


def check_available(probes: type[SockWaitProbes] | None = None) -> str | None:
    """None if the socket-wait set (or `probes`, a set built on it: the breakdown's) can run here, else
    one line: what is missing. Compiles, attaches and detaches the set once per process (BTF offsets, the
    sock tracepoints, the verifier), and parks it for the run's own `probes(attached=False)` to take over."""
    from ..base import NO_PROBES, prerequisites

    cls = probes or SockWaitProbes
    if cls not in _checked:
        why = prerequisites()
        if why is None:
            try:
                cls().park()
            except ProbeError as e:
                why = str(e)
        # the generic hint ("or run with --no-probes") does not apply: the caller names its own fix
        _checked[cls] = why.replace(f" ({NO_PROBES})", "").replace(f", {NO_PROBES}", "") if why else None
    return _checked[cls]


COST_MESSAGES = 20_000
COST_REPEATS = 3
# One process echoes one byte over a loopback TCP connection to itself: per message two sends, two
# sk_data_ready and two receives — both ends of one exchange (a server's and its client's).
_COST_CHILD = (
    "import resource, socket, sys\n"
    "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(1)\n"
    "c = socket.create_connection(l.getsockname()); s, _ = l.accept()\n"
    "for x in (c, s): x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
    "sys.stdin.readline()\n"  # wait until the set targets us (or another process)
    "cpu = lambda r: r.ru_utime + r.ru_stime\n"
    "t0 = cpu(resource.getrusage(resource.RUSAGE_SELF))\n"
    f"for _ in range({COST_MESSAGES}):\n"
    "    c.send(b'x'); s.recv(1); s.send(b'y'); c.recv(1)\n"
    "print(cpu(resource.getrusage(resource.RUSAGE_SELF)) - t0, flush=True)\n")


def _cost_once(sw: SockWaitProbes | None, watched: bool) -> float:
    """CPU seconds per echoed message of one child run (the set re-targeted first)."""
    from ..selfcost import child_cpu

    return child_cpu(sw, _COST_CHILD, watched, COST_MESSAGES)


def cached_cost(sw: SockWaitProbes, name: str) -> dict:
    """measure_cost(sw), or the figure measured earlier in this boot for the same set (`name`: sockwait, or
    breakdown, whose programs cost more): a property of the host as booted, like the counting set's
    (selfcost.cached_cost), so a run spends its ~3 s once per boot. measure_cost leaves the set detached and
    untargeted; a figure from the cache never touches it."""
    from ..selfcost import cached_cost as cached

    return cached(f"{name}-cost", {"set": name, "messages": COST_MESSAGES, "repeats": COST_REPEATS},
                  lambda: measure_cost(sw))


def measure_cost(sw: SockWaitProbes) -> dict:
    """What the set costs per loopback message on this host (~2 s): CPU ns per echoed message with
    the set detached (`bare_ns`), attached and watching both ends (`added_watched_ns`: a watched
    server pays about half, its client the other half's bystander share) and attached but watching
    another process (`added_bystander_ns`: what every other socket user pays). Medians of a few
    runs; leaves the set detached and untargeted."""
    import subprocess

    from ..selfcost import three_medians

    try:
        bare, watched, bystander = three_medians(sw, lambda w: _cost_once(sw, w), COST_REPEATS)
    except (OSError, ValueError, subprocess.SubprocessError, ProbeError) as e:  # a figure less, not a lost run
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        sw.detach()
        sw.target(0)
    return {"bare_ns": 1e9 * bare, "added_watched_ns": 1e9 * (watched - bare),
            "added_bystander_ns": 1e9 * (bystander - bare), "messages": COST_MESSAGES, "repeats": COST_REPEATS}
