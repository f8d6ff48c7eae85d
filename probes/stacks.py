"""The evidence set: which user-space code paths issue chosen syscalls (probes/stacks.bpf.c).

Stacks are walked by the kernel with frame pointers. Debian's libc and these CPython builds have
none, so a stack is often one or two frames deep (the libc wrapper, maybe its caller) and deeper
frames can be wrong; frames are reported as symbolized, `[unknown]` included, without guessing.
"""

from __future__ import annotations

from collections import defaultdict

from .base import NR_SLOTS, LoadedProgram, ProbeError, syscall_name, syscall_number
from .counting import _descendants

DEFAULT_SYSCALLS = ("mmap", "munmap", "mremap", "brk", "futex", "epoll_ctl")
STACK_ENTRIES = 16384


class StackProbes(LoadedProgram):
    """`with StackProbes() as s: s.target(pid); ...; s.top_stacks(5)` (the target must still run)."""

    def __init__(self, syscalls=DEFAULT_SYSCALLS, track_children: bool = True) -> None:
        self.track_children = track_children
        self.pid = 0
        self._load("stacks.bpf.c", [f"-DSTACK_ENTRIES={STACK_ENTRIES}", f"-DTRACK_CHILDREN={int(track_children)}"])
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
        children.clear()
        self.bpf[b"counts"].clear()
        self.bpf[b"stacks"].clear()
        kids = _descendants(pid) if self.track_children else []
        for k in kids:
            children[children.Key(k)] = children.Leaf(1)
        leaf = cfg.Leaf()
        leaf.tgid, leaf.nchildren = pid, len(kids)
        cfg[cfg.Key(0)] = leaf
        self.pid = pid

    def top_stacks(self, n: int = 5) -> dict[str, list[tuple[int, list[str]]]]:
        """syscall name -> up to n (count, [innermost frame first, ...]), most frequent first."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        from bcc import BPF

        stacks = self.bpf[b"stacks"]
        by_call: dict[str, list[tuple[int, list[str]]]] = defaultdict(list)
        for k, v in self.bpf[b"counts"].items():
            if k.stackid < 0:
                frames = [f"[no user stack: errno {-k.stackid}]"]
            else:
                try:
                    addrs = list(stacks.walk(k.stackid))
                except KeyError:
                    addrs = []
                frames = [BPF.sym(a, k.tgid, show_module=True).decode(errors="replace") for a in addrs]
                frames = frames or ["[stack lost]"]
            by_call[syscall_name(k.nr if k.nr < NR_SLOTS else NR_SLOTS - 1)].append((v.value, frames))
        return {name: sorted(rows, key=lambda r: -r[0])[:n] for name, rows in by_call.items()}
