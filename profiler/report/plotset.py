"""The report's plots as a set: which there are, drawn off the report's critical path, kept by content.

Drawing is a second of a report's time (importing matplotlib ~0.5 s, drawing six SVGs ~0.9 s), so:
- `start` forks children that import matplotlib and draw while the report does the rest of its work
  (analysis, tables, templates); `Pending.result` collects their SVGs. The parent never imports
  matplotlib. A child that fails leaves its plots to be drawn in the parent, as before.
- `netprof run` starts its drawing process before the run (`warm`: while BPF compiles, and waited for
  before the first cell, so its import never overlaps a measured load): it imports matplotlib and
  then sleeps on a pipe until the report hands it the data, when it forks a sibling (matplotlib
  already imported: the fork is free) and the two draw half the set each. The report's wait for its
  plots is then the drawing alone, shared by both CPUs, instead of an import and six plots in a row.
- A set already drawn for the same data is reused: `netprof report DIR` after the run (or again) finds
  it in netprof's cache (profiler/core/cache.py) and draws nothing. The key hashes everything that decides
  the pictures: the per-cell table and per-connection rows (every value, exactly), netprof's and
  matplotlib's versions, and the source of the modules that draw (plots.py, mpl.py, units.py, schema.py).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import json
import os
import pickle
import select
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import netprof
from netprof.profiler.core import atomic, cache, procs, units
from netprof.profiler.model import schema

# name, title, caption: the page's order (plots.FIGURES draws each); {per}, {one} and {many} are the words of the
# cells' protocols (`worded`: 'per request', 'request', 'requests' for HTTP), {latency} what their latency is
PLOTS = (
    ("throughput", "Throughput", "{many} per second, one line per backend (and other varying dimension)"),
    ("latency", "Latency", "p50 / p95 / p99 / p999 {latency}"),
    ("latency_load", "Latency against load", "open loop (--rate): p50 / p99 from each request's intended send time "
     "at each rate asked"),
    ("syscalls", "Syscalls {per}", "what every {one} costs in system calls"),
    ("cpu", "CPU split", "backend CPU time {per}, kernel vs user"),
    ("fairness", "Fairness", "how {many} were spread across connections (Lorenz curves)"),
    ("per_conn", "Per-connection distribution", "{many} each connection got, against the fair share"),
)


def worded(text: str, cells: pd.DataFrame | None) -> str:
    """A PLOTS title or caption in the words of `cells`' protocols."""
    p = cells.get("protocol") if cells is not None else None
    axis, _, seen = schema.latency_seen(cells)
    return text.format(per=units.per_unit(p), one=units.exchange(p), many=units.exchanges(p), latency=f"{axis} {seen}")
# what draws; a change to one draws anew (paths under profiler/)
SOURCES = ("report/plots.py", "kit/mpl.py", "core/units.py", "model/schema.py")
# Drawing processes: each imports matplotlib (~0.45 s of CPU), so on 2 CPUs one child beside the parent
# (which writes the rest of the report meanwhile) is as quick as two and much lighter on a busy host.
CHILDREN = 1 if (os.cpu_count() or 1) <= 2 else 2
# A warm drawing process (`warm`) forks its helpers from itself, matplotlib already imported: a fork costs
# nothing, so the set is split in two whatever the CPU count (the report's own work is the third share).
WARM_SHARES = 2
READY_TIMEOUT_S = 10.0  # a warm process not ready by then is stopped (the report forks its own children)
KEEP = 32  # plot sets kept in the cache (newest first): a set is ~100 KB
SVG_URI = "data:image/svg+xml;base64,"

Draw = Callable[[str, pd.DataFrame, "pd.DataFrame | None"], "bytes | None"]


@dataclass
class Plot:
    name: str
    title: str
    caption: str
    path: str   # relative to the results directory
    data_uri: str  # data:image/svg+xml;base64,… for the self-contained HTML

    @property
    def anchor(self) -> str:
        return f"plot-{self.name}"


# ---------------------------------------------------------------------------------------------
# The cache, by content.

def _frame(h, df: pd.DataFrame | None) -> None:
    """Every column's name, type and exact values into the hash (numbers by their bytes)."""
    if df is None:
        h.update(b"\0none")
        return
    h.update(repr((list(df.columns), [str(t) for t in df.dtypes], list(df.index))).encode())
    for col in df.columns:
        v = df[col].to_numpy()
        h.update(v.tobytes() if v.dtype.kind in "biufcmM" else "\x1f".join(map(repr, v)).encode())


