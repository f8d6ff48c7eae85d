"""Folded stacks → interactive SVG (hover, click-zoom, search) with inferno, and differential graphs.

inferno is required for SVGs (scripts/setup-system.sh installs it); without it sample() still writes
the folded files and says why the SVGs are missing — a home-made renderer would be a second,
less capable FlameGraph to maintain.
"""

from __future__ import annotations

import os
import shutil

from netprof.profiler import atomic, procs

RENDER_TIMEOUT = 60.0

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
    """`inferno-flamegraph` etc.: PATH, else where setup/cargo put them."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/local/bin", os.path.expanduser("~/.cargo/bin")):
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def render(folded: str, out_svg: str, *, view: str, title: str, subtitle: str | None = None) -> None:
    """Render one view's folded file. Raises RuntimeError with inferno's message on failure."""
    exe = inferno_binary("inferno-flamegraph")
    if exe is None:
        raise RuntimeError("inferno-flamegraph not installed (make setup, or: cargo install inferno --locked)")
    style = VIEW_STYLE.get(view, VIEW_STYLE["oncpu"])
    argv = [exe, "--title", title, "--colors", style["colors"], "--bgcolors", style["bgcolors"],
            "--countname", style["countname"], "--hash", "--minwidth", "0.05", os.path.abspath(folded)]
    if subtitle:
        argv[1:1] = ["--subtitle", subtitle]
    _run_to_file(argv, out_svg)


def diff(folded_a: str, folded_b: str, out_svg: str, *, title: str) -> str:
    """Differential flamegraph of B against A: shapes are B, red = grew, blue = shrank.

    `inferno-diff-folded --normalize` scales A's counts to B's total first, so runs with different
    sample counts (or durations) compare by share of time, not raw sample numbers.
    """
    diff_exe = inferno_binary("inferno-diff-folded")
    fg_exe = inferno_binary("inferno-flamegraph")
    if diff_exe is None or fg_exe is None:
        raise RuntimeError("inferno not installed (make setup, or: cargo install inferno --locked)")
    d = procs.run([diff_exe, "--normalize", os.path.abspath(folded_a), os.path.abspath(folded_b)],
                  timeout=RENDER_TIMEOUT)
    if d.returncode != 0:
        raise RuntimeError(f"inferno-diff-folded failed: {d.stderr.strip()[-300:]}")
    sub = (f"B = {os.path.basename(folded_b)} vs A = {os.path.basename(folded_a)}; "
           "red grew, blue shrank (A normalised to B)")
    argv = [fg_exe, "--title", title, "--subtitle", sub, "--hash", "--minwidth", "0.05"]
    _run_to_file(argv, out_svg, stdin=d.stdout)
    return out_svg


def _run_to_file(argv: list[str], out_svg: str, stdin: str | None = None) -> None:
    r = procs.run(argv, input=stdin, timeout=RENDER_TIMEOUT)
    if r.returncode != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} failed: {r.stderr.strip()[-300:]}")
    atomic.write_text(out_svg, r.stdout)
