"""Python frames at a syscall, for the evidence set (probes/stacks.bpf.c), on CPython 3.11.

Why this and not the native stack: these CPython builds and Debian's libc have no frame pointers, so
the kernel's user-stack walk names the libc wrapper and nothing above it, and even a DWARF unwind
(perf --call-graph dwarf) only reaches `_PyEval_EvalFrameDefault`: on 3.11 the Python frames live on
the interpreter's own frame stack, not on the C stack. So the BPF program walks that frame stack
itself, as py-spy does from outside: PyThreadState → _PyCFrame.current_frame → _PyInterpreterFrame
(f_code, previous) …, keeping the code-object pointers; names are read here, from /proc/PID/mem,
while the target still runs.

The struct offsets are not hard-coded: `layout()` measures them in this very interpreter (ctypes
addresses, read back through /proc/self/mem so a wrong guess cannot crash it). They hold for a target
of the same CPython minor version (release builds share the layout); for another version the
evidence keeps its native frames and `why_not()` says so (3.12+: the flamegraph round's mixed view,
`-X perf_jit`, shows Python frames joined to kernel frames).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import struct
import sys
import threading
from dataclasses import dataclass

DEPTH = 24  # innermost Python frames kept per event (the key holds 8 bytes per frame)
_PTR = struct.Struct("<Q")
_I32 = struct.Struct("<i")
_VERSION = re.compile(r"python(\d+)\.(\d+)")
_INTERPRETER_FILE = re.compile(r"^(lib)?python\d")  # python3.11, libpython3.11.so.1.0
_STDLIB = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+\.\d+)/")


@dataclass(frozen=True)
class Layout:
    """Byte offsets of the CPython structures the walk reads (see `layout()`)."""

    runtime_interp_head: int   # _PyRuntime.interpreters.head
    interp_threads_head: int   # PyInterpreterState.threads.head
    tstate_next: int           # PyThreadState.next
    tstate_native_id: int      # PyThreadState.native_thread_id
    tstate_cframe: int         # PyThreadState.cframe
    cframe_current: int        # _PyCFrame.current_frame
    frame_code: int            # _PyInterpreterFrame.f_code
    frame_previous: int        # _PyInterpreterFrame.previous
    code_filename: int
    code_qualname: int
    code_firstlineno: int
    str_length: int            # PyASCIIObject.length
    str_data: int              # where a compact ASCII string's bytes start
    type_name: int             # PyTypeObject.tp_name

    def cflags(self) -> list[str]:
        return [f"-DPY_DEPTH={DEPTH}", f"-DPY_TSTATE_CFRAME={self.tstate_cframe}",
                f"-DPY_CFRAME_CURRENT={self.cframe_current}", f"-DPY_FRAME_CODE={self.frame_code}",
                f"-DPY_FRAME_PREVIOUS={self.frame_previous}"]


class Mem:
    """Reads of another process's memory (or our own) through /proc/PID/mem: an unmapped address
    is an OSError, never a crash."""

    def __init__(self, pid: int | str) -> None:
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)

    def read(self, addr: int, n: int) -> bytes:
        if not 0x1000 <= addr < 1 << 47:  # null, small integers and kernel halves: not user memory
            raise OSError(f"bad address {addr:#x}")
        data = os.pread(self.fd, n, addr)
        if len(data) != n:
            raise OSError("short read")
        return data

    def ptr(self, addr: int) -> int:
        return _PTR.unpack(self.read(addr, 8))[0]

    def words(self, addr: int, n: int) -> list[int]:
        return [w for (w,) in _PTR.iter_unpack(self.read(addr, 8 * n))]

    def close(self) -> None:
        os.close(self.fd)


def _peek(mem: Mem, addr: int, n: int) -> bytes | None:
    try:
        return mem.read(addr, n)
    except OSError:
        return None


def _offsets_of(words: list[int], value: int) -> list[int]:
    return [8 * i for i, w in enumerate(words) if w == value]


class _Probe:
    def method(self):  # its code object has co_name != co_qualname: tells the two fields apart
        return sys._getframe()


@functools.lru_cache(maxsize=1)
def layout() -> Layout | None:
    """Offsets measured in this interpreter, or None where the walk does not apply (not CPython 3.11,
    whose frames hang off tstate->cframe, or a measurement that does not come out unambiguous)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return None
    try:
        return _measure()
    except (OSError, ValueError, AttributeError, LookupError):
        return None


def _one(found: list[int], what: str) -> int:
    if len(found) != 1:
        raise LookupError(f"{what}: {len(found)} candidates")
    return found[0]


