#!/usr/bin/env python3
"""What do the probes cost? Throughput of a backend under the loader with each kind of
instrumentation attached, relative to none, interleaved, several rounds.

    sudo .venv/bin/python bench/probe_overhead.py [--backends selector,cpp_epoll] [-c 100] [-d 5]
        [--rounds 5] [--variants none,counting,evidence,perf,bpftrace] [--write]
    sudo .venv/bin/python bench/probe_overhead.py --micro [--write]
    sudo .venv/bin/python bench/probe_overhead.py --micro-sock [--write]
    sudo .venv/bin/python bench/probe_overhead.py --micro-ring [--rounds 7] [--ring-ops 4200000] [--write]

Every measurement starts a fresh backend pinned to CPU 0 and runs the loader one-shot
(`netprof-loader --target ... -c N -d D --json`) on CPU 1. In each round, every (backend,
variant) runs once, in an order shuffled anew (bench/rounds.py). A variant's figure is the mean of
its per-round ratios to that round's `none` run, with a 95% t-interval: for throughput, and for
CPU time per message of the backend (/proc schedstat over the loader's run) and of the loader (its
own report). On a shared, noisy machine the CPU-per-message ratios are the steadier measure of what a probe costs.

--micro measures the probes' cost per syscall directly: CPU time (rusage) of `perf bench syscall
basic` (a getppid loop) pinned to CPU 0, as the probes' target and as a bystander (the loader's
case), median of 3 × (6M − 1M calls). --write puts the tables into bench/RESULTS.md.

--micro-sock does the same for the socket-wait set, whose tracepoints fire on socket events, not
syscalls, and for the breakdown (the socket-wait set with scheduler and syscall programs): a C loop
sends one byte over a loopback TCP connection and receives it on the other end (one send, one
sk_data_ready, one recv per message); the sets are compiled once and attached in turn,
7 interleaved rounds, median of the rounds' (1.2M − 0.2M messages) differences.

--micro-ring does the same for the counting set's io_uring tracepoints (io_uring_submit_req, counted by
opcode for the target's tree, and io_uring_complete), which fire per ring operation, not per syscall: a
C loop (liburing) submits IORING_OP_NOP through one ring in batches of 32, one io_uring_submit_and_wait
per batch (per operation: one submission, one completion and 1/32 of an io_uring_enter, which the set's
sys_enter program sees too), with the loop as the counting set's target and as a bystander: no set
loaded; the set loaded but detached (its io_uring hooks are raw tracepoints that detach with the set, so
nothing should be added; until the io_uring:* trace events were replaced, they stayed attached from load to
close and cost every ring operation ~180 ns here); the set attached. 7 interleaved rounds (--rounds), the set
loaded anew in each, median of the rounds' (4.2M − 0.2M operations) differences (--ring-ops sets the
larger run). An attached target run must have been counted (≥ N NOP submissions and completions) and no
other run at all, else it stops: a probe that never fired costs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import lib
import rounds  # bench/ is sys.path[0]: these run as files
from results_md import write_section

from netprof.probes import CountingProbes, SockWaitProbes, StackProbes, proc_cpu_times
from netprof.probes.breakdown import BreakdownProbes
from netprof.probes.ring_ops import RING_OPS
from netprof.profiler.core.procs import ProcessGroup

VENV_BIN = Path(sys.executable).parent
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
WARMUP_S = 1.0
SETTLE_S = 1.0  # after attaching, before the load starts (perf attaches asynchronously)
VARIANTS = {
    "none": "no instrumentation",
    "counting": "netprof counting set, default (CountingProbes(): track_children, no syscall timing, "
                "so no sys_exit program)",
    "counting-time": "counting set with 1-in-16 syscall timing (CountingProbes(syscall_time=True))",
    "counting-exact": "counting set timing every syscall (CountingProbes(syscall_time=True, time_every=1))",
    "counting-detached": "counting set compiled and targeted but detached (CountingProbes(attached=False))",
    "sockwait": "netprof socket-wait set (SockWaitProbes(): raw tracepoints sk_data_ready, sock_recv_length, "
                "sock_send_length; inet_sock_set_state to learn new connections)",
    "evidence": "netprof evidence set (StackProbes: user stacks of mmap/munmap/mremap/brk/futex/epoll_ctl)",
    "perf": "perf stat -e 'syscalls:sys_enter_*' -p PID",
    "bpftrace": "bpftrace -e 'tracepoint:raw_syscalls:sys_enter /pid == N/ { @[args->id] = count(); }'",
}


COUNTING = {
    "counting": lambda: CountingProbes(),
    "counting-time": lambda: CountingProbes(syscall_time=True),
    "counting-exact": lambda: CountingProbes(syscall_time=True, time_every=1),
    "counting-detached": lambda: CountingProbes(attached=False),
}


class Attached:
    """Context manager: one variant attached to `pid` for the duration of the block."""

    def __init__(self, variant: str, pid: int, group: ProcessGroup) -> None:
        self.variant, self.pid, self.group = variant, pid, group
        self.probes = self.proc = None

    def __enter__(self) -> Attached:
        v, pid = self.variant, self.pid
        if v.startswith("counting"):
            self.probes = COUNTING[v]()
            self.probes.target(pid)
        elif v == "sockwait":
            self.probes = SockWaitProbes()
            self.probes.target(pid)
        elif v == "evidence":
            self.probes = StackProbes()
            self.probes.target(pid)
        elif v == "perf":
            self.proc = self.group.spawn("perf", ["perf", "stat", "-x", ",", "-e", "syscalls:sys_enter_*",
                                                  "-p", str(pid)], capture_stdout=False)
        elif v == "bpftrace":
            prog = f"tracepoint:raw_syscalls:sys_enter /pid == {pid}/ {{ @[args->id] = count(); }}"
            self.proc = self.group.spawn("bpftrace", ["bpftrace", "-e", prog])
            self.proc.wait_line("Attaching", 60)
        time.sleep(SETTLE_S)
        return self

    def __exit__(self, *exc) -> None:
        if self.probes is not None:
            self.probes.close()
        if self.proc is not None:
            self.proc.signal_group(signal.SIGINT)
            try:
                self.proc.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            self.proc.stop()


def one_run(backend: str, variant: str, args) -> dict:
    loader = shutil.which("netprof-loader") or str(VENV_BIN / "netprof-loader")
    with ProcessGroup() as group:
        be = group.spawn(f"backend-{backend}", [sys.executable, "-m", "netprof.backends", backend,
                                                "--host", "127.0.0.1", "--port", "0"], cpus="0")
        _, pid, port = be.wait_line("ready", 30).split()[:3]
        with Attached(variant, int(pid), group):
            cpu0 = proc_cpu_times(int(pid))["oncpu_s"]
            out = subprocess.run([loader, "--target", f"127.0.0.1:{port}", "-c", str(args.connections),
                                  "-d", str(args.duration), "--warmup", str(WARMUP_S), "--cpus", args.loader_cpus,
                                  "--json"], capture_output=True, text=True, timeout=args.duration + 120)
            cpu1 = proc_cpu_times(int(pid))["oncpu_s"]
        if out.returncode != 0:
            raise RuntimeError(f"loader failed ({out.returncode}): {out.stderr.strip()[-300:]}")
        stats = json.loads(out.stdout.strip().splitlines()[-1])
        msgs = max(1, int(stats["messages"]))
        lcpu = stats.get("loader_cpu", {})
        return {"rate": float(stats["msgs_per_sec"]),
                # the backend's CPU covers warm-up + window; the ratio to `none` cancels that bias
                "backend_us": (cpu1 - cpu0) / msgs * 1e6 * args.duration / (args.duration + WARMUP_S),
                "loader_us": (lcpu.get("user_s", 0) + lcpu.get("sys_s", 0)) / msgs * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    rounds.add_arguments(ap, rounds=5)
    ap.set_defaults(backends="selector,cpp_epoll", rounds=None)  # 5, or MICRO_RING_ROUNDS with --micro-ring
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--loader-cpus", default="1")
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    ap.add_argument("--micro", action="store_true", help="per-syscall cost of each probe set instead")
    ap.add_argument("--micro-sock", action="store_true", help="per-message cost (loopback TCP) of the socket-wait set")
    ap.add_argument("--micro-ring", action="store_true",
                    help="per-operation cost (io_uring NOPs) of the counting set's io_uring tracepoints")
    ap.add_argument("--ring-ops", type=int, default=MICRO_RING_OPS,
                    help=f"with --micro-ring: operations of the larger run (the smaller: {MICRO_RING_SMALL})")
    args = ap.parse_args()
    if args.micro_ring:
        if args.ring_ops <= MICRO_RING_SMALL:
            ap.error(f"--ring-ops must be more than {MICRO_RING_SMALL}")
        n_rounds = args.rounds or MICRO_RING_ROUNDS
        table = micro_ring(n_rounds, args.ring_ops)
        print(table)
        if args.write:
            cmd = "sudo .venv/bin/python bench/probe_overhead.py " + " ".join(sys.argv[1:])
            write_section("Probe overhead: per io_uring operation (bench/probe_overhead.py --micro-ring)",
                          f"`{cmd.strip()}` — {time.strftime('%Y-%m-%d')}, commit {lib.commit()}. CPU time per "
                          f"ring operation (rusage, median of {n_rounds} interleaved rounds of "
                          f"({args.ring_ops / 1e6:g}M − {MICRO_RING_SMALL / 1e6:g}M operations)) of a C loop "
                          f"pinned to CPU 0 that submits IORING_OP_NOP through one io_uring (liburing) in "
                          f"batches of {RING_BATCH}, one io_uring_submit_and_wait per batch (per operation: "
                          f"io_uring_submit_req + io_uring_complete + 1/{RING_BATCH} io_uring_enter); *target*: "
                          f"the counting set watches that process (each attached run counted ≥ N NOP "
                          f"submissions and completions); *bystander*: it watches another one. `none`: no set "
                          f"loaded; `counting-detached`: the set loaded, detached (what every ring operation on "
                          f"the machine pays while netprof holds the set, outside its windows: its io_uring hooks "
                          f"are raw tracepoints, detached with the set, so this should be `none`); `counting`: "
                          f"attached (two raw tracepoints per operation, io_uring_submit_req reading the "
                          f"request's opcode)."
                          f"\n\n{table}\n")
        return 0
    args.rounds = args.rounds or 5
    if args.micro_sock:
        table, raw = micro_sock()
        print(table)
        if args.write:
            cmd = "sudo .venv/bin/python bench/probe_overhead.py " + " ".join(sys.argv[1:])
            write_section("Probe overhead: per socket message (bench/probe_overhead.py --micro-sock)",
                          f"`{cmd.strip()}` — {time.strftime('%Y-%m-%d')}, commit {lib.commit()}. CPU time per "
                          f"message (rusage, median of "
                          f"{MICRO_SOCK_ROUNDS} interleaved rounds of (1.2M − 0.2M messages)) of a C loop pinned to "
                          f"CPU 0 that sends 1 byte on a loopback TCP connection and receives it at the other end "
                          f"(send + sk_data_ready + recv); "
                          f"*target*: the probes watch that process; *bystander*: they watch another one. "
                          f"`breakdown`: the socket-wait set compiled with the breakdown's programs (scheduler "
                          f"events, every syscall's entry and exit), as `--breakdown` attaches it."
                          f"\n\n{table}\n\n<details><summary>raw: each round's ns per message</summary>\n\n```\n"
                          + "\n".join(f"{n}/{w}: {[round(x) for x in xs]}" for (n, w), xs in raw.items())
                          + "\n```\n</details>\n")
        return 0
    if args.micro:
        table = micro(args)
        print(table)
        if args.write:
            cmd = "sudo .venv/bin/python bench/probe_overhead.py " + " ".join(sys.argv[1:])
            write_section("Probe overhead: per syscall (bench/probe_overhead.py --micro)",
                          f"`{cmd.strip()}` — {time.strftime('%Y-%m-%d')}. CPU time per getppid call (rusage, "
                          f"median of 3 × (6M − 1M calls)), `perf bench syscall basic` pinned to CPU 0; *target*: the "
                          f"probes watch that process; *bystander*: they watch another one (what the loader pays)."
                          f"\n\n{table}\n")
        return 0
    backends = args.backends.split(",")
    variants = args.variants.split(",")
    if "none" not in variants:
        variants.insert(0, "none")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    raw = rounds.interleaved(backends, variants, args.rounds, args.seed, lambda b, v: one_run(b, v, args),
                             lambda v, m: f"{v:<15} {m['rate']:8.0f} msg/s  backend {m['backend_us']:.2f} µs/msg  "
                                          f"loader {m['loader_us']:.2f} µs/msg")
    lines = ["| backend | instrumentation | msgs/s (mean) | throughput vs none | backend CPU/msg vs none "
             "| loader CPU/msg vs none |", "|---|---|---|---|---|---|"]
    for b in backends:
        base = raw[(b, "none")]
        for v in variants:
            cells = []
            for key in ("rate", "backend_us", "loader_us"):
                m, hw = rounds.interval([x[key] / n[key] for x, n in zip(raw[(b, v)], base) if n[key]])
                cells.append(f"{m:.3f} ± {hw:.3f}")
            rate = statistics.fmean(x["rate"] for x in raw[(b, v)])
            lines.append(f"| {b} | {v} | {rate:.0f} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    cmd = "sudo .venv/bin/python bench/probe_overhead.py " + " ".join(sys.argv[1:])
    print(table)
    raw = {k: [{kk: round(vv, 2) for kk, vv in x.items()} for x in xs] for k, xs in raw.items()}
    if args.write:
        legend = "\n".join(f"- `{v}`: {d}" for v, d in VARIANTS.items() if v in variants)
        body = (f"`{cmd.strip()}` — {time.strftime('%Y-%m-%d')}, {args.connections} connections, "
                f"{args.duration:g} s per run (+{WARMUP_S:g} s warm-up), {args.rounds} interleaved rounds, "
                f"backend pinned to CPU 0, loader on CPU {args.loader_cpus}. Each cell: mean of per-round "
                f"ratios to the same round's uninstrumented run ± half-width of the 95% t-interval."
                f"\n\n{legend}\n\n{table}\n\n"
                f"<details><summary>raw per-run figures</summary>\n\n```\n"
                + "\n".join(f"{b}/{v}: {xs}" for (b, v), xs in raw.items()) + "\n```\n</details>\n")
        write_section("Probe overhead: throughput (bench/probe_overhead.py)", body)
    return 0


def micro_cost(probe, pid_for, n: int) -> float:
    """CPU seconds of `perf bench syscall basic --loop n` pinned to CPU 0; `pid_for(pid)` targets."""
    p = subprocess.Popen(["sh", "-c", f"read go; exec taskset -c 0 perf bench syscall basic --loop {n}"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    if probe is not None:
        probe.target(pid_for(p.pid))
    p.stdin.write("go\n")
    p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    if status:
        raise RuntimeError("perf bench syscall basic failed")
    return ru.ru_utime + ru.ru_stime


def micro(args) -> str:
    variants = {"none": None, **COUNTING, "evidence": lambda: StackProbes()}
    bystander = subprocess.Popen(["sleep", "3600"], stdout=subprocess.DEVNULL)
    rows = ["| instrumentation | bystander ns/syscall | target ns/syscall | added, bystander | added, target |",
            "|---|---|---|---|---|"]
    try:
        base = None
        for name, make in variants.items():
            probe = make() if make else None
            try:
                cost = {}
                for who, pid_for in (("bystander", lambda pid: bystander.pid), ("target", lambda pid: pid)):
                    xs = sorted((micro_cost(probe, pid_for, 6_000_000) - micro_cost(probe, pid_for, 1_000_000))
                                / 5e6 * 1e9 for _ in range(3))
                    cost[who] = xs[1]
            finally:
                if probe is not None:
                    probe.close()
            base = base or cost
            rows.append(f"| {name} | {cost['bystander']:.1f} | {cost['target']:.1f} | "
                        f"{cost['bystander'] - base['bystander']:+.1f} | {cost['target'] - base['target']:+.1f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    finally:
        bystander.kill()
        bystander.wait()
    return "\n".join(rows)


MICRO_SOCK_ROUNDS = 7
PINGPONG_C = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (bind(l, (void *)&a, sizeof(a)) || listen(l, 1) || getsockname(l, (void *)&a, &len)) return 1;
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (void *)&a, sizeof(a))) return 1;
    int s = accept(l, 0, 0);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char b = 'x';
    for (long i = 0; i < n; i++)
        if (send(c, &b, 1, 0) != 1 || recv(s, &b, 1, 0) != 1) return 1;
    return 0;
}
"""


