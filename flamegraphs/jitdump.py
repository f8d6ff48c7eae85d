"""Complete CPython's perf jitdump before `perf inject --jit` reads it.

CPython 3.13's `-X perf_jit` writes /tmp/jit-PID.dump through a stdio FILE (4 KiB buffer) and does
not flush per entry. In a steady-state server no new code objects get compiled, so the records of
the hot functions — compiled last, when the first client arrived — can sit in that buffer for the
whole run (measured: the echo handler's record was missing, and 80% of DWARF samples ended in an
unnamed `[perf-PID.map]` frame with no unwind info past it).

Rather than stop the backend (gdb `call fflush(0)` can deadlock on the FILE lock it was stopped
holding), we read the pending bytes out of the process's memory: the FILE* lives in libpython's
static `perf_jit_map_state` (first field), and glibc's FILE keeps the unflushed bytes between
`_IO_write_base` and `_IO_write_ptr`. They are written at the file's end — exactly the bytes, at
exactly the offset, where the backend's own next flush will put them, so the file stays correct.
We append them to a private copy of the dump (see `copy_dump`): root never writes into /tmp.

Safety: CPython writes /tmp/perf-PID.map and /tmp/jit-PID.dump as the (root) backend, following a
link planted at that name. `procs.spawn` therefore creates both files itself (`reserve`, O_EXCL |
O_NOFOLLOW) between fork and exec, when the pid is known and before the interpreter opens them, and
refuses to start the backend when a file it did not create stands there. This module tells it which
(`spawn_reservation`, a spawn hook registered when it is imported: the run path imports it through
profiler/run/reap.py before its first child).
"""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import Mapping, Sequence

from netprof.profiler.core import procs

STATE_SYMBOLS = ("perf_jit_map_state", "perf_map_jit_state")  # 3.13 name first
_WRITE_BASE, _WRITE_PTR = 32, 40  # offsets in glibc's x86-64 struct _IO_FILE
MAX_PENDING = 1 << 20
# What CPython writes under its pid with -X perf (the map) and -X perf_jit (the jitdump).
PERF_MAP = "/tmp/perf-{pid}.map"
JIT_DUMP = "/tmp/jit-{pid}.dump"
_PERF_OPTIONS = {"perf", "perf_jit"}
_PERF_ENV = ("PYTHONPERFSUPPORT", "PYTHON_PERF_JIT_SUPPORT")


class UnsafeFileError(OSError):
    """A file at a name root is about to use was not created by us (one line, with the fix)."""


def dump_path(pid: int) -> str:
    return JIT_DUMP.format(pid=pid)


