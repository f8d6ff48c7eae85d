"""What netprof reads at a counted mark, and how long each read takes: the breakdown's totals (read first: its parts,
then the socket waits' distributions and each connection's), the counting set's snapshot (one batch lookup of its
512 syscall slots and the ring's, since 2026-12-05; before, a lookup per slot: kept here as `counting, a lookup per
slot` to compare in the same rounds), /proc of the server's tree, and the breakdown's snapshot whole (its totals
again, then what it sums and the descriptors' waits). netprof's CPU there is time the loader waits on a two-core
host, and a server that starves connections serves them then (bench/breakdown_edges.py).

The sets watch a real server: a Python echo server (this script's child) with 100 connections kept busy by a
client thread, so the maps hold what a run's do (a hundred sockets, an echo loop's syscalls); with --threads N,
N idle threads beside the loop (a thread pool's: /proc is read per thread). Each round makes
every read once, in a shuffled order; per read the median and p90 over the rounds, in ms.

    sudo .venv/bin/python bench/mark_reads.py [-r 200] [--threads N] [--write]
    .venv/bin/python bench/mark_reads.py --from bench/data/mark_reads/FILE.json [--write]
"""

from __future__ import annotations

import random
import socket
import statistics
import subprocess
import sys
import threading
import time

import lib
from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.probes.breakdown.breakdown import BreakdownProbes
from netprof.probes.counting.counting import CountingProbes
from netprof.probes.proc import proc_cpu_times

DATA = lib.ROOT / "bench" / "data" / "mark_reads"
SECTION = "What netprof reads at a counted mark, read by read (bench/mark_reads.py)"
CONNS = 100
SERVER = """
import selectors, socket, sys, threading, time
for _ in range(int(sys.argv[1])):  # --threads: idle threads beside the loop, as a thread pool's
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
sel = selectors.DefaultSelector()
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(512); ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ)
print(ls.getsockname()[1], flush=True)
while True:
    for key, _ in sel.select():
        s = key.fileobj
        if s is ls:
            c, _ = ls.accept(); c.setblocking(False); sel.register(c, selectors.EVENT_READ)
            continue
        data = s.recv(64)
        if not data:
            sel.unregister(s); s.close()
        else:
            s.send(data)
"""


def per_slot(probes: CountingProbes) -> dict:
    """The counting set's read as it was before 2026-12-05: a lookup per slot, summed in Python."""
    calls = {}
    for i, k in enumerate(probes._keys):
        vals = probes._sc.getvalue(k)
        n = sum(v.count for v in vals)
        if n:
            calls[i] = (n, sum(v.timed for v in vals), sum(v.ns for v in vals), sum(v.oncpu_ns for v in vals))
    for k in probes._ring_keys:
        sum(int(v) for v in probes._ring.getvalue(k))
    return calls


def measure(rounds: int, threads: int) -> dict:
    server = subprocess.Popen([sys.executable, "-I", "-c", SERVER, str(threads)], stdout=subprocess.PIPE, text=True)
    stop = threading.Event()
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        counting, breakdown = CountingProbes(attached=False), BreakdownProbes(attached=False)
        try:
            for p in (counting, breakdown):
                p.target(server.pid)
                p.attach()
            socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNS)]

            def load() -> None:  # ping-pong on every connection in turn, until the rounds are done
                while not stop.is_set():
                    for s in socks:
                        s.sendall(b"x" * 64)
                        s.recv(64)

            client = threading.Thread(target=load, daemon=True)
            client.start()
            time.sleep(0.5)
            reads = {"breakdown's totals (its parts, the socket waits' and each connection's)": breakdown.totals,
                     "counting, one batch (now)": counting.snapshot,
                     "counting, a lookup per slot (before)": lambda: per_slot(counting),
                     "/proc of the tree": lambda: proc_cpu_times(server.pid),
                     "/proc of the tree with each thread's sched file (migrations: every mark before 2026-12-05 "
                     "noon)": lambda: proc_cpu_times(server.pid, migrations=True),
                     "breakdown's totals and the rest (sums, descriptor waits)":
                         lambda: breakdown.snapshot(describe=False)}
            times: dict[str, list[float]] = {name: [] for name in reads}
            rng = random.Random(1)
            for _ in range(rounds):
                order = list(reads)
                rng.shuffle(order)
                for name in order:
                    t = time.perf_counter()
                    reads[name]()
                    times[name].append((time.perf_counter() - t) * 1e3)
                time.sleep(0.005)
            stop.set()
            client.join(5)
            for s in socks:
                s.close()
        finally:
            counting.close()
            breakdown.close()
    finally:
        stop.set()
        server.kill()
        server.wait()
    return {name: {"median_ms": statistics.median(v), "p90_ms": statistics.quantiles(v, n=10)[-1], "n": len(v)}
            for name, v in times.items()}


def main() -> int:
    ap = lib.cli(__doc__, rounds=200)
    ap.add_argument("--threads", type=int, default=0, help="idle threads in the server beside its loop (default 0)")
    args = ap.parse_args()
    doc = lib.earlier(args) or lib.keep("mark_reads", DATA, command=" ".join(sys.argv), rounds=args.rounds,
                                        threads=args.threads, reads=measure(args.rounds, args.threads))
    lines = ["| read | median (ms) | p90 (ms) |", "|---|---|---|"]
    lines += [f"| {name} | {r['median_ms']:.3f} | {r['p90_ms']:.3f} |" for name, r in doc["reads"].items()]
    intro = (f"`{doc['command']}` — commit {doc['commit']}, {doc['date']}; table by {command()}. {doc['rounds']} "
             f"rounds, {CONNS} connections busy on a Python echo server ({doc.get('threads', 0)} idle threads beside "
             "its loop), the sets attached to it. Raw data: "
             "bench/data/mark_reads/.")
    publish(SECTION, intro, "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