def _measure() -> Layout:
    api = ctypes.pythonapi
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    tstate, interp = api.PyThreadState_Get(), api.PyInterpreterState_Get()
    runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
    mem = Mem("self")
    try:
        head = _offsets_of(mem.words(runtime, 64), interp)[0]  # interpreters.head precedes .main
        ts_words = mem.words(tstate, 64)
        native = _one(_offsets_of(ts_words, threading.get_native_id()), "native_thread_id")
        nxt = 8  # PyThreadState starts {prev, next, interp}: checked by the list walk below
        threads_head = None
        for off in range(0, 256, 8):
            t, hops = mem.ptr(interp + off), 0
            while t and hops < 256 and t != tstate:
                try:
                    t, hops = mem.ptr(t + nxt), hops + 1
                except OSError:
                    t = 0
            if t == tstate and hops < 256 and off != 0:
                threads_head = off
                break
        if threads_head is None:
            raise LookupError("threads.head")
        # The frame stack: f_frame, f_code and previous come from frame objects; cframe is found as
        # the word of tstate whose current_frame is this function's frame while it reads it.
        here = sys._getframe()
        code = here.f_code
        fo = mem.words(id(here), 8)
        f_frame = iframe = None
        for off in range(16, 64, 8):
            cand = fo[off // 8]
            try:
                if id(code) in mem.words(cand, 10):
                    f_frame, iframe = off, cand
                    break
            except OSError:
                continue
        if f_frame is None or iframe is None:
            raise LookupError("f_frame")
        fw = mem.words(iframe, 10)
        frame_code = _one(_offsets_of(fw, id(code)), "f_code")
        assert here.f_back is not None
        back = mem.ptr(id(here.f_back) + f_frame)
        frame_previous = _one(_offsets_of(fw, back), "previous")
        cframe = current = None
        for off in range(0, 256, 8):  # os.pread inline, not Mem.ptr: a Python call would push a frame
            (cand,) = _PTR.unpack(os.pread(mem.fd, 8, tstate + off))
            if not 0x1000 <= cand < 1 << 47:
                continue
            for c in (0, 8, 16):
                try:
                    if _PTR.unpack(os.pread(mem.fd, 8, cand + c))[0] == iframe:
                        cframe, current = off, c
                        break
                except (OSError, struct.error):
                    break
            if cframe is not None:
                break
        if cframe is None or current is None:
            raise LookupError("cframe")
        # Code objects and strings: two functions with different first lines pin co_firstlineno.
        a, b = _Probe.method.__code__, _measure.__code__
        aw = mem.words(id(a), 24)
        filename = _one(_offsets_of(aw, id(a.co_filename)), "co_filename")
        qualname = _one(_offsets_of(aw, id(a.co_qualname)), "co_qualname")
        ab, bb = mem.read(id(a), 192), mem.read(id(b), 192)
        lines = [o for o in range(16, 188, 4)
                 if _I32.unpack_from(ab, o)[0] == a.co_firstlineno and _I32.unpack_from(bb, o)[0] == b.co_firstlineno]
        firstlineno = _one(lines, "co_firstlineno")
        s = a.co_filename
        sb = mem.read(id(s), 96)
        data = sb.find(s.encode()[:32])
        length = _one([o for o in range(16, 48, 8) if _PTR.unpack_from(sb, o)[0] == len(s)], "length")
        tp_name = _one([o for o in range(16, 40, 8) if _peek(mem, mem.ptr(id(type(a)) + o), 5) == b"code\0"],
                       "tp_name")
        if data < 0:
            raise LookupError("string data")
        if abs(frame_code - frame_previous) > 56:  # stacks.bpf.c reads both with one 64-byte read at most
            raise LookupError("f_code and previous too far apart")
        return Layout(head, threads_head, nxt, native, cframe, current, frame_code, frame_previous,
                      filename, qualname, firstlineno, length, data, tp_name)
    finally:
        mem.close()


# ---- the target ---------------------------------------------------------------------------------

def _maps(pid: int) -> list[tuple[int, int, str]]:
    """(start, file offset, path) of the file-backed mappings of `pid`."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                out.append((int(parts[0].split("-")[0], 16), int(parts[2], 16), parts[5].strip()))
    return out


def elf_symbol(path: str, name: str) -> tuple[int, int] | None:
    """(symbol value, lowest PT_LOAD address) of `name` in the ELF64 file `path` (.symtab, else
    .dynsym), or None. Just enough ELF to find `_PyRuntime`."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = [struct.unpack_from("<IIQQ", data, phoff + i * phentsize) for i in range(phnum)]
    base = min((p[3] for p in loads if p[0] == 1), default=0) & ~0xFFF
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    want = name.encode()
    for kind in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
        for sh in sections:
            if sh[1] != kind:
                continue
            strtab = sections[sh[6]]
            str_off = strtab[4]
            for i in range(sh[5] // 24):
                st_name, _info, _other, _shndx, value, _size = struct.unpack_from("<IBBHQQ", data, sh[4] + i * 24)
                if value and data[str_off + st_name:str_off + st_name + len(want) + 1] == want + b"\0":
                    return value, base
    return None


def why_not(pid: int) -> str | None:
    """None when the Python frames of `pid` can be walked; else why not, in one line."""
    lay = layout()
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if lay is None:
        return (f"Python frames at syscalls need netprof itself on CPython 3.11 (it runs {mine}, "
                "or its interpreter's layout could not be measured)")
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        libs = [os.path.basename(p) for _, _, p in _maps(pid) if "libpython" in p]
    except OSError as e:
        return f"cannot read process {pid}: {e}"
    m = next((m for m in (_VERSION.search(n) for n in (*libs, exe)) if m), None)
    if m is None:
        return f"process {pid} ({exe}) is not a CPython netprof recognises"
    theirs = f"{m.group(1)}.{m.group(2)}"
    if theirs != mine:
        return (f"the backend runs CPython {theirs}; the evidence set walks Python frames of {mine} only "
                "(on 3.12+ the flamegraph round's mixed view, -X perf_jit, shows them)")
    return None


def thread_states(pid: int) -> dict[int, int]:
    """{thread id: PyThreadState address} of `pid`'s Python threads now. Raises OSError/LookupError."""
    lay = layout()
    if lay is None:
        raise LookupError("no layout")
    runtime = None
    seen: set[str] = set()
    for _start, _off, path in _maps(pid):
        if path in seen or not _INTERPRETER_FILE.match(os.path.basename(path)):
            continue
        seen.add(path)
        try:
            sym = elf_symbol(f"/proc/{pid}/root{path}", "_PyRuntime")
        except (struct.error, IndexError):  # not an ELF file we understand
            sym = None
        if sym is None:
            continue
        starts = [s for s, o, p in _maps(pid) if p == path and o == 0]
        if starts:
            runtime = sym[0] - sym[1] + starts[0]
            break
    if runtime is None:
        raise LookupError("no _PyRuntime symbol in the target's python binary or libpython")
    mem = Mem(pid)
    try:
        found: dict[int, int] = {}
        interp = mem.ptr(runtime + lay.runtime_interp_head)
        t = mem.ptr(interp + lay.interp_threads_head)
        while t and len(found) < 1024:
            found[mem.ptr(t + lay.tstate_native_id)] = t
            t = mem.ptr(t + lay.tstate_next)
        return found
    finally:
        mem.close()


class CodeNames:
    """Code-object address → 'qualname (file)' for one live process, cached."""

    def __init__(self, pid: int) -> None:
        lay = layout()
        if lay is None:
            raise LookupError("no layout")
        self.lay = lay
        self.mem = Mem(pid)
        self.cache: dict[int, str | None] = {}

    def _str(self, addr: int) -> str:
        n = _PTR.unpack(self.mem.read(addr + self.lay.str_length, 8))[0]
        if not 0 < n <= 512:
            raise ValueError("not a short string")
        raw = self.mem.read(addr + self.lay.str_data, n)
        if not raw.isascii():
            raise ValueError("not a compact ASCII string")
        return raw.decode()

    def name(self, code: int) -> str | None:
        """None when `code` is not a code object of the target (a torn or stale frame)."""
        if code not in self.cache:
            try:
                tp = self.mem.ptr(code + 8)
                if self.mem.read(self.mem.ptr(tp + self.lay.type_name), 5) != b"code\0":
                    raise ValueError("not a code object")
                qual = self._str(self.mem.ptr(code + self.lay.code_qualname))
                path = _STDLIB.sub("", self._str(self.mem.ptr(code + self.lay.code_filename)))
                line = _I32.unpack(self.mem.read(code + self.lay.code_firstlineno, 4))[0]
                self.cache[code] = f"{qual} ({path}:{line})"
            except (OSError, ValueError):
                self.cache[code] = None
        return self.cache[code]

    def close(self) -> None:
        self.mem.close()