def perf_files(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The /tmp file templates a child writes under its pid: both when it is CPython started with
    `-X perf`/`-X perf_jit` (or their environment switches), else none."""
    args = list(argv)
    options = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "-X"} | {a[2:] for a in args if a.startswith("-X")}
    if options & _PERF_OPTIONS or any(env.get(name, "0") not in ("", "0") for name in _PERF_ENV):
        return (PERF_MAP, JIT_DUMP)
    return ()


def spawn_reservation(argv: Sequence[str], env: Mapping[str, str]) -> procs.Reservation | None:
    """procs' spawn hook: `reserve` the perf files of a child that writes them, before it execs."""
    files = perf_files(argv, env)  # looked up at call time: tests move the templates
    return (reserve, files) if files else None


procs.add_spawn_hook(spawn_reservation)


def _check_ours(path: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFileError(f"{path} is a symlink (planted for this pid?); remove it and run again")
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_nlink != 1:
        raise UnsafeFileError(f"{path} exists and is not a private file of root's (owner uid {st.st_uid}, "
                              f"{st.st_nlink} links); remove it and run again")


def reserve(path: str) -> None:
    """Create `path` empty for the child (0600, O_EXCL|O_NOFOLLOW); reuse a regular file of ours left
    by a killed run; raise UnsafeFileError for anything else (a link, someone else's file)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
        os.fchmod(fd, 0o600)
    os.close(fd)


def open_private(path: str, flags: int = os.O_RDONLY) -> int:
    """Open an existing file of ours without following a link; UnsafeFileError when it is not ours."""
    try:
        _check_ours(path, os.lstat(path))
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except UnsafeFileError:
        raise
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise UnsafeFileError(f"{path}: {e.strerror}; remove it and run again") from None
    try:
        _check_ours(path, os.fstat(fd))  # the name may have been swapped between lstat and open
    except UnsafeFileError:
        os.close(fd)
        raise
    return fd


def remove_reserved(pid: int) -> None:
    """Remove what `reserve` created for `pid` (and the backend filled); leaves others' files alone."""
    for template in (PERF_MAP, JIT_DUMP):
        path = template.format(pid=pid)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid in (0, os.geteuid()):
            try:
                os.unlink(path)
            except OSError:
                pass


def copy_dump(pid: int, directory: str) -> str | None:
    """Copy the backend's /tmp/jit-PID.dump into `directory` and complete it there (flush_pending);
    returns the copy's path, None when the backend wrote no dump. UnsafeFileError when the dump is not
    ours; OSError/ValueError when the process or layout is not what we expect."""
    try:
        src = open_private(dump_path(pid))
    except FileNotFoundError:
        return None
    copy = os.path.join(directory, os.path.basename(dump_path(pid)))
    try:
        for _ in range(5):  # the backend may flush while we copy: again until its size holds still
            size = os.fstat(src).st_size
            dst = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                done = 0
                while done < size:
                    sent = os.sendfile(dst, src, done, size - done)
                    if sent == 0:
                        break
                    done += sent
            finally:
                os.close(dst)
            try:
                flush_pending(pid, copy)
            except (FileNotFoundError, ProcessLookupError):
                # /proc/PID is gone: the backend exited (its cell ended first on a busy host), and exiting
                # flushed its buffer into the dump, which the next pass copies whole
                if os.fstat(src).st_size == size:
                    break
                continue
            if os.fstat(src).st_size == size:
                break
    finally:
        os.close(src)
    return copy


def flush_pending(pid: int, path: str) -> int:
    """Append the backend's unflushed jitdump bytes to `path` (a copy of its dump); returns how many
    (0 = none).

    Raises OSError/ValueError when the process or layout is not what we expect.
    """
    state_addr = _state_address(pid)
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for _ in range(5):  # the backend may flush while we read: retry until two reads agree
            (file_ptr,) = struct.unpack("<Q", os.pread(mem.fileno(), 8, state_addr))
            if file_ptr == 0:
                return 0
            base, ptr = struct.unpack("<QQ", os.pread(mem.fileno(), 16, file_ptr + _WRITE_BASE))
            if not (base and 0 <= ptr - base <= MAX_PENDING):
                raise ValueError(f"jitdump FILE of {pid} does not look like glibc's")
            data = os.pread(mem.fileno(), ptr - base, base) if ptr > base else b""
            if struct.unpack("<QQ", os.pread(mem.fileno(), 16, file_ptr + _WRITE_BASE)) == (base, ptr):
                break
        else:
            return 0
    if data:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.pwrite(fd, data, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    return len(data)


def _state_address(pid: int) -> int:
    """Runtime address of libpython's perf jit state (libpython*.so, or a static python binary)."""
    exe = os.path.realpath(f"/proc/{pid}/exe")
    bases: dict[str, int] = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[2] == "00000000":
                lib = parts[5]
                if re.search(r"/libpython3[\d.]*\.so", lib) or lib == exe:
                    bases.setdefault(lib, int(parts[0].split("-")[0], 16))
    for lib, base in bases.items():
        offset = _symbol_offset(lib)
        if offset is not None:
            # Non-PIE executables carry absolute addresses already.
            return offset if offset >= base else base + offset
    raise ValueError(f"no {STATE_SYMBOLS[0]} symbol in {list(bases) or exe}")


def _symbol_offset(lib: str) -> int | None:
    out = procs.run(["nm", "--defined-only", lib], timeout=30).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] in STATE_SYMBOLS:
            return int(fields[0], 16)
    return None