def key(cells: pd.DataFrame, per_conn: pd.DataFrame | None) -> str:
    h = hashlib.sha256()
    try:
        mpl_version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        mpl_version = "?"
    h.update(f"{netprof.__version__}\0{mpl_version}\0".encode())
    here = Path(__file__).parents[1]
    for name in SOURCES:
        h.update((here / name).read_bytes())
    _frame(h, cells)
    _frame(h, per_conn)
    return h.hexdigest()


def _entry(k: str) -> str | None:
    where = cache.directory("plots")
    return os.path.join(where, f"{k}.json") if where else None


def _cached(k: str) -> dict[str, bytes | None] | None:
    """name → SVG (None: the plot does not apply) of the set stored under `k`, or None on a miss."""
    path = _entry(k)
    raw = cache.read_bytes(path) if path else None
    try:
        doc = json.loads(raw) if raw else None
        if not isinstance(doc, dict) or doc.get("key") != k:
            return None
        svgs = doc["svgs"]
        return {name: None if svgs[name] is None else base64.b64decode(svgs[name]) for name, _, _ in PLOTS}
    except (ValueError, TypeError, KeyError):
        return None


def _store(k: str, svgs: dict[str, bytes | None]) -> None:
    """Keep the set under key `k`, and only the KEEP newest sets."""
    path = _entry(k)
    if path is None:
        return
    doc = {"key": k, "svgs": {n: None if b is None else base64.b64encode(b).decode() for n, b in svgs.items()}}
    cache.write_bytes(path, json.dumps(doc).encode())
    try:
        sets = sorted((e for e in os.scandir(os.path.dirname(path))
                       if e.name.endswith(".json") and e.is_file(follow_symlinks=False)),
                      key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
        for old in sets[KEEP:]:
            os.unlink(old.path)
    except OSError:
        pass  # another netprof pruned the same set first


# ---------------------------------------------------------------------------------------------
# Drawing in children.

def _shares(names: list[str], n: int) -> list[list[str]]:
    """`names` dealt out to n processes: alternate, so the per-connection panels (the slow ones) go one each."""
    return [share for i in range(n) if (share := names[i::n])]


def _draw_share(names: list[str], draw: Draw, cells: pd.DataFrame,
                per_conn: pd.DataFrame | None) -> dict[str, bytes | None]:
    return {n: draw(n, cells, per_conn) for n in names}


def _draw_into(w: int, share: list[str], siblings: list[tuple[int, int]], draw: Draw, cells: pd.DataFrame,
               per_conn: pd.DataFrame | None) -> None:
    """In a drawing child: close the siblings' read ends, draw `share`, send {name: SVG or None} down `w`."""
    for _, fd in siblings:
        os.close(fd)
    got = _draw_share(share, draw, cells, per_conn)
    with os.fdopen(w, "wb") as f:
        pickle.dump(got, f)


def _fork_shares(shares: list[list[str]], draw: Draw, cells: pd.DataFrame,
                 per_conn: pd.DataFrame | None) -> list[tuple[int, int]]:
    """A child per share, each drawing it (`_draw_into`); (pid, read end of its pipe) of each one started (a
    refused fork: fewer, and the caller draws what no child took). A netprof killed meanwhile leaves no
    drawing child behind (procs.fork_child)."""
    children: list[tuple[int, int]] = []
    for share in shares:
        forked = procs.fork_child(functools.partial(_draw_into, share=share, siblings=list(children), draw=draw,
                                                    cells=cells, per_conn=per_conn))
        if forked is None:
            break
        children.append(forked)
    return children


def _collect(children: list[tuple[int, int]]) -> dict[str, bytes | None]:
    """What the children drew (a child that failed: nothing of its share); every child reaped."""
    got: dict[str, bytes | None] = {}
    for pid, fd in children:
        with os.fdopen(fd, "rb") as f:
            data = f.read()  # read before waiting: an SVG set outgrows the pipe's buffer
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) == 0 and data:
            got.update(pickle.loads(data))
    return got


def _abandon(children: list[tuple[int, int]]) -> None:
    """Reap children whose result is not wanted: their pipe closed, a child still writing gets EPIPE."""
    for pid, fd in children:
        os.close(fd)
        os.waitpid(pid, 0)


