"""What a backend asks of the kernel per message: epoll registration churned around every read, memory
mapped and unmapped per message, futex waits and CPU migrations of contending threads, and the work it hands
to the kernel through io_uring instead of a syscall."""

from __future__ import annotations

from netprof.profiler.analysis.rules.sources import package_line, source_line
from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import MEMORY_SYSCALLS, READ_SYSCALLS, of, r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, rule
from netprof.profiler.model.stats import num, ring_of, syscalls_of


@rule("readiness_churn", consolidate=True, plots=("syscalls",))
def readiness_churn(ctx: Context) -> list[Anomaly]:
    """epoll_ctl ≳ 1.5 per message: the socket is registered and unregistered around every read."""
    found = []
    for _, r in ctx.cells.iterrows():
        per = syscalls_of(r)
        ec = (per or {}).get("epoll_ctl", 0.0)
        if per is None or ec < ctx.t.readiness_churn_epoll_ctl:
            continue
        total = sum(per.values())
        reads = of(per, READ_SYSCALLS)
        ev = {"epoll_ctl per message": r2(ec), "epoll_ctl per read": r2(ec / reads) if reads else None,
              "syscalls per message (all)": r2(total),
              "share of syscalls that are epoll_ctl": f"{100 * ec / total:.0f}%"}
        if reads and reads < ctx.t.batched_reads:
            text = _paused_reading(r, ec, reads, total, ev)
        elif r.get("family") == "twisted":
            text = _writes_wait(r, ec, total, ev)
        else:
            per_read = f" ({ec / reads:.1f} per read)" if reads else ""
            text = (f"{where(r)} calls epoll_ctl {ec:.1f} times {units.per_unit(r.get('protocol'))}{per_read}, "
                    f"{100 * ec / total:.0f}% of all its syscalls: it changes the socket's epoll registration around "
                    "reads — register before a read that must wait, unregister after (`add_reader` → wait → "
                    "`remove_reader`, the `sock_recv` model). A loop that keeps each socket registered for its whole "
                    "life, reading as data comes and writing at once, pays this once per connection. ")
        if reads and ec / reads >= ctx.t.poll_handle_epoll_ctl and "uvloop" in f"{r['backend']} {r.get('family')}":
            text += UVLOOP_POLL_HANDLE
            ev["each read, call by call (uvloop on libuv)"] = UVLOOP_CALLS
            ev["ioctl per message (FIONBIO from uv_poll_init)"] = r2(per.get("ioctl"))
            ev["source"] = _uvloop_source()
        text += _calm_peer(ctx, r, ev)
        ev["stacks"] = ctx.stacks(r, ("epoll_ctl",))
        found.append(Anomaly.at(r, "readiness_churn", "warning", f"epoll_ctl churn: {where(r)}", text, ev))
    return found


def _writes_wait(r, ec: float, total: float, ev: dict) -> str:
    """Twisted's churn is around writes, not reads: `FileDescriptor.write` buffers the data and registers for
    writability (`startWriting`); the reactor's `doWrite` sends it and unregisters (`stopWriting`) once the buffer is
    empty, so strict ping-pong pays two epoll_ctl per message however its reads go (bench/reports/modern)."""
    ev["source"] = source_line("twisted.internet.abstract:FileDescriptor.write", "self.startWriting()")
    each = units.per_unit(r.get("protocol"))
    return (f"{where(r)} calls epoll_ctl {ec:.1f} times {each}, {100 * ec / total:.0f}% of "
            "all its syscalls: its writes wait for the socket to be writable. Twisted's `transport.write` buffers the "
            "data and registers the socket for writing (`startWriting`, an epoll_ctl); the reactor's `doWrite` sends "
            "it on the next turn and unregisters once the buffer is empty (`stopWriting`, another). A loop that "
            "writes at once and registers for writability only when the socket is full pays neither. ")


def _paused_reading(r, ec: float, reads: float, total: float, ev: dict) -> str:
    """The churn of a protocol that stops reading while it answers a pipelined message: the registration changes
    per message, though one read takes several (so 'per read' would say nothing)."""
    one, many = units.exchange(r.get("protocol")), units.exchanges(r.get("protocol"))
    each = units.per_unit(r.get("protocol"))
    text = (f"{where(r)} calls epoll_ctl {ec:.1f} times {each}, {100 * ec / total:.0f}% of all its syscalls, though "
            f"it reads only {reads:.2f} times {each}, several pipelined {many} a read: "
            f"it changes the socket's epoll registration around each {one}, not each read — it stops reading "
            f"while a {one} is answered and starts again after the response (`transport.pause_reading()` → "
            "`resume_reading()`, which asyncio's selector loop does with `remove_reader` and `add_reader`, an "
            "epoll_ctl each). ")
    if r.get("family") == "uvicorn":
        # uvicorn's protocols queue a pipelined request and pause reading until the response to the one before
        # is complete (protocols/http/flow_control.py); both of its HTTP parsers do it.
        impl = "httptools_impl.py" if "httptools" in str(r["backend"]) else "h11_impl.py"
        ev["source"] = package_line("uvicorn", f"protocols/http/{impl}", "self.flow.pause_reading()")
        text += (f"uvicorn does this for every pipelined {one}: it queues the next {one} and pauses reading until "
                 "the response to the one before is complete. ")
    return text


