"""The target's process tree, Python side: the live descendants a probe set's `children` map starts
with (tree_filter.bpf.h follows the forks from then on).

A process the tree forks while target() runs can fall between the two: after the descendants were
listed, before the program knows the target (its cfg is written last, so nothing is recorded while
the maps are reset), so neither adds it. `seed` lists, `catch_late` lists again once the target is
live and adds what the first listing missed.
"""

from __future__ import annotations

from collections.abc import Callable

import psutil


def descendants(pid: int) -> list[int]:
    """pid's live descendants (children, grandchildren, ...); [] when pid is gone."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def members(pid: int, also: tuple[int, ...] = ()) -> list[int]:
    """pid's live descendants, and the processes `also` (a cgroup's other members) with theirs."""
    out = descendants(pid)
    for m in also:
        if m != pid and m not in out:
            out += [m, *(d for d in descendants(m) if d not in out)]
    return out


def seed(children, pid: int, track: bool, also: tuple[int, ...] = ()) -> list[int]:
    """Empty the `children` map and put pid's live descendants in it (none without `track`), and the
    processes `also` with theirs."""
    children.clear()
    kids = members(pid, also) if pid and track else []
    for k in kids:
        children[children.Key(k)] = children.Leaf(1)
    return kids


def catch_late(children, pid: int, kids: list[int], track: bool, write_count: Callable[[int], None],
               also: tuple[int, ...] = ()) -> list[int]:
    """After the target's cfg is live: add descendants forked since `seed` listed `kids`, drop seeded
    ones that exited before the program could see them go, and rewrite the map's entry count through
    `write_count` when either happened. Returns the late ones."""
    if not pid or not track:
        return []
    seeded = set(kids)
    late = [k for k in members(pid, also) if k not in seeded]
    gone = [k for k in kids if not psutil.pid_exists(k)]
    for k in late:
        children[children.Key(k)] = children.Leaf(1)
    for k in gone:
        try:
            del children[children.Key(k)]
        except KeyError:  # the program saw it exit after all
            pass
    if late or gone:
        write_count(sum(1 for _ in children.keys()))
    return late