def micro_sock() -> tuple[str, dict[tuple[str, str], list[float]]]:
    """Per loopback message: the socket-wait set, the breakdown (the socket-wait set compiled with its
    programs: scheduler events and every syscall's entry and exit) and, for scale, the counting set, vs none."""

    exe = _build(PINGPONG_C, "pingpong")

    def cost(probe, pid_for, n: int) -> float:
        return _loop_cpu(exe, n, probe, pid_for, "the ping-pong loop")

    # Compiled once, attached in turn: every round measures every variant and role (interleaved).
    sets = {"none": None, "sockwait": SockWaitProbes(attached=False), "breakdown": BreakdownProbes(attached=False),
            "counting": CountingProbes(attached=False)}
    bystander = subprocess.Popen(["sleep", "3600"], stdout=subprocess.DEVNULL)
    raw: dict[tuple[str, str], list[float]] = {}
    rows = ["| instrumentation | bystander ns/message | target ns/message | added, bystander | added, target |",
            "|---|---|---|---|---|"]
    try:
        for r in range(MICRO_SOCK_ROUNDS):
            for name, probe in sets.items():
                if probe is not None:
                    probe.attach()
                try:
                    for who, pid_for in (("bystander", lambda pid: bystander.pid), ("target", lambda pid: pid)):
                        x = (cost(probe, pid_for, 1_200_000) - cost(probe, pid_for, 200_000)) / 1e6 * 1e9
                        raw.setdefault((name, who), []).append(x)
                finally:
                    if probe is not None:
                        probe.detach()
            print(f"round {r + 1}/{MICRO_SOCK_ROUNDS}: " + ", ".join(
                f"{n}/{w} {xs[-1]:.0f}" for (n, w), xs in raw.items()), file=sys.stderr, flush=True)
    finally:
        for probe in sets.values():
            if probe is not None:
                probe.close()
        bystander.kill()
        bystander.wait()
        shutil.rmtree(exe.parent, ignore_errors=True)
    return "\n".join(rows + _cost_rows(raw, sets, 0)), raw


