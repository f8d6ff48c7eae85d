"""One sampling round: every requested view of the backend at once, while the load runs once.

All samplers cover the same window: the off-CPU BPF program is compiled first (its clang step takes
about a second), then perf and py-spy start and the off-CPU filter opens; everything ends after
`duration` seconds. Each view degrades on its own: a missing tool or a failed sampler leaves a note
and the other views still come out.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

from netprof.flamegraphs import render
from netprof.flamegraphs.fold import write_folded
from netprof.flamegraphs.oncpu import MIXED_MAX_HZ, PerfRecorder, perf_binary
from netprof.flamegraphs.pyspy import PySpyRecorder, pyspy_binary
from netprof.profiler.core import atomic, procs
from netprof.profiler.core.errors import InputError

if TYPE_CHECKING:
    from netprof.flamegraphs.offcpu import OffCpuProbe

VIEWS = ("oncpu", "python", "offcpu", "mixed")
DEFAULT_VIEWS = ("oncpu", "python", "offcpu")
# Scratch of one sampling round (perf.data, py-spy's raw output, jitdump copies): a private directory
# (mkdtemp: 0700) in the temp dir, named for the netprof process, so a later run can remove the
# scratch of one that was killed (`cleanup_stale`).
WORK_PREFIX = "netprof-flame-"
_WORK_NAME = re.compile(rf"^{WORK_PREFIX}(\d+)-")
VIEW_LABEL = {
    "oncpu": "on-CPU, kernel + native (perf cpu-clock, frame pointers)",
    "python": "Python (py-spy)",
    "offcpu": "off-CPU, blocked time (sched_switch)",
    "mixed": "mixed Python + native + kernel (perf DWARF + jitdump)",
}


@dataclass
class FlameArtifacts:
    """Paths are absolute. A view that could not be produced has None and a line in `notes`."""

    oncpu_svg: str | None = None
    oncpu_folded: str | None = None
    python_svg: str | None = None
    python_folded: str | None = None
    offcpu_svg: str | None = None
    offcpu_folded: str | None = None
    mixed_svg: str | None = None
    mixed_folded: str | None = None
    notes: list[str] = field(default_factory=list)
    # Per view: samples taken (oncpu, python, mixed), off-CPU events (offcpu) and µs (offcpu_us).
    samples: dict[str, int] = field(default_factory=dict)


def process_tree(pid: int) -> list[int]:
    """The backend and its (prefork/fork) children, as they are when sampling starts."""
    try:
        proc = psutil.Process(pid)
        return [pid] + [c.pid for c in proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        raise ValueError(f"no process {pid} to sample") from None


def cleanup_stale(directory: str | None = None) -> list[str]:
    """Remove the sampling scratch directories of netprof runs that died without cleaning up."""
    return procs.remove_stale(_WORK_NAME, directory)


def _bpf_missing() -> str | None:
    if os.geteuid() != 0:
        return "off-CPU needs root (BPF)"
    try:
        import bcc  # noqa: F401
    except Exception as e:
        return f"off-CPU needs BCC: {e}"
    return None


def view_missing(view: str) -> str | None:
    """Why `view` cannot run here, or None."""
    if view in ("oncpu", "mixed"):
        if perf_binary() is None:
            return f"{view}: perf not installed (Debian package linux-perf)"
        if os.geteuid() != 0:
            return f"{view}: perf needs root to see kernel stacks of another process"
    elif view == "python":
        if pyspy_binary() is None:
            return "python: py-spy not installed (pip install py-spy)"
    elif view == "offcpu":
        why = _bpf_missing()
        return f"offcpu: {why}" if why else None
    else:
        return f"unknown view {view!r} (choose from {', '.join(VIEWS)})"
    return None


def check_available(views=DEFAULT_VIEWS) -> str | None:
    """None when every view (and SVG rendering) can work; else one line naming what is missing."""
    problems = [m for v in views if (m := view_missing(v))]
    if render.inferno_binary("inferno-flamegraph") is None:
        problems.append("SVGs need inferno-flamegraph (make setup, or: cargo install inferno --locked)")
    return "; ".join(problems) or None


def compile_offcpu(views=DEFAULT_VIEWS) -> tuple[OffCpuProbe | None, str | None]:
    """The off-CPU view's BPF program, compiled (a few tenths of a second) before the window it samples
    opens: (probe, None), or (None, why not), or (None, None) when the view is not wanted or cannot run
    (sample() notes why). The caller hands the probe to sample(), which closes it."""
    if "offcpu" not in views or view_missing("offcpu"):
        return None, None
    try:
        from netprof.flamegraphs.offcpu import OffCpuProbe

        return OffCpuProbe(), None
    except Exception as e:  # compile/attach failure: the other views still run
        return None, f"offcpu: BPF program failed to load: {str(e).strip()[-300:]}"


def sample(pid: int, duration: float, outdir: str, *, title: str, rate_hz: int = 499,
           views=DEFAULT_VIEWS, cpus=None, offcpu: tuple[OffCpuProbe | None, str | None] | None = None
           ) -> FlameArtifacts:
    """Sample the running process tree `pid` for `duration` s; write <view>.folded/.svg into outdir.

    `cpus` pins the samplers (perf, py-spy), e.g. to the loader's CPUs, keeping the backend's CPU to
    the backend. `offcpu`: what compile_offcpu() returned ahead of the window (this closes the probe);
    without it the off-CPU program compiles here, after `pid`'s window began. Never raises for a view
    that fails; see `FlameArtifacts.notes`.
    """
    outdir = os.fspath(atomic.ensure_out_dir(os.path.abspath(outdir)))  # made as results are (atomic.py)
    art = FlameArtifacts()
    pids = process_tree(pid)
    wanted = []
    for v in views:
        why = view_missing(v)
        if why:
            art.notes.append(why)
        else:
            wanted.append(v)

    probe, why = offcpu if offcpu is not None else compile_offcpu(wanted)
    if why:
        art.notes.append(why)
    work = None
    recorders: dict[str, PerfRecorder | PySpyRecorder] = {}
    try:
        work = tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-")
        for v in wanted:
            if v in ("oncpu", "mixed"):
                recorders[v] = PerfRecorder(pids, duration, work, rate_hz=rate_hz, mixed=(v == "mixed"), cpus=cpus)
            elif v == "python":
                recorders[v] = PySpyRecorder(pid, duration, os.path.join(outdir, "python.folded"),
                                             rate_hz=rate_hz, cpus=cpus, workdir=work)
        for r in recorders.values():
            r.start()
        if probe is not None:
            probe.start(pids)
        time.sleep(duration)
        if not psutil.pid_exists(pid):
            art.notes.append(f"backend {pid} exited during sampling: views cover less than {duration:g} s "
                             "and off-CPU user frames may be unsymbolised")
        if probe is not None:
            stacks, events = probe.collect()
            path = os.path.join(outdir, "offcpu.folded")
            art.samples["offcpu_us"] = write_folded(stacks, path)
            art.samples["offcpu"] = events
            art.offcpu_folded = path
            if not stacks:
                art.notes.append("offcpu: no off-CPU time recorded for the target")
        for v, r in recorders.items():
            path = os.path.join(outdir, f"{v}.folded")
            if v == "python":
                assert isinstance(r, PySpyRecorder)
                n = r.finish(art.notes)
            else:
                assert isinstance(r, PerfRecorder)
                n = r.finish(path, art.notes)
            art.samples[v] = n
            if os.path.exists(path):
                setattr(art, f"{v}_folded", path)
    finally:
        for r in recorders.values():
            r.stop()
        if probe is not None:
            probe.close()
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)

    for v in wanted:
        folded = getattr(art, f"{v}_folded")
        if not folded or art.samples.get(v, 0) == 0:
            continue
        svg = os.path.join(outdir, f"{v}.svg")
        try:
            render.render(folded, svg, view=v, title=f"{title} — {VIEW_LABEL[v]}",
                          subtitle=_subtitle(v, art.samples, rate_hz, duration))
            setattr(art, f"{v}_svg", svg)
        except (RuntimeError, OSError, InputError) as e:  # InputError: a folded file swapped for a link
            art.notes.append(f"{v}: no SVG: {e}")
    return art


def _subtitle(view: str, samples: dict[str, int], rate_hz: int, duration: float) -> str:
    if view == "offcpu":
        return (f"{samples.get('offcpu', 0)} off-CPU events, {samples.get('offcpu_us', 0) / 1e6:.2f} s blocked "
                f"in a {duration:g} s window; widths = microseconds off CPU")
    rate = min(rate_hz, MIXED_MAX_HZ) if view == "mixed" else rate_hz
    return f"{samples.get(view, 0)} samples at {rate} Hz over {duration:g} s"
