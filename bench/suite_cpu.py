"""Where `make test`'s pytest passes spend the machine (issue 49), by the kernel's count: `make test-py` (both
passes, exactly as `make test` runs them) under bench/suite_cpu.bt, which reports every process as it exits (its
threads' CPU time, its parent, its exit status, its first two arguments), with /proc/stat sampled beside it. Each
process is put in the pass it started in and in a group by what it is (a forked child that never exec'd counts with
its parent); per pass: its wall time, the CPU its processes used, and how busy, idle and stolen the CPUs were.

    .venv/bin/python bench/suite_cpu.py [--bystander 0.25] [--write]
    .venv/bin/python bench/suite_cpu.py --from bench/data/suite_cpu/FILE.json [--write]

Root (bpftrace), on an otherwise idle machine: ~10 minutes. --bystander DUTY runs bench/bystander.py beside the
passes, the neighbour issue 49's acceptance puts there (started before them, its CPU is in the CPUs' busy time and in
no group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import lib
import results_md

DATA = lib.ROOT / "bench" / "data" / "suite_cpu"
PROGRAM = Path(__file__).with_name("suite_cpu.bt")
HEADING = "Where the suite's CPU goes (bench/suite_cpu.py, issue 49)"
PASSES = ("first pass (-n 4, not serial)", "second pass (serial)")
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PROCESS_FIELDS = ("pid", "parent", "wait_status", "start_ns", "exit_ns", "comm", "argv1", "argv2", "cpu_us")


def stat_sampler(samples: list, stop: threading.Event) -> None:
    """/proc/stat's first line every 0.5 s, as "monotonic-ns user nice system ..." (clock ticks), timed on
    CLOCK_MONOTONIC: the clock the program's times are on."""
    while True:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:len(STAT_FIELDS) + 1]
        samples.append(" ".join([str(time.monotonic_ns()), *fields]))
        if stop.wait(0.5):
            return


