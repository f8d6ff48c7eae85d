"""What netprof runs that died without cleaning up (SIGKILL, a reboot) left behind, and its removal.

Each kind of leftover has one reaper, owned by the module that makes it: procs (children's stderr
files of earlier versions, private temp directories), the flamegraph session (sampling scratch),
netns (`netprof-<pid>-b|l` namespaces). Each removes only what belongs to a netprof pid that is gone.
They run in three places: the watchdog (`python -m netprof.profiler.run.reap watchdog PID`, which procs
starts with the first child and which reaps once that process has died), the start of every run
(runner.execute) and `netprof doctor`.

This module sits above procs (the core imports none of the reapers' modules) and below the runner.
Importing it also installs the flamegraph side's spawn hook (jitdump: CPython's perf-map files are
created by procs before the backend execs), so every run path that reaps has it before its first child.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable

from netprof.flamegraphs import (
    jitdump,  # noqa: F401  (imported for its spawn hook: see above)
    session,
)
from netprof.profiler.core import procs
from netprof.profiler.run.link import netns


def _namespaces() -> list[str]:
    """netns' reaper, where it can work: namespaces need root and iproute2."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        return []
    return netns.cleanup_leftovers()


# Name -> reaper (each returns what it removed). `netprof doctor` reports the names.
REAPERS: dict[str, Callable[[], list[str]]] = {
    "temp files": procs.cleanup_stale,
    "sampling scratch": session.cleanup_stale,
    "namespaces": _namespaces,
}


def reap_dead_runs(*only: str) -> dict[str, list[str]]:
    """Run every reaper (or those named in `only`); returns what each removed."""
    unknown = set(only) - set(REAPERS)
    assert not unknown, f"no reaper {sorted(unknown)}"
    return {name: reaper() for name, reaper in REAPERS.items() if not only or name in only}


def _watchdog_main(parent: int) -> int:
    if procs.wait_for_parent_exit(parent):
        reap_dead_runs()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["watchdog"] and len(sys.argv) == 3 and sys.argv[2].isdigit():
        from netprof.profiler.run import reap as imported  # the module procs & co. see, not this __main__

        sys.exit(imported._watchdog_main(int(sys.argv[2])))
    print("usage: python -m netprof.profiler.run.reap watchdog PID", file=sys.stderr)
    sys.exit(2)