class Pending:
    """Plots being drawn; `result()` waits for them and writes plots/."""

    def __init__(self, out_dir: Path, draw: Draw, cells: pd.DataFrame, per_conn: pd.DataFrame | None,
                 k: str | None = None, svgs: dict[str, bytes | None] | None = None) -> None:
        self.out_dir, self.draw, self.cells, self.per_conn, self.key = out_dir, draw, cells, per_conn, k
        self.svgs = svgs  # None: not known yet
        self.children: list[tuple[int, int]] = []  # (pid, read end of its pipe)

    def fork(self) -> None:
        self.children += _fork_shares(_shares([n for n, _, _ in PLOTS], CHILDREN), self.draw, self.cells,
                                      self.per_conn)

    def _collect(self) -> dict[str, bytes | None]:
        got = _collect(self.children)
        self.children = []
        return got

    def result(self) -> list[Plot]:
        if self.svgs is None:
            got = self._collect()
            # what no child drew (fork refused, a child failed) is drawn here
            self.svgs = {n: got[n] if n in got else self.draw(n, self.cells, self.per_conn) for n, _, _ in PLOTS}
            if self.key is not None:
                _store(self.key, self.svgs)
        return save(self.out_dir, [(n, worded(t, self.cells), worded(c, self.cells), self.svgs.get(n))
                                   for n, t, c in PLOTS])

    def __enter__(self) -> Pending:
        return self

    def __exit__(self, *exc) -> None:
        """Reap children whose result was never asked for (the report failed on the way)."""
        _abandon(self.children)
        self.children = []


# ---------------------------------------------------------------------------------------------
# A drawing process started ahead of the report.