def measure(bystander: float | None) -> dict:
    samples: list = []
    stop = threading.Event()
    sampler = threading.Thread(target=stat_sampler, args=(samples, stop))
    trace = subprocess.Popen(["bpftrace", "-B", "full", str(PROGRAM)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(trace.stdout))
    reader.start()
    time.sleep(5)  # bpftrace compiles and attaches (it prints nothing when it has)
    if trace.poll() is not None:
        sys.exit(f"bpftrace ended: {trace.stderr.read()[-2000:]}")
    neighbour = None
    if bystander is not None:
        neighbour = subprocess.Popen([sys.executable, str(lib.ROOT / "bench" / "bystander.py"), "--duty",
                                      str(bystander), "--seconds", "2400"])
    sampler.start()
    try:
        # as `make test` runs it (its setup first, so the account holds the passes alone)
        subprocess.run(["make", "-s", "setup"], cwd=lib.ROOT, check=True)
        made = subprocess.run(["make", "-s", "test-py"], cwd=lib.ROOT, capture_output=True, text=True,
                              env={**os.environ, "CI": "true", "NETPROF_REQUIRE_BPF": "1"})  # as .ci/run
    finally:
        if neighbour is not None:
            neighbour.terminate()
            neighbour.wait()
        time.sleep(1)  # the last exits reach the program's output
        stop.set()
        sampler.join()
        trace.send_signal(signal.SIGINT)
        trace.wait(30)
        reader.join()
    summary = [ln for ln in made.stdout.splitlines() if " passed" in ln or " failed" in ln]
    return {"exit_code": made.returncode, "pytest": summary, "clock_ticks_per_s": os.sysconf("SC_CLK_TCK"),
            "stat_fields": STAT_FIELDS, "stat": samples, "process_fields": PROCESS_FIELDS, "processes": parse(lines),
            "bystander": bystander}


def parse(lines: list[str]) -> list[str]:
    """The program's records, one tab-separated line each (PROCESS_FIELDS): a line per process in the raw file."""
    recs: dict[int, dict] = defaultdict(dict)
    for line in lines:
        kind, _, rest = line.rstrip("\n").partition(" ")
        pid_s, _, value = rest.partition(" ")
        if kind not in ("E", "A", "B", "C") or not pid_s.isdigit():
            continue
        r = recs[int(pid_s)]
        if kind == "E":
            parent, status, start, end, comm = value.split(" ", 4)
            r.update(parent=int(parent), status=int(status), start=int(start), end=int(end), comm=comm)
        else:
            r[kind] = value
    return ["\t".join(str(x) for x in (pid, r["parent"], r["status"], r["start"], r["end"], r["comm"], r.get("A", ""),
                                       r.get("B", ""), r.get("C", 0))) for pid, r in recs.items() if "comm" in r]


def records(doc: dict) -> dict[int, list]:
    """pid: [pid, parent, status, start_ns, exit_ns, comm, argv1, argv2, cpu_us], numbers as numbers."""
    out = {}
    for line in doc["processes"]:
        f = line.split("\t")
        rec = [int(f[0]), int(f[1]), int(f[2]), int(f[3]), int(f[4]), f[5], f[6], f[7], int(f[8])]
        out[rec[0]] = rec
    return out


def group(rec: list) -> str | None:
    """What a process is, from its name and arguments; None for a process forked and never exec'd."""
    _, _, status, _, _, comm, a1, a2, _ = rec
    if comm in ("python", "python3"):
        if (a1, a2) == ("-m", "pytest"):
            return "pytest (the second pass runs its tests' own code in it; the first pass's only collects)"
        if (a1, a2) == ("-u", "-c"):
            return "pytest-xdist workers (the first pass's tests' own code)"
        if a1 == "-m" and a2.startswith("netprof.backends"):
            return "backends (python -m netprof.backends)"
        if a1 == "-m" and a2.startswith("netprof.profiler.run.reap"):
            return "the runs' watchdogs"
        if a1.endswith("bystander.py") or a2.endswith("bystander.py"):
            return "bench/bystander.py"
        if (a1, a2) == ("-m", "netprof.profiler"):
            return "netprof agents (-m netprof.profiler, on the lab's hosts)"
        if a1 in ("-c", "-I"):
            return "python -c children of the tests"
        if not a1:
            return None
        return "other python (the tests' own servers: --cmd, spin_echo.py, uvicorn, gunicorn)"
    if comm == "netprof":
        if not a1:
            return None
        exited = status >> 8 if status & 0x7F == 0 else None
        return f"netprof {a1}" + (" (refused: exit 2)" if exited == 2 else "")
    if comm == "netprof-loader":
        return "netprof-loader"
    return comm


def account(doc: dict) -> tuple[list[dict], dict]:
    """Per pass: its span (its pytest main process's life), its processes' CPU by group, and /proc/stat over it."""
    procs = records(doc)
    mains = sorted((r for r in procs.values() if r[5] in ("python", "python3") and (r[6], r[7]) == ("-m", "pytest")),
                   key=lambda r: r[3])
    if len(mains) != 2:
        sys.exit(f"expected make test-py's two pytest processes, found {len(mains)}")

    def named(r: list) -> str:
        seen = set()
        while (g := group(r)) is None and r[1] in procs and r[0] not in seen:  # a fork: its parent's group
            seen.add(r[0])
            r = procs[r[1]]
        return g if g is not None else r[5]

    hz = doc["clock_ticks_per_s"]
    stat = [[int(x) for x in s.split()] for s in doc["stat"]]

    def stat_between(t0: int, t1: int) -> dict:
        a = min(stat, key=lambda s: abs(s[0] - t0))[1:]
        b = min(stat, key=lambda s: abs(s[0] - t1))[1:]
        d = dict(zip(doc["stat_fields"], ((y - x) / hz for x, y in zip(a, b))))
        busy = sum(v for k, v in d.items() if k not in ("idle", "iowait", "steal"))
        return {"busy_cpu_s": busy, "idle_cpu_s": d["idle"] + d["iowait"], "stolen_cpu_s": d["steal"]}

    passes = []
    for name, main in zip(PASSES, mains):
        t0, t1 = main[3], main[4]
        by: dict[str, list] = defaultdict(lambda: [0, 0.0])
        for r in procs.values():
            if t0 <= r[3] <= t1:
                g = by[named(r)]
                g[0] += 1
                g[1] += r[8] / 1e6
        passes.append({"name": name, "wall_s": (t1 - t0) / 1e9, "groups": dict(by), **stat_between(t0, t1)})
    return passes, {"pytest": doc["pytest"], "exit_code": doc["exit_code"]}


def table(passes: list[dict], top: int = 12) -> str:
    out = []
    for p in passes:
        total = sum(c for _, c in p["groups"].values())
        out.append(f"**{p['name']}**: {p['wall_s']:.1f} s; the CPUs busy {p['busy_cpu_s']:.0f} CPU-s, idle "
                   f"{p['idle_cpu_s']:.0f}, stolen {p['stolen_cpu_s']:.0f} (/proc/stat); the processes that started "
                   f"in it and exited used {total:.0f} CPU-s.\n")
        out.append("| group | processes | CPU-s | share |\n|---|---|---|---|")
        rows = sorted(p["groups"].items(), key=lambda kv: -kv[1][1])
        for g, (n, cpu) in rows[:top]:
            out.append(f"| {g} | {n} | {cpu:.1f} | {cpu / total:.0%} |")
        rest = rows[top:]
        if rest:
            n, cpu = sum(v[0] for _, v in rest), sum(v[1] for _, v in rest)
            out.append(f"| {len(rest)} other groups | {n} | {cpu:.1f} | {cpu / total:.0%} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = lib.cli(__doc__, rounds=1)
    ap.add_argument("--bystander", type=float, metavar="DUTY", help="bench/bystander.py --duty DUTY beside the passes")
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        if os.geteuid() != 0:
            sys.exit("root: bpftrace loads the program")
        doc = lib.keep("suite_cpu", DATA, **measure(args.bystander))
    passes, result = account(doc)
    duty = doc["bystander"]
    measured = "`.venv/bin/python bench/suite_cpu.py" + (f" --bystander {duty}`" if duty is not None else "`")
    neighbour = f"beside `bench/bystander.py --duty {duty}`" if duty is not None else "nothing else running"
    intro = (f"Measured by {measured}; table by {results_md.command()}; commit {doc['commit']}, {doc['date']}, "
             f"{neighbour}. pytest: {'; '.join(ln.strip('= ') for ln in result['pytest'])} (make's exit "
             f"{result['exit_code']}). A process counts in the pass it started in (a neighbour started before the "
             "passes is in the CPUs' busy time, not in a group); a child forked and never exec'd, with its parent.")
    results_md.publish(HEADING, intro, table(passes), args.write)


if __name__ == "__main__":
    main()
