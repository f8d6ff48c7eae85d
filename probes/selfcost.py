"""What the counting set costs per syscall on this host, measured in about a second.

The cost of a sys_enter hook depends on the host (mitigations, hypervisor: docs/facts.md saw +43 ns on one
machine of this kind and +147 ns on another), so `netprof doctor` and every probed run measure it
rather than quote a benchmark. A child process makes N getppid() calls; its CPU time per call is read
with the probes detached, attached and watching it (target), and attached but watching another process
(bystander: what every other task on the machine pays). Medians of a few repetitions; the Python loop's
own cost is the same in all three and cancels in the differences.

The figure is a property of the host as booted, so `cached` measures it once per boot and keeps it in a
root-owned file keyed by kernel release, boot id, netprof version and the BPF programs (and the probe
variant): a probed run then spends no second on it. `netprof doctor` re-measures and rewrites it. The
socket-wait set's figure per loopback message (probes/sockwait `measure_cost`, ~3 s) is kept the same way
(`cached_cost`).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import netprof
from netprof.profiler.core import cache

# One entry per probe variant (runs with and without --syscall-time alternate); cached_cost adds .json.
CACHE_FILE = "probe-cost{variant}"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
CALLS = 300_000
REPEATS = 3
_CHILD = ("import os, resource, sys\n"
          "sys.stdin.readline()\n"  # wait until the probes target us
          "cpu = lambda r: r.ru_utime + r.ru_stime\n"  # rusage: microsecond resolution (os.times: 10 ms)
          "t0 = cpu(resource.getrusage(resource.RUSAGE_SELF))\n"
          f"for _ in range({CALLS}): os.getppid()\n"
          "print(cpu(resource.getrusage(resource.RUSAGE_SELF)) - t0, flush=True)\n")


def child_cpu(probes, source: str, target_child: bool, per: int) -> float:
    """CPU seconds per operation of one run of `source` in a child (it waits for a line on stdin,
    does `per` operations and prints its CPU seconds); `probes` (attached or not) re-targeted first,
    at the child or (bystander) at us."""
    child = subprocess.Popen([sys.executable, "-I", "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd="/")
    try:
        if probes is not None:
            probes.target(child.pid if target_child else os.getpid())
        out, _ = child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return float(out.strip()) / per


def _cpu_per_call(probes, target_child: bool) -> float:
    """CPU seconds per getppid() of one child run."""
    return child_cpu(probes, _CHILD, target_child, CALLS)


def three_medians(probes, once: Callable[[bool], float], repeats: int) -> tuple[float, float, float]:
    """`once(watched)` with the set detached, attached and watching the measuring process, and attached
    but watching another process (bystander): the three figures every probe set's self-measurement
    takes. Returns the detached run's median and, for the other two, that median plus the median of
    their differences to the detached run of the same repeat. Each repeat runs all three, each first in
    turn: this host's speed moves in regimes of seconds (bench/host_regimes.py), which blocks of one
    variant each would put into the differences (a sockwait cost once came out at -305 ns).
    Leaves the set detached."""
    variants = [(False, True), (True, True), (True, False)]  # (attached, watched): bare, watched, bystander
    got: dict[tuple[bool, bool], list[float]] = {v: [] for v in variants}
    try:
        for i in range(repeats):
            for attached, watched in variants[i % 3:] + variants[:i % 3]:
                if attached:
                    probes.attach()
                else:
                    probes.detach()
                got[(attached, watched)].append(once(watched))
    finally:
        probes.detach()
    bare = got[variants[0]]
    base = statistics.median(bare)

    def paired(v: tuple[bool, bool]) -> float:
        return base + statistics.median(x - b for x, b in zip(got[v], bare))

    return base, paired(variants[1]), paired(variants[2])


def measure(probes) -> dict:
    """{'bare_ns', 'added_target_ns', 'added_bystander_ns'} for a CountingProbes set (left detached)."""
    bare, target, bystander = three_medians(probes, lambda watched: _cpu_per_call(probes, watched), REPEATS)
    return {"bare_ns": 1e9 * bare, "added_target_ns": 1e9 * (target - bare),
            "added_bystander_ns": 1e9 * (bystander - bare), "calls": CALLS, "repeats": REPEATS}


def _programs() -> str:
    """A digest of every BPF source of the probes package (its folders included): netprof's version stays put
    while the programs change under development."""
    programs = hashlib.sha256()
    root = Path(__file__).parent
    for src in sorted(root.rglob("*.bpf.[ch]")):
        programs.update(str(src.relative_to(root)).encode() + b"\0" + src.read_bytes())
    return programs.hexdigest()[:16]


def _host_key() -> dict:
    """What any self-measured figure holds for: this boot of this kernel, this netprof and its BPF programs."""
    try:
        with open(BOOT_ID, encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return {"kernel": os.uname().release, "boot_id": boot, "netprof": netprof.__version__, "programs": _programs()}


def cache_key(probes) -> dict:
    """The counting set's figure: the host key and this probe variant."""
    return {**_host_key(), "syscall_time": bool(getattr(probes, "syscall_time", False)),
            "track_children": bool(getattr(probes, "track_children", True)), "calls": CALLS, "repeats": REPEATS}


def cached_cost(name: str, key: dict, make: Callable[[], dict], refresh: bool = False) -> dict:
    """make(), or the figure `make` gave earlier in this boot for the same `key` (the host key is added),
    kept as ROOT/`name`.json. The result says which: 'source' is 'measured' (now) or 'cache', with
    'measured_at' (Unix time) and 'age_s'. `refresh` (doctor) always measures and rewrites the entry. A
    figure with an 'error' is returned but not kept: the next run tries again."""
    key = {**_host_key(), **key}
    where = cache.directory()
    path = os.path.join(where, f"{name}.json") if where else None
    raw = cache.read_bytes(path) if path and not refresh else None
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("key") == key and isinstance(doc.get("cost"), dict):
        at = float(doc.get("measured_at") or 0)
        return {**doc["cost"], "source": "cache", "measured_at": at, "age_s": max(0.0, time.time() - at)}
    cost = make()
    at = time.time()
    if path and "error" not in cost:
        cache.write_bytes(path, json.dumps({"key": key, "measured_at": at, "cost": cost}).encode())
    return {**cost, "source": "measured", "measured_at": at, "age_s": 0.0}


def cached(probes, refresh: bool = False) -> dict:
    """measure(probes), or the figure measured earlier in this boot by the same netprof for the same
    probe variant (cached_cost)."""
    key = cache_key(probes)
    name = CACHE_FILE.format(variant="-syscall-time" if key["syscall_time"] else "")
    return cached_cost(name, key, lambda: measure(probes), refresh)
