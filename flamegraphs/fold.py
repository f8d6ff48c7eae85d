"""Folded stacks: the one interface between samplers and the renderer.

A folded file has one line per distinct stack, `root;...;leaf COUNT`. Frames carry FlameGraph's
annotation suffixes so inferno's `--colors java` palette colours them by kind:
`_[k]` kernel (orange), `_[j]` Python frames from CPython's perf jitdump (green), `_[i]` interpreter
frames in libpython / the python binary (aqua; we borrow the "inline" mark because the palette has
no fourth kind), no suffix for other native code (red/yellow).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator

from netprof.profiler.core import atomic

KERNEL = "_[k]"
JIT = "_[j]"
INTERP = "_[i]"

# `perf script -F comm,tid,period,ip,sym,dso` sample header: "comm  tid  period" (comm may hold spaces).
_HEADER = re.compile(r"^(?P<comm>.*?)\s+(?P<tid>\d+)\s+(?P<period>\d+)\s*$")
# Frame line: "\t addr sym (dso)"; sym may contain spaces and parentheses, dso is the last (...).
_FRAME = re.compile(r"^\s+(?P<addr>[0-9a-f]+)\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")
INTERP_DSO = re.compile(r"^(libpython\d[\d.]*\S*\.so[.\d]*|python\d[\d.]*)$")


def frame_kind(sym: str, dso: str) -> str:
    """The annotation suffix for one perf frame."""
    base = os.path.basename(dso)
    if dso.startswith("[kernel") or dso.startswith("[bpf") or base.startswith("bpf_prog"):
        return KERNEL
    if sym.startswith("py::") or base.startswith("jitted-") or re.match(r"perf-\d+\.map$", base):
        return JIT
    if INTERP_DSO.match(base):
        return INTERP
    return ""


def frame_name(sym: str, dso: str) -> str:
    """Symbol with its kind suffix; unknown symbols become `[dso]` like inferno-collapse-perf."""
    if sym in ("", "[unknown]"):
        base = os.path.basename(dso)
        sym = f"[{base}]" if base and base != "[unknown]" else "[unknown]"
    # `;` separates frames in the folded format; a space before the count is fine but tidy it.
    sym = sym.replace(";", ":").replace("\n", " ")
    return sym + frame_kind(sym, dso)


def fold_perf_script(lines: Iterable[str]) -> Counter:
    """`perf script -F comm,tid,period,ip,sym,dso` output → Counter{folded stack: samples}.

    Root is the command name (threads of one backend share it); perf prints leaf first.
    """
    stacks: Counter = Counter()
    comm: str | None = None
    frames: list[str] = []

    def flush() -> None:
        if comm is not None:
            chain = [comm.replace(";", ":")]
            for f in reversed(frames):
                # Broken unwinds end in a run of [unknown]; one is enough to show it.
                if chain[-1] == f and f.startswith("[unknown]"):
                    continue
                chain.append(f)
            stacks[";".join(chain)] += 1

    for line in lines:
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if not line[0].isspace():
            flush()
            m = _HEADER.match(line.rstrip("\n"))
            comm, frames = (m.group("comm").strip() if m else line.split()[0]), []
            continue
        m = _FRAME.match(line)
        if m and comm is not None:
            frames.append(frame_name(m.group("sym"), m.group("dso")))
    flush()
    return stacks


def write_folded(stacks: Counter, path: str) -> int:
    """Write sorted folded stacks (atomically); returns the total count (samples, or µs for off-CPU)."""
    kept = sorted((stack, n) for stack, n in stacks.items() if n > 0)
    atomic.write_text(path, "".join(f"{stack} {n}\n" for stack, n in kept))
    return sum(n for _, n in kept)


def read_folded(path: str) -> Iterator[tuple[str, int]]:
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if stack and n.isdigit():
                yield stack, int(n)


def total(path: str) -> int:
    return sum(n for _, n in read_folded(path))
