"""The report's plots as a set: which there are, drawn off the report's critical path, kept by content.

Drawing is a second of a report's time (importing matplotlib ~0.5 s, drawing six SVGs ~0.9 s), so:
- `start` forks children that import matplotlib and draw while the report does the rest of its work
  (analysis, tables, templates); `Pending.result` collects their SVGs. The parent never imports
  matplotlib. A child that fails leaves its plots to be drawn in the parent, as before.
- A set already drawn for the same data is reused: `netprof report DIR` after the run (or again) finds
  it in netprof's cache (profiler/cache.py) and draws nothing. The key hashes everything that decides
  the pictures: the per-cell table and per-connection rows (every value, exactly), netprof's and
  matplotlib's versions, and the source of the modules that draw (plots.py, mpl.py, units.py, schema.py).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import netprof
from netprof.profiler import atomic, cache, procs

PLOTS = (  # name, title, caption: the page's order (plots.FIGURES draws each)
    ("throughput", "Throughput", "messages per second, one line per backend (and other varying dimension)"),
    ("latency", "Latency", "p50 / p95 / p99 / p999 round-trip latency seen by the loader"),
    ("syscalls", "Syscalls per message", "what every message costs in system calls"),
    ("cpu", "CPU split", "backend CPU time per message, kernel vs user"),
    ("fairness", "Fairness", "how messages were spread across connections (Lorenz curves)"),
    ("per_conn", "Per-connection distribution", "messages each connection got, against the fair share"),
)
SOURCES = ("plots.py", "mpl.py", "units.py", "schema.py")  # what draws; a change to one draws anew
# Drawing processes: each imports matplotlib (~0.45 s of CPU), so on 2 CPUs one child beside the parent
# (which writes the rest of the report meanwhile) is as quick as two and much lighter on a busy host.
CHILDREN = 1 if (os.cpu_count() or 1) <= 2 else 2
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
    here = Path(__file__).parent
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

def _child(fd: int, names: list[str], draw: Draw, cells: pd.DataFrame, per_conn: pd.DataFrame | None) -> None:
    """In the forked child: draw `names`, send {name: SVG or None} down `fd`, and leave without running
    the parent's exit handlers (they remove its temp directory)."""
    code = 1
    try:
        got = {n: draw(n, cells, per_conn) for n in names}
        with os.fdopen(fd, "wb") as f:
            pickle.dump(got, f)
        code = 0
    finally:
        os._exit(code)


class Pending:
    """Plots being drawn; `result()` waits for them and writes plots/."""

    def __init__(self, out_dir: Path, draw: Draw, cells: pd.DataFrame, per_conn: pd.DataFrame | None,
                 k: str | None = None, svgs: dict[str, bytes | None] | None = None) -> None:
        self.out_dir, self.draw, self.cells, self.per_conn, self.key = out_dir, draw, cells, per_conn, k
        self.svgs = svgs  # None: not known yet
        self.children: list[tuple[int, int]] = []  # (pid, read end of its pipe)

    def fork(self) -> None:
        names = [n for n, _, _ in PLOTS]
        die_with_parent = procs.die_with(os.getpid())
        for i in range(CHILDREN):
            share = names[i::CHILDREN]  # alternate: the per-connection panels (the slow ones) go one each
            r, w = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(r)
                os.close(w)
                return  # result() draws what no child took
            if pid == 0:
                die_with_parent()  # a netprof killed meanwhile leaves no drawing child behind
                os.close(r)
                for _, fd in self.children:
                    os.close(fd)
                _child(w, share, self.draw, self.cells, self.per_conn)
            os.close(w)
            self.children.append((pid, r))

    def _collect(self) -> dict[str, bytes | None]:
        """What the children drew (a child that failed: nothing of its share); every child reaped."""
        got: dict[str, bytes | None] = {}
        for pid, fd in self.children:
            with os.fdopen(fd, "rb") as f:
                data = f.read()  # read before waiting: an SVG set outgrows the pipe's buffer
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) == 0 and data:
                got.update(pickle.loads(data))
        self.children = []
        return got

    def result(self) -> list[Plot]:
        if self.svgs is None:
            got = self._collect()
            # what no child drew (fork refused, a child failed) is drawn here
            self.svgs = {n: got[n] if n in got else self.draw(n, self.cells, self.per_conn) for n, _, _ in PLOTS}
            if self.key is not None:
                _store(self.key, self.svgs)
        return save(self.out_dir, [(n, t, c, self.svgs.get(n)) for n, t, c in PLOTS])

    def __enter__(self) -> Pending:
        return self

    def __exit__(self, *exc) -> None:
        """Reap children whose result was never asked for (the report failed on the way)."""
        for pid, fd in self.children:
            os.close(fd)  # a child still writing gets EPIPE and leaves
            os.waitpid(pid, 0)
        self.children = []


def start(cells: pd.DataFrame, per_conn: pd.DataFrame | None, out_dir: Path, draw: Draw) -> Pending:
    """The plots of this report: from the cache, or being drawn by `draw(name, cells, per_conn)` in
    forked children meanwhile (the caller's `draw` imports matplotlib, so only they do)."""
    if cells.empty:
        return Pending(out_dir, draw, cells, per_conn, svgs={})
    k = key(cells, per_conn)
    svgs = _cached(k)
    pending = Pending(out_dir, draw, cells, per_conn, k, svgs)
    if svgs is None:
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
