"""`netprof watch`: why each request of a running server took its time, under traffic netprof did not send
(docs/watch.md). config.py (the options) → target.py (which processes) → session.py (attach, windows, detach)
→ figures.py (what a window says: the one owner of watch's JSON) → live.py (the terminal), metrics.py
(Prometheus), and command.py (the command: a session, its live view and `--out`'s files).

config.py and target.py are light: the CLI checks the options and finds the processes before it imports the
rest (pandas, the probes' modules), so a refused watch leaves in ~0.2 s."""

from typing import Any

from netprof.profiler.core import lazy

_LAZY = {"execute": (".command", "execute"), "WatchConfig": (".config", "WatchConfig")}
__all__ = ["WatchConfig", "execute"]


def __getattr__(name: str) -> Any:
    return lazy.attr(__name__, _LAZY, name)