def _build(source: str, name: str, flags: tuple[str, ...] = (), libs: tuple[str, ...] = ()) -> Path:
    """A micro mode's C loop, compiled with cc -O2 into a new temporary directory (the caller removes it)."""
    import tempfile

    exe = Path(tempfile.mkdtemp(prefix=f"netprof-{name}-")) / name
    src = exe.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["cc", "-O2", *flags, "-o", str(exe), str(src), *libs], check=True)
    return exe


def _loop_cpu(exe: Path, n: int, probe, pid_for, what: str) -> float:
    """CPU seconds (rusage) of `exe n` pinned to CPU 0, made `probe`'s target (through `pid_for`) before it
    starts its loop."""
    p = subprocess.Popen(["sh", "-c", f"read go; exec taskset -c 0 {exe} {n}"], stdin=subprocess.PIPE, text=True)
    assert p.stdin is not None
    if probe is not None:
        probe.target(pid_for(p.pid))
    p.stdin.write("go\n")
    p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    if status:
        raise RuntimeError(f"{what} failed")
    return ru.ru_utime + ru.ru_stime


def _cost_rows(raw: dict, names, decimals: int) -> list[str]:
    """The table rows of a micro mode: each variant's median per-operation cost as bystander and target, and
    what it adds to `none`'s."""
    med = {k: statistics.median(v) for k, v in raw.items()}
    out = []
    for name in names:
        b, t = med[(name, "bystander")], med[(name, "target")]
        db, dt = b - med[("none", "bystander")], t - med[("none", "target")]
        out.append(f"| {name} | {b:.{decimals}f} | {t:.{decimals}f} | {db:+.{decimals}f} | {dt:+.{decimals}f} |")
    return out


