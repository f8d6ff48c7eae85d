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
"""

from __future__ import annotations

import os
import re
import struct
import subprocess

STATE_SYMBOLS = ("perf_jit_map_state", "perf_map_jit_state")  # 3.13 name first
_WRITE_BASE, _WRITE_PTR = 32, 40  # offsets in glibc's x86-64 struct _IO_FILE
MAX_PENDING = 1 << 20


def dump_path(pid: int) -> str:
    return f"/tmp/jit-{pid}.dump"


def flush_pending(pid: int) -> int:
    """Append the backend's unflushed jitdump bytes to its dump file; returns how many (0 = none).

    Raises OSError/ValueError when the process or layout is not what we expect.
    """
    path = dump_path(pid)
    if not os.path.exists(path):
        return 0
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
        fd = os.open(path, os.O_WRONLY)
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
    out = subprocess.run(["nm", "--defined-only", lib], capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] in STATE_SYMBOLS:
            return int(fields[0], 16)
    return None
