"""What every probe set shares: prerequisites, errors, loading a `*.bpf.c` file, syscall names."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

from netprof.profiler.core.errors import NetprofError

HERE = Path(__file__).resolve().parent
TRACEFS = "/sys/kernel/tracing"
# x86_64 syscall numbers are below 512; the last slot collects anything out of range.
NR_SLOTS = 512
OTHER_SLOT = NR_SLOTS - 1
NO_PROBES = "or run with --no-probes"


class ProbeError(NetprofError, RuntimeError):
    """Probes cannot be loaded or attached; the message says how to fix it. Exit code 3: before a run
    `check_available` turns a missing capability into exit 2, so one after it is unexpected, and the
    run keeps its finished cells (runner.execute)."""


def lookup_batch(table, keys, leaves, position, delete: bool = False, what: str = "a BPF map"):
    """One BPF_MAP_LOOKUP(_AND_DELETE)_BATCH of up to len(keys) entries of `table` from `position` (None: its
    first) into the ctypes arrays `keys` and `leaves`: (how many it read, the position after them, whether it
    reached the map's end). Raises ProbeError naming `what`."""
    from bcc.libbcc import lib

    fn = lib.bpf_lookup_and_delete_batch if delete else lib.bpf_lookup_batch
    count, after = ctypes.c_uint32(len(keys)), ctypes.c_uint32(0)
    res = fn(table.map_fd, None if position is None else ctypes.byref(position), ctypes.byref(after),
             ctypes.byref(keys), ctypes.byref(leaves), ctypes.byref(count))
    err = ctypes.get_errno()
    if res != 0 and err != errno.ENOENT:  # ENOENT: the map's last entry was read
        raise ProbeError(f"reading {what} failed: {os.strerror(err)}; {NO_PROBES}")
    return count.value, after, res != 0


def read_array(table) -> Any:
    """Every entry of a BPF array map, in one batch lookup, as a numpy uint64 array [entry, the leaf's words] (a
    per-CPU map's leaf is its struct on each CPU in turn: reshape to [entry, cpu, field]). Not bcc's
    items_lookup_batch, which makes a ctypes object per entry: the counting set's 512 slots are read at each of a
    window's marks, where netprof's CPU is time the loader waits on a two-core host (2.8 ms with a lookup per
    slot, summed in Python, 0.23 ms so: bench/mark_reads.py, under load)."""
    import numpy as np

    n = table.max_entries
    keys, leaves = (table.Key * n)(), (table.Leaf * n)()
    got, _, _ = lookup_batch(table, keys, leaves, None, what="a BPF array")
    if got != n:
        raise ProbeError(f"reading a BPF array gave {got} of its {n} entries; {NO_PROBES}")
    return np.frombuffer(leaves, dtype=np.uint64).reshape(n, -1)


def _tracefs_ready() -> bool:
    return os.path.isdir(os.path.join(TRACEFS, "events", "sched"))


def prerequisites() -> str | None:
    if os.geteuid() != 0:
        return f"BPF probes need root (or CAP_BPF+CAP_PERFMON): run as root, {NO_PROBES}"
    try:
        import bcc  # noqa: F401
    except Exception as e:  # ImportError, or libbcc.so missing
        return (f"BCC's `bcc` module is not importable ({e}): run `make setup` (Debian python3-bpfcc) "
                f"and use .venv/bin/python, {NO_PROBES}")
    build = f"/lib/modules/{os.uname().release}/build/include"
    if not os.path.isdir(build):
        return f"no kernel headers for BCC at {build}: run `make setup` (links Debian's headers), {NO_PROBES}"
    return None


def ensure_tracefs() -> None:
    """Mount tracefs when it is missing (BCC's tracepoints and perf's need it); root only."""
    if _tracefs_ready() or os.path.isdir("/sys/kernel/debug/tracing/events/sched"):
        return
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True, text=True)
    if r.returncode != 0 or not _tracefs_ready():
        raise ProbeError(f"tracefs is not mounted and mounting it failed ({r.stderr.strip()}): "
                         f"`mount -t tracefs nodev {TRACEFS}` as root, {NO_PROBES}")


# BCC's program name prefixes (RAW_TRACEPOINT_PROBE, TRACEPOINT_PROBE) -> how each attaches.
_RAW, _TP = b"raw_tracepoint__", b"tracepoint__"


