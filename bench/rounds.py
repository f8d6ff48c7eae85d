"""Interleaved rounds for the overhead benchmarks: each round measures every (backend, variant) once,
in an order shuffled anew each round, so drift on a shared machine (another job, a clock change)
falls on all variants alike and a ratio to the same round's baseline cancels it. Shared by the bench
scripts, which run as files from this folder (so `import rounds` finds it)."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

V = TypeVar("V")
M = TypeVar("M")


def add_arguments(ap: argparse.ArgumentParser, rounds: int) -> None:
    """The options every interleaved benchmark takes: which backends, the load, how many rounds."""
    ap.add_argument("--backends", default="selector", help="comma-separated")
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("-d", "--duration", type=float, default=5, help="seconds measured per run")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--seed", type=int, default=1, help="of the shuffled order within each round")


def interleaved(backends: Sequence[str], variants: Sequence[V], rounds: int, seed: int,
                measure: Callable[[str, V], M], show: Callable[[V, M], str]) -> dict[tuple[str, V], list[M]]:
    """`measure(backend, variant)` `rounds` times for each pair; its results per pair, in round order.
    Prints one progress line per measurement to stderr (`show(variant, result)` says what it was)."""
    rng = random.Random(seed)
    raw: dict[tuple[str, V], list[M]] = {(b, v): [] for b in backends for v in variants}
    for r in range(rounds):
        order = list(raw)
        rng.shuffle(order)
        for b, v in order:
            m = measure(b, v)
            raw[(b, v)].append(m)
            print(f"round {r + 1}/{rounds} {b:<12} {show(v, m)}", file=sys.stderr, flush=True)
    return raw


def rotated(names: Sequence[V], rounds: int) -> Iterator[tuple[int, list[V]]]:
    """(round, its order) for `rounds` rounds: every name once a round, the order rotated by one each round (a
    name first in one round is last in the one before), for scripts whose variants cannot be shuffled freely."""
    for i in range(rounds):
        k = i % len(names)
        yield i + 1, [*names[k:], *names[:k]]


def rotated_records(names: Sequence[V], rounds: int, measure: Callable[[V], list[dict]]) -> list[dict]:
    """`measure(name)`'s records for every name in `rounds` rotated rounds, each tagged with its "round" and
    printed to stderr as it comes."""
    records: list[dict] = []
    for rnd, order in rotated(names, rounds):
        for name in order:
            for rec in measure(name):
                records.append(rec | {"round": rnd})
                print(records[-1], file=sys.stderr, flush=True)
    return records


def interval(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval (netprof's own statistics; NaN from fewer than 2)."""
    from netprof.profiler.model.stats import summarize  # netprof's import is not needed for --help

    s = summarize(xs)
    return s["mean"], s["ci"]