MICRO_RING_ROUNDS = 7
MICRO_RING_OPS, MICRO_RING_SMALL = 4_200_000, 200_000
RING_BATCH = 32
RING_NOP_C = r"""
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int fail(const char *what, int err) {
    fprintf(stderr, "ring_nop: %s: %s\n", what, strerror(-err));
    return 1;
}
int main(int argc, char **argv) {
    long n = argc == 2 ? atol(argv[1]) : 0;
    if (n <= 0) return fail("usage: ring_nop N (N > 0)", -EINVAL);
    struct io_uring ring;
    int r = io_uring_queue_init(BATCH, &ring, 0);
    if (r < 0) return fail("io_uring_queue_init", r);
    for (long done = 0; done < n;) {
        int b = n - done < BATCH ? (int)(n - done) : BATCH;
        for (int i = 0; i < b; i++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            if (!sqe) return fail("io_uring_get_sqe", -EBUSY);
            io_uring_prep_nop(sqe);
        }
        r = io_uring_submit_and_wait(&ring, b);  /* NOPs complete inline: one io_uring_enter per batch */
        if (r < 0) return fail("io_uring_submit_and_wait", r);
        if (r != b) return fail("io_uring_submit_and_wait: short submission", -EAGAIN);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            if (cqe->res < 0) return fail("nop", cqe->res);
            seen++;
        }
        if (seen != (unsigned)b) return fail("io_uring_submit_and_wait: completions missing", -EAGAIN);
        io_uring_cq_advance(&ring, seen);
        done += b;
    }
    io_uring_queue_exit(&ring);
    return 0;
}
"""
NOP = RING_OPS.index("nop")  # IORING_OP_NOP, opcode 0