class LoadedProgram:
    """Lifecycle shared by the probe sets. `self.bpf` is compiled and its programs loaded (verified)
    once; attach() and detach() hook them to their tracepoints and off again (no recompile; maps keep
    their contents). Everything is released on close(), on leaving a `with` block (also on errors
    and Ctrl-C) and, last resort, when the object is collected."""

    bpf: Any | None = None  # BCC's BPF object (untyped); None when closed
    # Programs that detach() leaves attached (until close): name prefixes, e.g. (b"tracepoint__",). They run
    # outside every window (in headline time, for every process on the machine): rare events only. A hook
    # that fires per operation is a RAW_TRACEPOINT_PROBE, which detaches in milliseconds.
    resident: tuple[bytes, ...] = ()

    def _load(self, src: str | Path, cflags: list[str], attached: bool = True) -> None:
        self.bpf = load(src, cflags)
        try:
            self._attach(resident=True)  # from load to close
            if attached:
                self.attach()
        except BaseException:
            self.close()
            raise

    def _hooks(self, resident: bool | None = None):
        """(program, tracepoint, attached now?) of the set's programs: all, or only the resident
        ones (True), or only the others (False)."""
        bpf = self.bpf
        assert bpf is not None  # callers check that the set is open
        for name in bpf.netprof_programs:
            if resident is not None and name.startswith(self.resident) != resident:
                continue
            if name.startswith(_RAW):
                tp = name[len(_RAW):]
                yield name, tp, tp in bpf.raw_tracepoint_fds
            else:
                tp = name[len(_TP):].replace(b"__", b":", 1)
                yield name, tp, tp in bpf.tracepoint_fds

    @property
    def attached(self) -> bool:
        """The programs detach() detaches are attached."""
        return self.bpf is not None and any(on for _, _, on in self._hooks(resident=False))

    def attach(self) -> None:
        """Attach every program of the set (those already attached stay). Raises ProbeError."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        self._attach()

    def _attach(self, resident: bool | None = None) -> None:
        try:
            assert self.bpf is not None  # callers check that the set is open
            for name, tp, on in list(self._hooks(resident)):
                if not on and name.startswith(_RAW):
                    self.bpf.attach_raw_tracepoint(tp=tp, fn_name=name)
                elif not on:
                    self.bpf.attach_tracepoint(tp=tp, fn_name=name)
        except Exception as e:
            self._detach()
            raise ProbeError(f"cannot attach the probes: {e} ({NO_PROBES})") from e

    def detach(self) -> None:
        """Detach the programs (but the resident ones); the compiled set and its maps stay.
        No-op when detached or closed."""
        self._detach(resident=False)

    def _detach(self, resident: bool | None = None, keep: tuple[bytes, ...] = ()) -> None:
        """Detach the programs (all, the resident ones or the others), but those on the tracepoints `keep`."""
        if self.bpf is None:
            return
        for name, tp, on in list(self._hooks(resident)):
            if tp in keep:
                continue
            if on and name.startswith(_RAW):
                self.bpf.detach_raw_tracepoint(tp)
            elif on:
                self.bpf.detach_tracepoint(tp)

    def park(self) -> None:
        """Detach and hand the compiled set to the next load() of the same source and cflags in this
        process (counting.check_available() compiles the run's set this way only once). Resident programs stay
        attached (they record nothing untargeted), which spares their slow detach and re-attach."""
        self.detach()
        bpf, self.bpf = self.bpf, None
        if bpf is not None:
            old = _SPARE.pop(bpf.netprof_key, None)
            if old is not None:
                old.cleanup()
            _SPARE[bpf.netprof_key] = bpf

    def close(self) -> None:
        bpf, self.bpf = self.bpf, None
        if bpf is not None:
            bpf.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: BCC's own atexit cleanup has run
            pass


# Compiled, detached sets waiting for their owner, by (source path, cflags): see LoadedProgram.park.
_SPARE: dict[tuple[str, tuple[str, ...]], Any] = {}
# A header next to the file or under probes/ (an instrument's folder: "breakdown/breakdown.bpf.h").
_INCLUDE = re.compile(r'^#include "((?:[\w-]+/)?[\w.-]+)"\s*$', re.M)


def bpf_source(path: Path) -> str:
    """The text of a `*.bpf.c` file with its `#include "x.bpf.h"` lines (headers next to it or in
    probes/) pasted in: BCC rewrites map calls in the main source only. `#line` keeps compiler
    messages pointing at the real file and line."""
    text = path.read_text()

    def paste(m: re.Match) -> str:
        name = m.group(1)
        header = next((d / name for d in (path.parent, HERE) if (d / name).is_file()), None)
        if header is None:
            return m.group(0)  # a system header: clang finds it
        line = text.count("\n", 0, m.start()) + 2
        return f'#line 1 "{name}"\n{header.read_text()}\n#line {line} "{path.name}"'

    return _INCLUDE.sub(paste, text)


@functools.cache
def _bpf_class():
    """BCC's BPF class without its auto-attach: loading verifies every program, attaching is ours."""
    from bcc import BPF
    from bcc.libbcc import lib

    class Loaded(BPF):
        def _trace_autoload(self):  # BCC calls this at the end of BPF.__init__
            names = [lib.bpf_function_name(self.module, i) for i in range(lib.bpf_num_functions(self.module))]
            self.netprof_programs = [n for n in names if n.startswith((_RAW, _TP))]
            for n in self.netprof_programs:
                self.load_func(n, BPF.RAW_TRACEPOINT if n.startswith(_RAW) else BPF.TRACEPOINT)

    return Loaded


def _key(src: str | Path, cflags: list[str]) -> tuple[str, tuple[str, ...]]:
    return str(HERE / src), (f"-DNR_SLOTS={NR_SLOTS}", *cflags)


# BCC's compile is not safe in two threads at once: clang keeps static state (iovisor/bcc#4500). One at a time,
# whoever compiles: the prefetch worker or a load() that found nothing begun for its key.
_COMPILE = threading.Lock()
_CLONE_FS = 0x200  # <linux/sched.h>: unshare the working directory, root and umask


def _own_cwd() -> None:
    """Give the calling thread a working directory of its own (os.unshare is Python 3.12's, hence ctypes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_FS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_FS): {os.strerror(err)}")


def _compile(text: bytes, cflags: list[str]):
    """BCC's compile, in a thread with a working directory of its own: clang runs chdir'ed into the kernel headers'
    directory (bcc's loader.cc, DirStack), and a chdir moves every thread that shares it: `netprof watch -o out`
    wrote its files under /usr/src/linux-headers-*/out while its set compiled ahead beside the CLI."""
    bpf_class, got = _bpf_class(), {}

    def work() -> None:
        try:
            _own_cwd()
        except OSError:  # a sandbox that forbids it: compile anyway, sharing the directory as BCC always did
            pass
        try:
            got["bpf"] = bpf_class(text=text, cflags=cflags)
        except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
            got["error"] = e

    with _COMPILE:
        thread = threading.Thread(target=work, name=f"{threading.current_thread().name}/compile")
        thread.start()
        thread.join()
    if "error" in got:
        raise got["error"]
    return got["bpf"]


class _Ahead:
    """A compile begun ahead: `done` is set when it ended, `bpf` holds the object when it succeeded."""

    def __init__(self, text: bytes) -> None:
        self.text, self.bpf = text, None
        self.started, self.done = threading.Event(), threading.Event()


# Compiles begun ahead (prefetch), by the key load() would use, in the order they were asked for: one worker
# thread compiles them one after the other (the GIL released in BCC's C++), beside the command's imports.
_AHEAD: dict[tuple[str, tuple[str, ...]], _Ahead] = {}
_QUEUE: list[tuple[tuple[str, tuple[str, ...]], _Ahead]] = []
_WORKER: list[threading.Thread] = []  # the running worker, if any (a list: no global statement)
_QUEUE_LOCK = threading.Lock()


def _work() -> None:
    while True:
        with _QUEUE_LOCK:
            if not _QUEUE:
                _WORKER.clear()
                return
            key, ahead = _QUEUE.pop(0)
        try:
            ahead.started.set()
            ahead.bpf = _compile(ahead.text, list(key[1]))
        except Exception:  # noqa: BLE001 (load() compiles again and reports it)
            pass
        finally:
            ahead.done.set()


def prefetch(src: str | Path, cflags: list[str]) -> None:
    """Begin compiling what load(src, cflags) will ask for, in a worker thread: BCC's compile is ~0.35 s (the
    counting set) to ~1.5 s (the breakdown's) of C++ with the GIL released, so it runs beside the command's
    imports (profiler/entry.py). Sets asked for one after the other are compiled in that order, one at a time.
    Best effort: a compile that fails here is done again by load(), which says why. Not a daemon: the
    interpreter waits for it rather than unloading LLVM under it."""
    key = _key(src, cflags)
    if key in _AHEAD or key in _SPARE or prerequisites():
        return
    _bpf_class()  # imports bcc here, not in the worker: an import holds the GIL
    ahead = _Ahead(bpf_source(Path(key[0])).encode())
    _AHEAD[key] = ahead
    with _QUEUE_LOCK:
        _QUEUE.append((key, ahead))
        started = not _WORKER
        if started:
            _WORKER.append(threading.Thread(target=_work, name="netprof-bpf-prefetch"))
            _WORKER[0].start()
    if started:
        # Until the worker is in BCC's C++ (a few lines of Python away), the caller's imports would hold the GIL
        # and delay it by their length: wait for it first.
        ahead.started.wait(timeout=1.0)


def prefetch_worker() -> threading.Thread | None:
    """The thread compiling what was begun ahead, while it runs."""
    with _QUEUE_LOCK:
        return _WORKER[0] if _WORKER else None


def settle_ahead() -> None:
    """Wait until nothing begun ahead is still compiling: called before the first measured load, so that a
    compile guessed from the arguments and not taken (the run never loaded that set) does not run beside it."""
    worker = prefetch_worker()
    if worker is not None:
        worker.join()


class Shown(Exception):  # noqa: N818 (not an error: the answer of load() under show())
    """What load() would have compiled: the file, BCC's cflags, and the text BCC is given (headers pasted)."""

    def __init__(self, path: Path, cflags: list[str], text: str) -> None:
        super().__init__(path.name)
        self.path, self.cflags, self.text = path, cflags, text


_SHOWING = threading.local()


@contextlib.contextmanager
def show():
    """Within it, load() raises Shown instead of compiling: a set's constructor, run with a run's flags, tells
    exactly which program and cflags it would load (`netprof probes --show NAME`, as bcc's tools' --ebpf)."""
    _SHOWING.on = True
    try:
        yield
    finally:
        _SHOWING.on = False


def load(src: str | Path, cflags: list[str]):
    """Compile probes/<src> (or the file at path `src`) and load its programs, none attached
    (LoadedProgram.attach does that). Raises ProbeError (Shown under show())."""
    key = _key(src, cflags)
    path, flags = Path(key[0]), list(key[1])
    if getattr(_SHOWING, "on", False):
        raise Shown(path, flags, bpf_source(path))
    why = prerequisites()
    if why:
        raise ProbeError(why)
    ensure_tracefs()
    bpf = _SPARE.pop(key, None)
    if bpf is not None:
        return bpf
    ahead = _AHEAD.pop(key, None)
    if ahead is not None:
        ahead.done.wait()
        if ahead.bpf is not None:
            ahead.bpf.netprof_key = key
            return ahead.bpf
    try:
        bpf = _compile(bpf_source(path).encode(), flags)
    except Exception as e:
        raise ProbeError(f"cannot load {path.name}: {str(e).splitlines()[0] if str(e) else type(e).__name__} "
                         f"(kernel headers usable by BCC? run `make setup`; {NO_PROBES})") from e
    bpf.netprof_key = key
    return bpf


_NAMES: dict[int, str] = {}


UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"


def _table() -> dict[int, str]:
    """The one syscall table: BCC's bcc.syscall (x86_64). Its table stops around Linux 5.x, so
    numbers it lacks (epoll_pwait2 = 441, io_uring_*, …) are filled from the system's
    asm/unistd_64.h (Debian linux-libc-dev) when that file is there."""
    if not _NAMES:
        from bcc.syscall import syscalls

        try:
            with open(UNISTD) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_"):
                        _NAMES[int(parts[2])] = parts[1][5:]
        except (OSError, ValueError):
            pass
        _NAMES.update({nr: raw.decode() for nr, raw in syscalls.items()})
    return _NAMES


def syscall_name(nr: int) -> str:
    """Name of an x86_64 syscall number; `other` for the overflow slot, `syscall_<nr>` if unknown."""
    if nr == OTHER_SLOT:
        return "other"
    return _table().get(nr, f"syscall_{nr}")


def syscall_number(name: str) -> int:
    for nr, n in _table().items():
        if n == name:
            return nr
    raise ValueError(f"unknown syscall {name!r} (names come from bcc.syscall)")