# What a loop's io_uring submissions of an operation are, in the finding's words. libuv (src/unix/linux.c) queues
# its epoll_ctl calls for the ring when the kernel has one: a watcher started (ADD/MOD) and the DEL of a socket whose
# watcher was stopped when its next event arrives; only a handle closing (uv__platform_invalidate_fd) calls DEL.
RING_WHY = {
    "epoll_ctl": ("libuv queues its epoll interest changes for the ring: ADD or MOD when it starts watching a socket, "
                  "DEL when an event comes for one it stopped watching (a closing handle's DEL stays a syscall)"),
    "recv": "its receives are ring requests, not recvfrom calls",
    "send": "its sends are ring requests, not sendto calls",
    "recvmsg": "its receives are ring requests, not recvmsg calls",
    "sendmsg": "its sends are ring requests, not sendmsg calls",
    "poll_add": "it waits for readiness with ring polls, not epoll_wait",
}


@rule("ring_work", consolidate=True, plots=("syscalls",))
def ring_work(ctx: Context) -> list[Anomaly]:
    """io_uring operations are a material share of the kernel operations per message: strace, perf trace and
    syscall counters do not see them (the counting set does: ring_per_msg)."""
    found = []
    for _, r in ctx.cells.iterrows():
        per, ring = syscalls_of(r), ring_of(r)
        if per is None or not ring:
            continue
        total_ring, total_sys = sum(ring.values()), sum(per.values())
        share = total_ring / (total_ring + total_sys)
        if share < ctx.t.ring_work_share:
            continue
        op = max(ring, key=lambda k: ring[k])
        n, also = ring[op], per.get(op, 0.0)
        of = f" of its {n + also:.1f} {op} operations" if also else f" {op} operations"
        why = RING_WHY.get(op, f"it submits {op} requests to a ring instead of calling the kernel")
        rest = _ops({k: v for k, v in ring.items() if k != op})
        each = units.per_unit(r.get("protocol"))
        text = (f"{where(r)} hands {n:.2f}{of} {each} to io_uring: {why}. Syscall counts alone (strace, perf "
                f"trace, the bcc syscall tools) would show {100 * share:.0f}% fewer kernel operations {each} "
                f"({total_sys:.2f} syscalls + {total_ring:.2f} ring operations). "
                + (f"Its other ring operations {each}: {rest}. " if rest else "")
                + _paused_on_the_ring(ctx, r, op, n, per)
                + "`--io-uring on,off` runs it again with io_uring_setup denied, as a container's seccomp profile "
                "may: a loop that falls back does the same work with syscalls.")
        ev = {"ring operations per message": _ops(ring),
              "syscalls per message": r2(total_sys), "kernel operations per message": r2(total_sys + total_ring),
              "share through io_uring": f"{100 * share:.0f}%",
              "io_uring threads' CPU per message (µs)": r2(num(r, "ring_cpu_us_per_msg"))}
        found.append(Anomaly.at(r, "ring_work", "info", f"io_uring work: {where(r)}", text, ev))
    return found


def _paused_on_the_ring(ctx: Context, r, op: str, n: float, per: dict) -> str:
    """uvicorn_httptools at ×8 (bench/reports/http): 2 ring epoll_ctl per request and 0.99 reads, the pause and resume
    of reading around each pipelined request that uvicorn_h11 pays as two epoll_ctl syscalls (readiness_churn)."""
    reads = of(per, READ_SYSCALLS)
    if op != "epoll_ctl" or n < ctx.t.readiness_churn_epoll_ctl or not (r.get("pipeline") or 1) > 1:
        return ""
    one = units.exchange(r.get("protocol"))
    return (f"{n:.2f} {units.per_unit(r.get('protocol'))} with {int(r['pipeline'])} in flight ({reads:.2f} reads) is "
            f"a stop and a restart of reading around each pipelined {one} (`pause_reading()` → `resume_reading()`): "
            "the stopped watcher's DEL and the restart's ADD both go through the ring. ")


def _ops(ring: dict) -> str:
    """'epoll_ctl 0.90, recv 0.10': operations per message, most first."""
    return ", ".join(f"{k} {units.per_message(v)}" for k, v in sorted(ring.items(), key=lambda kv: -kv[1]))


