"""The `netprof` command: the CLI (cli.py), with the slow starts of `run` begun first.

Three things a short run waits for before its first cell do not need each other: importing the CLI, pandas
and the report (~0.5 s), compiling the counting set (~0.35 s of BCC's C++, the GIL released) and the report's
drawing process importing matplotlib (~0.4 s, plotset.warm). Begun one after the other they were most of a
1-second run's start-up; here the compile starts in a thread and the drawing process is forked before the
CLI is imported, so the three share the CPUs (bench/startup.py). A run with --breakdown or --sockwait, and
watch, compile one more set (~0.7-1.5 s): it is queued behind the counting set in the same thread (BCC compiles
one at a time). A guess from the raw arguments, before typer
parses them: a wrong one costs work nobody takes (a compile: load() takes one only for the same source and
flags; a drawing process: it exits with netprof), never a wrong result; refused input leaves at once, waiting
for neither (_leave_refused).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from netprof.profiler.core import rootenv
from netprof.profiler.core.errors import EXIT_BAD_INPUT

MEASURING = ("run", "ab", "knee")  # commands whose cells carry the counting set unless --no-probes


def _here(args: list[str]) -> bool:
    """The command runs its cells on this host (not `--server-host`, not help)."""
    return not {"-h", "--help", "--server-host"} & set(args) and not any(a.startswith("--server-host=") for a in args)


# Set to 1: begin nothing ahead. Where no CPU is idle (a CI job running tests side by side, a script that
# calls netprof many times on a busy host) the work begun ahead only competes with the command's own: a
# command refused after parsing spends ~0.75 s of CPU on it (1.0 s against 0.25 s here), a run gains nothing
# from overlap that no idle CPU can give. `make test` sets it for its first pass (tests four at a time).
NO_PREFETCH_ENV = "NETPROF_NO_PREFETCH"


def _ahead(args: list[str]) -> bool:
    return os.environ.get(NO_PREFETCH_ENV, "") != "1" and _here(args)


def counting_wanted(args: list[str]) -> bool:
    return bool(args) and args[0] in MEASURING and "--no-probes" not in args and _ahead(args)


def report_wanted(args: list[str]) -> bool:
    return bool(args) and args[0] == "run" and "--no-report" not in args and _ahead(args)


def probe_set_wanted(args: list[str]) -> str | None:
    """The socket-wait family's set the command will compile after the counting set: `breakdown` (run
    --breakdown), `sockwait` (run --sockwait) or `watch`; None for none (~0.7-1.5 s of compile each)."""
    if not args or not _ahead(args) or "--no-probes" in args:
        return None
    if args[0] == "watch":
        return "watch"
    if args[0] != "run":
        return None
    return "breakdown" if "--breakdown" in args else "sockwait" if "--sockwait" in args else None


def _routes(args: list[str]) -> int | None:
    """watch's --routes N as typed (None: not given, or not a number, which watch refuses)."""
    for i, a in enumerate(args):
        if a.startswith("--routes="):
            value = a.partition("=")[2]
        elif a == "--routes" and i + 1 < len(args):
            value = args[i + 1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def _prefetch_set(name: str, args: list[str]) -> None:
    if name == "watch":
        from netprof.probes.watch import watch

        routes = _routes(args)
        watch.prefetch(watch.ROUTES if routes is None else routes)
    elif name == "breakdown":
        from netprof.probes.breakdown import breakdown

        breakdown.prefetch()
    else:
        from netprof.probes.sockwait import sockwait

        sockwait.prefetch()


def main() -> None:
    rootenv.setup()  # first: nothing may find files through the caller's HOME or TMPDIR (the compile reads files)
    args = sys.argv[1:]
    if counting_wanted(args):
        from netprof.probes.counting import counting

        counting.prefetch(syscall_time="--syscall-time" in args)
    if report_wanted(args):
        # The report's drawing process (plotset.warm), forked now: its matplotlib import runs beside the
        # compile and the CLI's imports instead of after them; `run` adopts it.
        from netprof.profiler.report import plotset, report

        plotset.begin(report._draw, report.DRAW_PRELOAD)
    if (probe_set := probe_set_wanted(args)) is not None:
        # queued behind the counting set's compile, in the same worker (base.prefetch): the run checks them in
        # that order. The set's modules are light (~50 ms with its BTF offsets): the instruments' rows, which
        # import pandas, are imported later (probes/sockwait/__init__.py)
        _prefetch_set(probe_set, args)
    from netprof.profiler import cli  # the rest of the imports, beside the compile

    try:
        cli.main()
    except SystemExit as e:
        if e.code == EXIT_BAD_INPUT:
            _leave_refused()
        raise


def _leave_refused() -> NoReturn:
    """Refused input (exit 2) leaves before anything started, so what was begun ahead has no taker: the
    compile thread, which a normal exit waits for (not a daemon, base.prefetch), ~0.35 s of a CPU and
    seconds on a busy host, and the drawing process's import. The drawing process is killed, the private
    temp directory removed (its exit handler would not run), and os._exit leaves without waiting for the
    thread and without finalizing the interpreter (so nothing unloads LLVM under it). Every command's refusal
    leaves so: a finalized interpreter runs the C++ libraries' static destructors, which can meet a library's
    thread pool still starting its threads (a refused `netprof report`, its parquet just read, aborted with
    "terminate called without an active exception", SIGABRT instead of exit 2, once in a fresh-clone run beside
    a busy neighbour on 2026-12-06; five threads, some started by others, are up by then)."""
    plotset = sys.modules.get("netprof.profiler.report.plotset")  # begun ahead only if imported (not for pandas now)
    if plotset is not None:
        plotset.abandon()
    rootenv.remove_private()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
