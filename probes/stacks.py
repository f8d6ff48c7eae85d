"""The evidence set: which user-space code paths issue chosen syscalls (probes/stacks.bpf.c).

Native stacks are walked by the kernel with frame pointers. Debian's libc and these CPython builds
have none, so a native stack is reliable for its innermost frame only (the libc wrapper that made
the syscall); deeper frames are reported as symbolized, `[unknown]` included, without guessing.
Python frames come from the interpreter's own frame stack, walked by the same BPF program at the
syscall (probes/pyframes.py: CPython 3.11). Frames are named from the live process, so read the
stacks (`top_stacks`, `evidence`) before the target exits: afterwards every frame is `[unknown]`.

Cost per chosen syscall, measured on this machine kind (a loop of epoll register/unregister, 1.2–1.6 µs
per call bare): the native walk adds ≈ 1.0–1.4 µs, the Python walk ≈ 0.9 µs more at 6 frames (one
user-memory read per frame). Evidence rounds only; their numbers never enter the results.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict

from netprof.profiler.core.symbols import UNKNOWN, user_symbols

from . import pyframes, tree
from .base import NR_SLOTS, LoadedProgram, ProbeError, syscall_name, syscall_number

DEFAULT_SYSCALLS = ("mmap", "munmap", "mremap", "brk", "futex", "epoll_ctl")
STACK_ENTRIES = 16384


def display_frames(python, native, py_max: int = 8, native_max: int = 3) -> list[str]:
    """At most 12 lines for a report: the innermost Python frames (the code that made the call),
    a line counting the outer ones left out, then the innermost native frames (how it got to the
    kernel; deeper native frames are unreliable without frame pointers anyway)."""
    shown = list(python[:py_max])
    if len(python) > py_max:
        left = len(python) - py_max
        shown.append(f"… {left} outer Python frame{'s' if left > 1 else ''}")
    # A frame-pointer walk through code without frame pointers ends in [unknown]s: they say nothing.
    return shown + list(native[:1]) + [f for f in native[1:native_max] if f != "[unknown]"]


class StackProbes(LoadedProgram):
    """`with StackProbes() as s: s.target(pid); ...; s.top_stacks(5)` (the target must still run)."""

    def __init__(self, syscalls=DEFAULT_SYSCALLS, track_children: bool = True, python_frames: bool = True) -> None:
        self.track_children = track_children
        self.pid = 0
        self.layout = pyframes.layout() if python_frames else None
        # Why the current target's stacks have no Python frames (None: they have them).
        self.python_note: str | None = None if self.layout else (
            "Python frames not asked for" if not python_frames else pyframes.why_not(os.getpid()))
        py = self.layout.cflags() if self.layout else ["-DPY_DEPTH=0"]
        self._load("stacks.bpf.c", [f"-DSTACK_ENTRIES={STACK_ENTRIES}", f"-DTRACK_CHILDREN={int(track_children)}",
                                    *py])
        try:
            assert self.bpf is not None  # _load() succeeded
            wanted = self.bpf[b"wanted"]
            for name in syscalls:
                wanted[wanted.Key(syscall_number(name))] = wanted.Leaf(1)
        except BaseException:
            self.close()
            raise

    def target(self, pid: int) -> None:
        if self.bpf is None:
            raise ProbeError("probes are closed")
        cfg, children = self.bpf[b"cfg"], self.bpf[b"children"]
        cfg[cfg.Key(0)] = cfg.Leaf()  # tgid 0: paused while resetting
        self.bpf[b"counts"].clear()
        self.bpf[b"stacks"].clear()
        kids = tree.seed(children, pid, self.track_children)
        if self.layout is not None:
            self._python_threads(pid)

        def write_cfg(n: int) -> None:
            leaf = cfg.Leaf()
            leaf.tgid, leaf.nchildren = pid, n
            cfg[cfg.Key(0)] = leaf

        write_cfg(len(kids))
        tree.catch_late(children, pid, kids, self.track_children, write_cfg)
        self.pid = pid

    def _python_threads(self, pid: int) -> None:
        """Tell the program where `pid`'s Python threads keep their frame stacks (threads started
        later, and forked children, get native frames only)."""
        assert self.bpf is not None
        threads = self.bpf[b"pythreads"]
        threads.clear()
        self.python_note = pyframes.why_not(pid)
        if self.python_note is None:
            try:
                self._add_threads(pid)
            except (OSError, LookupError, ValueError) as e:
                self.python_note = f"cannot find the Python threads of process {pid}: {e}"

    def _add_threads(self, pid: int) -> None:
        assert self.bpf is not None
        threads = self.bpf[b"pythreads"]
        for tid, tstate in pyframes.thread_states(pid).items():
            threads[threads.Key(tid)] = threads.Leaf(tstate)

    def learn_threads(self) -> None:
        """Add the Python threads the target started since target(): a thread per connection starts when the
        loader connects, after it. Their calls get Python frames from now on."""
        if self.bpf is None or not self.pid or self.python_note is not None:
            return
        try:
            self._add_threads(self.pid)
        except Exception:  # noqa: BLE001 -- /proc, the frames' layout, or BCC's plain Exception on a full map
            pass  # the threads known at target() keep theirs; the others stay native-only, as before

    def top_stacks(self, n: int = 5) -> dict[str, list[tuple[int, list[str]]]]:
        """syscall name -> up to n (count, [innermost native frame first, ...]), most frequent first."""
        merged: dict[str, Counter] = defaultdict(Counter)
        for name, count, native, _python in self._rows():
            merged[name][tuple(native)] += count
        return {name: [(c, list(f)) for f, c in rows.most_common(n)] for name, rows in merged.items()}

    def evidence(self, n: int = 5) -> dict[str, list[dict]]:
        """syscall name -> up to n stacks, most frequent first: {"count", "python": [innermost Python
        frame first, ...], "native": [innermost native frame first, ..., without the [unknown]s past
        the first], "frames": `display_frames`}.
        The Python frames come first because they say which code made the call; the native frames
        say how it reached the kernel."""
        merged: dict[str, Counter] = defaultdict(Counter)
        for name, count, native, python in self._rows():
            # Stacks that differ only in the walk's [unknown] tail are one code path: merged.
            known = (*native[:1], *(f for f in native[1:] if f != "[unknown]"))
            merged[name][(tuple(python), known)] += count
        return {name: [{"count": c, "python": list(py), "native": list(nat), "frames": display_frames(py, nat)}
                       for (py, nat), c in rows.most_common(n)]
                for name, rows in merged.items()}

    def _rows(self) -> list[tuple[str, int, list[str], list[str]]]:
        """(syscall, count, native frames, Python frames) per key of the counts map, named now."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        stacks = self.bpf[b"stacks"]
        names: dict[int, pyframes.CodeNames | None] = {}
        rows = []
        counts = list(self.bpf[b"counts"].items())
        walks: dict[int, list[int]] = {}  # stack id -> its addresses
        for k, _ in counts:
            if k.stackid >= 0 and k.stackid not in walks:
                try:
                    walks[k.stackid] = list(stacks.walk(k.stackid))
                except KeyError:
                    walks[k.stackid] = []
        wanted: dict[int, set[int]] = defaultdict(set)
        for k, _ in counts:
            wanted[k.tgid].update(walks.get(k.stackid, ()))
        symbols = user_symbols(wanted)  # in a child: see profiler/core/symbols.py
        try:
            for k, v in counts:
                if k.stackid < 0:
                    native = [f"[no user stack: errno {-k.stackid}]"]
                else:
                    native = [symbols.get((k.tgid, a), UNKNOWN) for a in walks[k.stackid]]
                    native = native or ["[stack lost]"]
                python: list[str] = []
                if self.layout is not None and k.py[0]:
                    if k.tgid not in names:
                        try:
                            names[k.tgid] = pyframes.CodeNames(k.tgid)
                        except (OSError, LookupError):
                            names[k.tgid] = None
                    resolver = names[k.tgid]
                    for code in k.py:
                        if not code:
                            break
                        python.append((resolver.name(code) if resolver else None) or "[Python frame?]")
                name = syscall_name(k.nr if k.nr < NR_SLOTS else NR_SLOTS - 1)
                rows.append((name, int(v.value), native, python))
        finally:
            for resolver in names.values():
                if resolver is not None:
                    resolver.close()
        return rows