# Traced on uvloop 0.23 (bpftrace, epoll_ctl op and return value per call, one connection): the
# sequence below repeats for every message; the registration that waits goes through io_uring.
UVLOOP_POLL_HANDLE = (
    "On uvloop the count is 6 per read, not 2: `loop.sock_recv` never tries the read first, it registers a reader "
    "at once (`_add_reader`), and the reader is a libuv poll handle made for this one read and closed after it "
    "(`_remove_reader` → `poll._close()`). Each read therefore costs: `uv_poll_init` checking that the socket can "
    "be polled — epoll_ctl ADD then DEL (and an ioctl FIONBIO, the 1 ioctl per message); `uv_poll_start` first "
    "stopping the fresh handle — DEL, fails with ENOENT; the registration that actually waits, submitted through "
    "io_uring (not an epoll_ctl call); after the read `uv_poll_stop` — DEL; uvloop's own DEL right after it "
    "(its workaround for uvloop issue 61) — ENOENT; and `uv_close` stopping the handle again — DEL, ENOENT. "
    "So 1 ADD and 5 DEL per message, 3 of them failing: pure overhead of building a handle per read. uvloop's "
    "streams and protocols (`uvloop`, `uvloop_proto`) keep one libuv handle per connection and make none of these "
    "calls per message. ")
UVLOOP_CALLS = ("ADD + DEL (uv_poll_init checks the fd), DEL → ENOENT (uv_poll_start), [ADD via io_uring: the wait], "
                "DEL (uv_poll_stop), DEL → ENOENT (uvloop's own, issue 61), DEL → ENOENT (uv_close)")


def _uvloop_source() -> str | None:
    """Where uvloop makes a poll handle per read and closes it (its .pyx sources, as installed)."""
    return "; ".join(filter(None, (
        package_line("uvloop", "loop.pyx", "self._add_reader(sock, handle)", after="async def sock_recv("),
        package_line("uvloop", "loop.pyx", "poll._close()", after="cdef _remove_reader"),
        package_line("uvloop", "handles/poll.pyx", "system.EPOLL_CTL_DEL")))) or None


def _calm_peer(ctx: Context, r, ev: dict) -> str:
    """The fastest other backend in the same cell that does not churn: what the registration costs."""
    peers = ctx.same_cell(r, backend=None)
    calm = [p for _, p in peers.iterrows() if p["backend"] != r["backend"] and (ps := syscalls_of(p)) is not None
            and ps.get("epoll_ctl", 0.0) < ctx.t.readiness_churn_epoll_ctl]
    if not calm:
        return ""
    best = max(calm, key=lambda p: p["mps_mean"])
    best_per = syscalls_of(best)
    assert best_per is not None  # every cell in `calm` has syscall counts
    bec = best_per.get("epoll_ctl", 0.0)
    rate, each = units.rate_unit(r.get("protocol")), units.per_unit(r.get("protocol"))
    ev[f"{best['backend']} (fastest backend here without the churn)"] = (
        f"{units.count(best['mps_mean'])} {rate}, {bec:.2f} epoll_ctl {each}")
    return f"Here {best['backend']} makes {bec:.2f} epoll_ctl {each} at {units.rate(best['mps_mean'])} {rate}."


@rule("mmap_churn", consolidate=True, plots=("syscalls",))
def mmap_churn(ctx: Context) -> list[Anomaly]:
    """mmap + munmap + mremap + brk ≳ 0.5 per message: the allocator goes to the kernel per message."""
    found = []
    for _, r in ctx.cells.iterrows():
        per = syscalls_of(r) or {}
        mem = {k: per.get(k, 0.0) for k in MEMORY_SYSCALLS}
        total = sum(mem.values())
        if total < ctx.t.mmap_churn:
            continue
        ev = {f"{k} per message": r2(v) for k, v in mem.items() if v}
        ev["minor page faults per message"] = r2(num(r, "faults.minor_per_msg"))
        stacks = ctx.stacks(r, MEMORY_SYSCALLS)
        ev["stacks"] = stacks
        one = units.exchange(r.get("protocol"))
        text = (f"{where(r)} makes {total:.1f} memory-mapping syscalls per {one} "
                f"({' + '.join(f'{v:.2f} {k}' for k, v in mem.items() if v)}): the allocator asks the kernel for "
                f"memory and gives it back for every {one}, and each fresh mapping costs page faults too. ")
        if all(mem[k] >= ctx.t.mmap_triple for k in ("mmap", "mremap", "munmap")):
            ev["source"] = _receive_buffer_source()
            text += RECEIVE_BUFFER
        if stacks:
            frames = " → ".join(reversed(stacks[0]["frames"][:4]))
            text += f"Top {stacks[0]['syscall']} stack: {frames}."
        else:
            text += "Run with --stacks to see which code path allocates."
        found.append(Anomaly.at(r, "mmap_churn", "warning", f"Memory-mapping churn: {where(r)}", text, ev))
    return found


