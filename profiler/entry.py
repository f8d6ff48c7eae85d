"""The `netprof` command: the CLI (cli.py), with the slow starts of `run` begun first.

Three things a short run waits for before its first cell do not need each other: importing the CLI, pandas
and the report (~0.5 s), compiling the counting set (~0.35 s of BCC's C++, the GIL released) and the report's
drawing process importing matplotlib (~0.4 s, plotset.warm). Begun one after the other they were most of a
1-second run's start-up; here the compile starts in a thread and the drawing process is forked before the
CLI is imported, so the three share the CPUs (bench/startup.py). A guess from the raw arguments, before typer
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
    from netprof.profiler import cli  # the rest of the imports, beside the compile

    try:
        cli.main()
    except SystemExit as e:
        if e.code == EXIT_BAD_INPUT and (counting_wanted(args) or report_wanted(args)):
            _leave_refused()
        raise


def _leave_refused() -> NoReturn:
    """Refused input (exit 2) leaves before anything started, so what was begun ahead has no taker: the
    compile thread, which a normal exit waits for (not a daemon, base.prefetch), ~0.35 s of a CPU and
    seconds on a busy host, and the drawing process's import. The drawing process is killed, the private
    temp directory removed (its exit handler would not run), and os._exit leaves without waiting for the
    thread and without finalizing the interpreter (so nothing unloads LLVM under it)."""
    from netprof.profiler.report import plotset

    plotset.abandon()
    rootenv.remove_private()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
