"""What a server is called when the user gave it no name (`--cmd`, `--attach` without `--name`, `netprof watch`):
its program's name, or for a Python interpreter the module or script it runs, so that `python -m uvicorn app:app`
reads "uvicorn" in every table and line, not "python", and two servers of one interpreter are told apart."""

from __future__ import annotations

import os
import re
import shlex

import psutil

# A Python interpreter as a command's program: python, python3.13, python3.13t, pypy3.
PYTHON_PROGRAM = re.compile(r"(python|pypy)[0-9.]*t?")
PYTHON_OPTIONS_WITH_ARG = "cmWX"  # python -m MOD, -c CMD, -W ARG, -X OPT; every other one-letter option is a flag
UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")  # a label is part of file names (the cell's slug)


# Programs that start the server rather than being it: `uv run uvicorn ...` is uvicorn (`X run PROG`), as are
# `env NAME=VALUE uvicorn ...`, `exec uvicorn ...` and `sh -c 'exec uvicorn ...'`.
RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye"})
# netprof's own backends as `python -m netprof.backends NAME` (run/cell.py starts them so; a user may too, then
# `--attach` one): the backend's name, as the built-in run labels it.
OWN_BACKENDS = "netprof.backends"
SHELLS = frozenset({"sh", "bash", "dash", "zsh"})


def label(argv: list[str]) -> str:
    """`python -m uvicorn app:app` is "uvicorn", `python old/app.py` "old_app.py", `python /srv/app.py` "app.py",
    `gunicorn ...` "gunicorn", a title a server set itself ("gunicorn: master [app:app]") its first word,
    `uv run uvicorn ...` "uvicorn"; "" for an empty command line."""
    argv = _past_runners(argv)
    prog = os.path.basename(argv[0]) if argv else ""
    what = _python_runs(argv[1:]) if PYTHON_PROGRAM.fullmatch(prog) else None
    if what and os.path.isabs(what):
        what = os.path.basename(what)
    return UNSAFE.sub("_", what or prog).strip("_")


def of_process(pid: int) -> str:
    """A running process's label from its command line (its name when that cannot be read), or "pid123"."""
    try:
        p = psutil.Process(pid)
        try:
            argv = p.cmdline()
        except psutil.Error:  # another user's, under hidepid
            argv = []
        return label(argv or [p.name()]) or f"pid{pid}"
    except psutil.Error:
        return f"pid{pid}"  # it exited


def _past_runners(argv: list[str]) -> list[str]:
    """The command line past what only starts the server (RUNNERS' `run`, env's settings, exec, a shell's -c)."""
    for _ in range(4):  # a few wrappers deep at most
        prog = os.path.basename(argv[0]) if argv else ""
        if prog in RUNNERS and argv[1:2] == ["run"] and argv[2:3] and not argv[2].startswith("-"):
            argv = argv[2:]
        elif prog == "env" and (rest := [a for a in argv[1:] if "=" not in a]) and not rest[0].startswith("-"):
            argv = argv[argv.index(rest[0]):]
        elif prog == "exec" and argv[1:2]:
            argv = argv[1:]
        elif prog in SHELLS and argv[1:2] == ["-c"] and argv[2:3]:
            try:
                inner = shlex.split(argv[2])
            except ValueError:
                break
            if not inner or any(t in ("&&", "||", "|", ";") or t.endswith(";") for t in inner):
                break  # a script, not one command: the shell's name
            argv = inner
        else:
            break
    return argv


def _python_runs(args: list[str]) -> str | None:
    """The module (-m) or script a Python command line runs; None for -c or a bare interpreter."""
    it = iter(args)
    for a in it:
        if a == "--" or not a.startswith("-") or a == "-":
            script = next(it, None) if a == "--" else a
            return script.removeprefix("./") if script and script != "-" else None
        if a.startswith("--"):
            if a == "--check-hash-based-pycs":
                next(it, None)
            continue
        for i, c in enumerate(a[1:], 1):  # a cluster of flags, e.g. -uOm, whose last may take the next word
            if c in PYTHON_OPTIONS_WITH_ARG:
                value = a[i + 1:] or next(it, "")
                if c == "m":
                    if value == OWN_BACKENDS and (name := next(it, "")) and not name.startswith("-"):
                        return name
                    return value or None
                if c == "c":
                    return None
                break
    return None
