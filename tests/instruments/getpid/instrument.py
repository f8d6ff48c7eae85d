"""getpid() calls of the server per message, in the row's `getpid` group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netprof.probes.base import LoadedProgram
from netprof.probes.instrument import Counted, ProbeInstrument
from netprof.profiler.model import stats


class GetpidProbes(LoadedProgram):
    def __init__(self) -> None:
        self._load(Path(__file__).with_name("getpid.bpf.c"), ["-DTRACK_CHILDREN=0"], attached=False)
        assert self.bpf is not None
        self._cfg, self._calls = self.bpf[b"cfg"], self.bpf[b"calls"]

    def target(self, pid: int) -> None:
        leaf = self._cfg.Leaf()
        leaf.tgid = pid
        self._cfg[self._cfg.Key(0)] = leaf
        self._calls.clear()

    def snapshot(self) -> int:
        return sum(self._calls.getvalue(self._calls.Key(0)))  # per-CPU u64 values


class Getpid(ProbeInstrument):
    name = "getpid"
    group = "getpid"

    @classmethod
    def open(cls, cfg: Any) -> Getpid:
        return cls(GetpidProbes())

    def row(self, row: dict, first: int, last: int, counted: Counted) -> list[dict]:
        row["getpid"].update(calls=last - first, per_msg=stats.ratio(last - first, counted.messages))
        return []