RECEIVE_BUFFER = (  # the mmap + mremap + munmap triple, read from asyncio's source and measured
    "The mmap + mremap + munmap triple is the signature of a receive buffer larger than glibc's mmap "
    "threshold (128 KiB) that is shrunk and then freed: asyncio's socket transport reads with "
    "`sock.recv(self.max_size)` where `max_size = 256 * 1024`, so each read allocates a 256 KiB bytes "
    "object (mmap), shrinks it to the bytes actually received (mremap) and frees it (munmap). "
    "This is a fresh process's cost: glibc raises its mmap threshold the first time a large "
    "mmapped block is freed (a connection closing can do it), after which these buffers come from "
    "the heap with no syscall — measured on http_asyncio, the same process served 38k requests/s "
    "on its first 100 connections and 137k–143k on the next 100 (bench/RESULTS.md). netprof starts a "
    "fresh backend per cell; a long-running server may be past it (or fix the threshold with "
    "MALLOC_MMAP_THRESHOLD_). ")


def _receive_buffer_source() -> str | None:
    """Where asyncio's socket transport sizes its receive buffer and reads with it."""
    return "; ".join(filter(None, (
        source_line("asyncio.selector_events:_SelectorTransport", "max_size ="),
        source_line("asyncio.selector_events:_SelectorSocketTransport._read_ready__data_received",
                    "recv(self.max_size)")))) or None


@rule("lock_contention", consolidate=True, plots=("syscalls", "cpu"))
def lock_contention(ctx: Context) -> list[Anomaly]:
    """futex ≳ 1 per message, or many involuntary switches / migrations: threads fight for a lock
    (the GIL) or for the CPU. Compares pinned and unpinned cells when the data has both."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        fx = (syscalls_of(r) or {}).get("futex", 0.0)
        inv, mig = num(r, "ctx.involuntary_per_msg"), num(r, "ctx.migrations_per_msg")
        each = units.per_unit(r.get("protocol"))
        signs = []
        if fx >= t.futex_per_msg:
            signs.append(f"{fx:.1f} futex calls {each}")
        if inv is not None and inv >= t.involuntary_per_msg:
            signs.append(f"{inv:.2f} involuntary context switches {each}")
        if mig is not None and mig >= t.migrations_per_msg:
            signs.append(f"{mig:.2f} CPU migrations {each}")
        if not signs:
            continue
        ev = {"futex per message": r2(fx), "involuntary switches per message": r2(inv),
              "voluntary switches per message": r2(num(r, "ctx.voluntary_per_msg")),
              "migrations per message": r2(mig, 3), "pinned": bool(r.get("pinned"))}
        text = (f"{where(r)} shows {', '.join(signs)}. Each futex call is a wait or a wake on a contended lock — for "
                "Python threads, usually the GIL being handed between threads — and each involuntary switch or "
                "migration throws away a warm cache. ")
        text += _pinned_contrast(ctx, r, fx, ev)
        ev["stacks"] = ctx.stacks(r, ("futex",))
        sev = "critical" if fx >= t.futex_critical else "warning"
        found.append(Anomaly.at(r, "lock_contention", sev, f"Lock/CPU contention: {where(r)}", text, ev))
    return found


def _pinned_contrast(ctx: Context, r, fx: float, ev: dict) -> str:
    """The same cell pinned (or not) when the run has it, else what pinning did in network_ping_test."""
    other = ctx.same_cell(r, pinned=not bool(r.get("pinned")))
    if not other.empty:
        o = other.iloc[0]
        ofx = (syscalls_of(o) or {}).get("futex", 0.0)
        label = "not pinned" if r.get("pinned") else "pinned"
        rate, each = units.rate_unit(r.get("protocol")), units.per_unit(r.get("protocol"))
        ev[f"same cell {label}"] = f"{units.count(o['mps_mean'])} {rate}, {ofx:.2f} futex {each}"
        ev["this cell"] = f"{units.count(r['mps_mean'])} {rate}"
        return (f"The same cell {label}: {ofx:.2f} futex {each} at {units.rate(o['mps_mean'])} {rate} "
                f"(here {fx:.2f} at {units.rate(r['mps_mean'])}). ")
    if not r.get("pinned"):
        return ("This run was not pinned to one CPU; network_ping_test saw 15 futex per message (its 64-byte pings) "
                "drop to 0.01 once the backend was pinned (taskset). Re-run pinned (the default) to compare. ")
    return ""