def _warm_main(ready_w: int, job_r: int, out_w: int, draw: Draw, preload: Sequence[str]) -> None:
    """In the warm process: import `preload`, say so on `ready_w`, sleep until the job comes down `job_r`
    (EOF without one: nothing to draw), draw it with helpers forked from here, send {name: SVG or None}
    down `out_w`; leave without running the parent's exit handlers."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it still wants its plots
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)  # never holds the command's stdout (`--json` readers wait for its EOF)
        os.close(null)
        for name in preload:
            importlib.import_module(name)
        os.write(ready_w, b"R")
        os.close(ready_w)
        with os.fdopen(job_r, "rb") as f:
            job = f.read()
        if not job:
            code = 0
            return
        shares, cells, per_conn = pickle.loads(job)
        helpers = _fork_shares(shares[1:], draw, cells, per_conn)
        got: dict[str, bytes | None] = {}
        try:
            got = _draw_share(shares[0], draw, cells, per_conn)
        except Exception:
            pass  # this share is drawn by the parent instead, as a failed child's is
        got.update(_collect(helpers))
        with os.fdopen(out_w, "wb") as f:
            pickle.dump(got, f)
        code = 0
    finally:
        os._exit(code)


class Warm:
    """One drawing process, forked now (its `preload` imported at once) and given its job by `start`.
    `ready()` waits until the import is done; `close()` ends and reaps it if no report took it."""

    def __init__(self, draw: Draw, preload: Sequence[str]) -> None:
        self.draw, self.preload = draw, tuple(preload)
        self.pid: int | None = None
        self.ready_r = self.job_w = self.out_r = -1
        self.is_ready = False
        fds = [*os.pipe(), *os.pipe(), *os.pipe()]
        ready_r, ready_w, job_r, job_w, out_r, out_w = fds
        try:
            die_with_parent = procs.die_with(os.getpid())
            pid = os.fork()
        except OSError:
            for fd in fds:
                os.close(fd)
            return  # no warm process: the report forks its own children
        if pid == 0:
            die_with_parent()  # a netprof killed meanwhile leaves no drawing process behind
            for fd in (ready_r, job_w, out_r):
                os.close(fd)
            _warm_main(ready_w, job_r, out_w, draw, preload)
        for fd in (ready_w, job_r, out_w):
            os.close(fd)
        self.pid, self.ready_r, self.job_w, self.out_r = pid, ready_r, job_w, out_r

    def ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Wait until the process has imported what it draws with (True), or is gone: failed, or not
        ready in `timeout` seconds and killed (False; the report forks its own children then)."""
        if self.pid is None or self.is_ready:
            return self.is_ready
        readable, _, _ = select.select([self.ready_r], [], [], timeout)
        self.is_ready = bool(readable) and os.read(self.ready_r, 1) == b"R"
        if not self.is_ready:
            if readable:
                self.close()
            else:  # still importing: it must not work on into the measured load
                self.kill()
        return self.is_ready

    def kill(self) -> None:
        """End the process now, whatever it is doing (SIGKILL), and reap it."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
        self.close()

    def take(self, cells: pd.DataFrame, per_conn: pd.DataFrame | None) -> tuple[int, int] | None:
        """Hand the process its job: (pid, read end of its result), as a child of `Pending`; None when it
        cannot take one (gone, or already used)."""
        if self.pid is None:
            return None
        job = pickle.dumps((_shares([n for n, _, _ in PLOTS], WARM_SHARES), cells, per_conn),
                           protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with os.fdopen(self.job_w, "wb") as f:  # the process reads as it comes: the pipe never fills
                self.job_w = -1
                f.write(job)
        except OSError:  # it died (EPIPE): the report forks its own
            self.close()
            return None
        child = (self.pid, self.out_r)
        os.close(self.ready_r)
        self.pid, self.ready_r, self.out_r = None, -1, -1
        return child

    def close(self) -> None:
        """End the process unless a report took it: its job pipe closed, it leaves once its import is
        done; reaped."""
        for fd in (self.ready_r, self.job_w, self.out_r):
            if fd >= 0:
                os.close(fd)
        self.ready_r = self.job_w = self.out_r = -1
        if self.pid is not None:
            os.waitpid(self.pid, 0)
            self.pid = None


_warm: Warm | None = None  # the process `start` gives its job to, while `warm` keeps one


def begin(draw: Draw, preload: Sequence[str]) -> None:
    """Fork the drawing process now, before the command is even parsed (profiler/entry.py), so that its
    import runs beside the CLI's own; the `warm` block of the same draw and preload adopts it. One that no
    block adopts ends with netprof: its job pipe closes at exit (and the kernel kills it if netprof is
    killed)."""
    global _warm
    if _warm is None:
        _warm = Warm(draw, preload)


def abandon() -> None:
    """The process `begin` forked will have no report to draw (the command was refused): killed now, not
    left to finish its import."""
    global _warm
    if _warm is not None:
        _warm.kill()
        _warm = None


@contextlib.contextmanager
def warm(draw: Draw, preload: Sequence[str]) -> Iterator[Warm]:
    """A drawing process for the report of what the `with` block runs: the one `begin` forked for the same
    draw and preload, or one forked now, importing `preload` (what `draw` imports) meanwhile; `start(...,
    draw)` gives it its job; ended and reaped at the block's end whatever happens (the kernel kills it if
    netprof itself is killed)."""
    global _warm
    w = _warm if _warm is not None and _warm.draw is draw and _warm.preload == tuple(preload) else None
    if w is None:
        if _warm is not None:
            _warm.close()
        w = Warm(draw, preload)
    _warm = w
    try:
        yield w
    finally:
        _warm = None
        w.close()


def ready(timeout: float = READY_TIMEOUT_S) -> None:
    """Wait until the warm process (if any) has done its import: call it before the first measured load."""
    if _warm is not None:
        _warm.ready(timeout)


def start(cells: pd.DataFrame, per_conn: pd.DataFrame | None, out_dir: Path, draw: Draw) -> Pending:
    """The plots of this report: from the cache, or being drawn by `draw(name, cells, per_conn)` in
    forked children meanwhile (the caller's `draw` imports matplotlib, so only they do): the warm
    process when one waits with the same `draw` (`warm`), else children forked now."""
    if cells.empty:
        return Pending(out_dir, draw, cells, per_conn, svgs={})
    k = key(cells, per_conn)
    svgs = _cached(k)
    pending = Pending(out_dir, draw, cells, per_conn, k, svgs)
    if svgs is None:
        child = _warm.take(cells, per_conn) if _warm is not None and _warm.draw is draw else None
        if child is not None:
            pending.children.append(child)
        else:
            pending.fork()
    return pending


def save(out_dir: Path, made: list[tuple[str, str, str, bytes | None]]) -> list[Plot]:
    """Write each (name, title, caption, SVG) that applies (SVG not None) under plots/."""
    plots: list[Plot] = []
    for name, title, caption, svg in made:
        if svg is None:
            continue
        if not plots:
            atomic.make_subdir(out_dir, "plots")  # a link planted at plots/ is refused, never written through
        rel = f"plots/{name}.svg"
        atomic.write_bytes(out_dir / rel, svg)
        plots.append(Plot(name, title, caption, rel, SVG_URI + base64.b64encode(svg).decode()))
    return plots
