"""Folded stacks → interactive SVG (hover, click-zoom, search) with inferno, and differential graphs.

inferno is required for SVGs (scripts/setup-system.sh installs it); without it sample() still writes
the folded files and says why the SVGs are missing — a home-made renderer would be a second,
less capable FlameGraph to maintain.
"""

from __future__ import annotations

import os
import tempfile

from netprof.profiler.core import atomic, paths, procs

RENDER_TIMEOUT = 60.0
MAX_FOLDED = 64 << 20  # a folded file named on the command line (`flamegraph diff`): far above a real one

# Per view: palette and background. `java` colours by our annotation suffixes (fold.py):
# kernel orange, Python-jit green, interpreter aqua, other native red. `python` colours py-spy
# frames by path: application red, stdlib yellow, site-packages aqua. Off-CPU gets the blue
# background FlameGraph users associate with off-CPU graphs.
VIEW_STYLE = {
    "oncpu": {"colors": "java", "bgcolors": "yellow", "countname": "samples"},
    "python": {"colors": "python", "bgcolors": "yellow", "countname": "samples"},
    "offcpu": {"colors": "java", "bgcolors": "blue", "countname": "us"},
    "mixed": {"colors": "java", "bgcolors": "green", "countname": "samples"},
}


def inferno_binary(name: str) -> str | None:
    """`inferno-flamegraph` etc.: PATH, else where setup/cargo put them; only a binary root may run
    (paths.untrusted_reason): a PATH entry or a ~/.cargo/bin of another user (sudo -E keeps the
    caller's PATH and, outside the CLI, HOME) supplies none."""
    found = paths.trusted_which(name)
    if found:
        return found
    for d in ("/usr/local/bin", os.path.expanduser("~/.cargo/bin")):
        path = os.path.join(d, name)
        if os.access(path, os.X_OK) and paths.untrusted_reason(path) is None:
            return path
    return None


def read_folded(path: str) -> str:
    """The folded stacks at `path`, a file of a results directory, for inferno's stdin. inferno never
    gets a path in a results directory: under sudo the caller owns that directory and could swap the
    file for a link to a root-only file (/etc/shadow), whose lines root's inferno would draw into the
    SVG. Read as results.py reads a run: no link of another user's on the way, none at the file, a
    regular file of root's or the sudo caller's."""
    from netprof.profiler.model import results  # not at import time: it loads pandas

    with results.open_input_path(path) as f:
        return f.read().decode("utf-8", "replace")


def render(folded: str, out_svg: str, *, view: str, title: str, subtitle: str | None = None) -> None:
    """Render one view's folded file. Raises RuntimeError with inferno's message on failure, InputError
    for a file netprof may not read (read_folded)."""
    exe = inferno_binary("inferno-flamegraph")
    if exe is None:
        raise RuntimeError("inferno-flamegraph not installed (make setup, or: cargo install inferno --locked)")
    style = VIEW_STYLE.get(view, VIEW_STYLE["oncpu"])
    argv = [exe, "--title", title, "--colors", style["colors"], "--bgcolors", style["bgcolors"],
            "--countname", style["countname"], "--hash", "--minwidth", "0.05"]  # no file: stdin
    if subtitle:
        argv[1:1] = ["--subtitle", subtitle]
    _run_to_file(argv, out_svg, stdin=read_folded(folded))


def diff(folded_a: str, folded_b: str, out_svg: str, *, title: str) -> str:
    """Differential flamegraph of B against A, both files of results directories (read_folded)."""
    return diff_stacks(read_folded(folded_a), read_folded(folded_b), out_svg, title=title,
                       names=(os.path.basename(folded_a), os.path.basename(folded_b)))


def diff_stacks(a: str, b: str, out_svg: str, *, title: str, names: tuple[str, str] = ("A", "B")) -> str:
    """Differential flamegraph of folded stacks `b` against `a`: shapes are B, red = grew, blue = shrank.

    `inferno-diff-folded --normalize` scales A's counts to B's total first, so runs with different
    sample counts (or durations) compare by share of time, not raw sample numbers. It reads files by
    name only: it gets private copies (a 0700 directory of root's), never a path the caller named.
    """
    diff_exe = inferno_binary("inferno-diff-folded")
    fg_exe = inferno_binary("inferno-flamegraph")
    if diff_exe is None or fg_exe is None:
        raise RuntimeError("inferno not installed (make setup, or: cargo install inferno --locked)")
    with tempfile.TemporaryDirectory(prefix="netprof-diff-") as tmp:
        copies = [os.path.join(tmp, f"{side}.folded") for side in "AB"]
        for copy, text in zip(copies, (a, b)):
            with open(copy, "x", encoding="utf-8") as f:
                f.write(text)
        d = procs.run([diff_exe, "--normalize", *copies], timeout=RENDER_TIMEOUT)
    if d.returncode != 0:
        raise RuntimeError(f"inferno-diff-folded failed: {d.stderr.strip()[-300:]}")
    sub = f"B = {names[1]} vs A = {names[0]}; red grew, blue shrank (A normalised to B)"
    argv = [fg_exe, "--title", title, "--subtitle", sub, "--hash", "--minwidth", "0.05"]
    _run_to_file(argv, out_svg, stdin=d.stdout)
    return out_svg


def _run_to_file(argv: list[str], out_svg: str, stdin: str | None = None) -> None:
    r = procs.run(argv, input=stdin, timeout=RENDER_TIMEOUT)
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} failed: {r.stderr.strip()[-300:]}")
    atomic.write_text(out_svg, r.stdout)
