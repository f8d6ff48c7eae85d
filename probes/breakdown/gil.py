"""Where a CPython process keeps its GIL: the address range of the interpreter's `_PyRuntime`, so that
the breakdown can tell a futex wait on the GIL from other lock waits.

User stacks stop in libc without frame pointers, and `take_gil` is a static function that Debian's
stripped python3 does not name; but `_PyRuntime` is an exported data symbol of every CPython (the
executable's or libpython's dynamic symbols), and the main interpreter's GIL lives inside it (3.11:
`_PyRuntime.ceval.gil`; 3.12+: in the main interpreter, which is embedded in `_PyRuntime`). A thread
waiting for the GIL blocks in futex on a word of that mutex or condition variable, so a futex address
inside [_PyRuntime, _PyRuntime + its size) is the GIL or one of the runtime's few other locks (the
interpreter list, the switch condition), which are not contended under load.

The symbol is read with pyelftools from the mapped file itself (/proc/PID/map_files/…: the file the
process runs, whatever its path says now), and shifted by the mapping's load bias (PIE executables,
libpython3.x.so).
"""

from __future__ import annotations

import os
import re

_MAPS = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(\S.*)$")
SYMBOL = "_PyRuntime"


def _candidates(pid: int) -> dict[str, tuple[int, int, int]]:
    """Mapped files that may hold CPython (the executable, libpython): path -> (start, end, offset) of
    their lowest mapping."""
    found: dict[str, tuple[int, int, int]] = {}
    exe = os.readlink(f"/proc/{pid}/exe")
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            m = _MAPS.match(line.rstrip("\n"))
            if not m:
                continue
            path = m.group(4)
            if path != exe and not os.path.basename(path).startswith("libpython"):
                continue
            start, end, off = int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)
            if path not in found or start < found[path][0]:
                found[path] = (start, end, off)
    return found


# (device, inode, size, mtime) of a mapped file -> what _read_symbol found in it: a run's cells start the same
# interpreter again and again, and reading its symbol table costs ~0.1 s each time (pyelftools parses every
# symbol); a file changed in place has another key.
_symbols: dict[tuple[int, int, int, int], tuple[int, int, int | None] | None] = {}


def _read_symbol(f) -> tuple[int, int, int | None] | None:
    """(st_value, st_size, the lowest PT_LOAD's vaddr − offset) of `_PyRuntime` in the ELF file `f`, the last
    None for a fixed-address executable; or None."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(f)
    sym = None
    for name in (".dynsym", ".symtab"):
        section = elf.get_section_by_name(name)
        if section is not None and hasattr(section, "get_symbol_by_name"):
            syms = section.get_symbol_by_name(SYMBOL)
            if syms:
                sym = syms[0]
                break
    if sym is None or not sym["st_size"]:
        return None
    first = None
    if elf["e_type"] == "ET_DYN":  # PIE or a shared library: loaded at the lowest mapping
        first = min(s["p_vaddr"] - s["p_offset"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD")
    return sym["st_value"], sym["st_size"], first


def runtime_range(pid: int) -> tuple[int, int] | None:
    """[lo, hi) of `_PyRuntime` in process `pid`, or None (not CPython, symbol missing, unreadable)."""
    from elftools.common.exceptions import ELFError

    try:
        maps = _candidates(pid)
    except OSError:
        return None
    for start, end, off in maps.values():
        try:
            with open(f"/proc/{pid}/map_files/{start:x}-{end:x}", "rb") as f:
                st = os.fstat(f.fileno())
                key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if key not in _symbols:
                    _symbols[key] = _read_symbol(f)
                found = _symbols[key]
        except (OSError, ELFError, ValueError, KeyError):
            continue
        if found is None:
            continue
        value, size, first = found
        bias = start - off - first if first is not None else 0
        lo = bias + value
        return lo, lo + size
    return None