def micro_ring(n_rounds: int, big: int) -> str:
    """Per io_uring operation: the counting set (its io_uring tracepoints), attached and detached, vs none."""

    exe = _build(RING_NOP_C, "ring_nop", flags=(f"-DBATCH={RING_BATCH}",), libs=("-luring",))

    def cost(probe, name: str, who: str, pid_for, n: int) -> float:
        cpu = _loop_cpu(exe, n, probe, pid_for, "the io_uring NOP loop")
        if probe is not None:  # the tracepoints counted the target's every operation, and nothing else
            snap = probe.snapshot()
            nops, done = (snap.ring or {}).get(NOP, 0), snap.cpu["ring_done"]
            counts = name == "counting" and who == "target"
            if not (nops >= n and done >= n if counts else nops == done == 0):
                raise RuntimeError(f"{name} as {who} of a loop of {n} NOPs counted {nops} NOP submissions and "
                                   f"{done} completions: its io_uring tracepoints did not fire as they should")
        return cpu

    # `none` has no set loaded at all (nothing resident either), so each round loads the set anew after it and
    # closes it at the end; `counting-detached` checks that the set's io_uring hooks really are off.
    variants = ("none", "counting-detached", "counting")
    bystander = subprocess.Popen(["sleep", "3600"], stdout=subprocess.DEVNULL)
    raw: dict[tuple[str, str], list[float]] = {}
    rows = ["| instrumentation | bystander ns/operation | target ns/operation | added, bystander | added, target |",
            "|---|---|---|---|---|"]
    try:
        for r in range(n_rounds):
            probe = None
            try:
                for name in variants:
                    if name != "none" and probe is None:
                        probe = CountingProbes(attached=False)
                    if name == "counting":
                        probe.attach()
                    for who, pid_for in (("bystander", lambda pid: bystander.pid), ("target", lambda pid: pid)):
                        x = (cost(probe, name, who, pid_for, big) - cost(probe, name, who, pid_for, MICRO_RING_SMALL)) \
                            / (big - MICRO_RING_SMALL) * 1e9
                        raw.setdefault((name, who), []).append(x)
            finally:
                if probe is not None:
                    probe.close()
            print(f"round {r + 1}/{n_rounds}: " + ", ".join(
                f"{n}/{w} {xs[-1]:.1f}" for (n, w), xs in raw.items()), file=sys.stderr, flush=True)
    finally:
        bystander.kill()
        bystander.wait()
        shutil.rmtree(exe.parent, ignore_errors=True)
    return "\n".join(rows + _cost_rows(raw, variants, 1))

if __name__ == "__main__":
    sys.exit(main())
