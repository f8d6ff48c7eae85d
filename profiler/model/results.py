"""The results directory: one tidy row per (backend, connections, pipeline, round).

Rows are nested dicts in memory and in JSON (the interface contract), flattened with dotted column
names (`lat_us.p99`, `syscalls_per_msg.sendto`) in `results.parquet` / `results.csv`. Both files are
rewritten atomically (atomic.py) after every cell, so an interrupted run keeps every finished cell. The
per-connection message counts go to `per_conn.parquet` (long format), since one row cannot hold 20k.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import IO

import pandas as pd

from netprof.profiler.core import atomic, named_file, paths
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.safetext import clean, clean_text
from netprof.profiler.model import schema
from netprof.profiler.model.files import (  # noqa: F401 (results.X: the names its readers use)
    CONN_PARQUET,
    KNEE_JSON,
    META_JSON,
    PER_CONN_PARQUET,
    RESULTS_CSV,
    RESULTS_PARQUET,
    SOCKWAIT_CONN_PARQUET,
    SUMMARY_JSON,
    TIMELINE_PARQUET,
)

# Nested groups of a row; everything else is a scalar column.
NESTED = ("lat_us", "per_conn", "cpu", "cpu_bpf", "syscalls", "syscalls_per_msg", "ring", "ring_per_msg",
          "syscall_time_s",
          "ctx", "loader_cpu", "errors", "faults", "probed", "sockwait", "unanswered", "unprobed_parts",
          "lat_sent_us", "open_loop", "loaders", "counted", "served_first", "sched")
# Fields of a group that are dicts themselves (`breakdown.mean_us` of parts): their columns are
# `group.field.key`, and unflatten nests them again. Other groups' dotted keys stay as they are
# (`open_loop.behind_late_us.p99` is the key `behind_late_us.p99` of `open_loop`).
DICT_FIELDS = {"breakdown": ("mean_us", "p50_us", "p99_us", "tail_us", "detail_us", "skipped")}


def flatten(row: dict) -> dict:
    """One column per scalar: a group's fields are `group.field`, and a dict inside a group (the
    breakdown's `mean_us` of parts) `group.field.key`; lists are comma-joined."""
    flat = {}
    for k, v in row.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                if isinstance(vv, dict):
                    flat.update({f"{k}.{kk}.{kkk}": vvv for kkk, vvv in vv.items()})
                elif isinstance(vv, (list, tuple)):
                    flat[f"{k}.{kk}"] = ",".join(map(str, vv))
                else:
                    flat[f"{k}.{kk}"] = vv
        elif isinstance(v, (list, tuple)):
            flat[k] = ",".join(map(str, v))
        else:
            flat[k] = v
    return flat


def _clean(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):  # numpy scalar
        return _clean(v.item())
    return v


def unflatten(flat: dict) -> dict:
    row: dict = {}
    # An instrument's group is in every row with its `attached` flag (cell.base_row): nested as well.
    nested = set(NESTED) | {k.split(".", 1)[0] for k in flat if k.endswith(".attached")}
    for k, v in flat.items():
        v = _clean(v)
        if "." in k and k.split(".", 1)[0] in nested:
            group, name = k.split(".", 1)
            if v is not None and name.split(".", 1)[0] in DICT_FIELDS.get(group, ()) and "." in name:
                field, key = name.split(".", 1)
                row.setdefault(group, {}).setdefault(field, {})[key] = v
            elif v is not None:
                row.setdefault(group, {})[name] = v
        else:
            row[k] = v
    if isinstance(row.get("probes"), str):
        row["probes"] = [p for p in row["probes"].split(",") if p]
    if row.get("ring_cpu_us_per_msg") is not None:  # io_uring counted (its dicts have no columns when empty)
        for group in ("ring", "ring_per_msg"):
            row.setdefault(group, {})
    return row


class ResultsStore:
    def __init__(self, out_dir: str | Path) -> None:
        self.dir = atomic.ensure_out_dir(out_dir)
        self.rows: list[dict] = []
        self.per_conn: list[pd.DataFrame] = []
        self.conn_frames: dict[str, list[pd.DataFrame]] = {}  # instrument name -> its per-connection rows
        self.timeline: list[pd.DataFrame] = []

    def write_meta(self, meta: dict) -> None:
        atomic.write_text(self.dir / META_JSON, json.dumps(meta, indent=2, default=str))

    def add(self, row: dict, per_conn_messages: list[int] | None = None,
            conn_rows: dict[str, list[dict]] | None = None, timeline: list[dict] | None = None) -> None:
        """One finished cell: its row, the loader's per-connection counts, each instrument's
        per-connection rows ({name: rows}), its timeline's slices; everything is on disk when it returns."""
        self.rows.append(row)
        if per_conn_messages:
            self.per_conn.append(pd.DataFrame({
                **{k: row.get(k) for k in schema.ROW_KEYS},
                "conn": range(len(per_conn_messages)), "messages": per_conn_messages,
            }))
        for name, rows in (conn_rows or {}).items():
            self.conn_frames.setdefault(name, []).append(_keyed(row, rows))
        if timeline:
            self.timeline.append(_keyed(row, timeline))
        self.flush()

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([flatten(r) for r in self.rows])

    def flush(self) -> None:
        df = self.frame()
        with atomic.open_atomic(self.dir / RESULTS_PARQUET, "wb") as f:
            df.to_parquet(f, index=False)
        with atomic.open_atomic(self.dir / RESULTS_CSV, "w", newline="") as f:
            df.to_csv(f, index=False)
        if self.per_conn:
            pc = pd.concat(self.per_conn, ignore_index=True)
            with atomic.open_atomic(self.dir / PER_CONN_PARQUET, "wb") as f:
                pc.to_parquet(f, index=False)
        for name, frames in self.conn_frames.items():
            with atomic.open_atomic(self.dir / CONN_PARQUET.format(name), "wb") as f:
                pd.concat(frames, ignore_index=True).to_parquet(f, index=False)
        if self.timeline:
            with atomic.open_atomic(self.dir / TIMELINE_PARQUET, "wb") as f:
                pd.concat(self.timeline, ignore_index=True).to_parquet(f, index=False)


def _keyed(row: dict, rows: list[dict]) -> pd.DataFrame:
    """`rows` as a frame whose first columns are the row's keys (schema.ROW_KEYS)."""
    frame = pd.DataFrame(rows)
    for i, k in enumerate(schema.ROW_KEYS):
        frame.insert(i, k, row.get(k))
    return frame


# ---------------------------------------------------------------------------------------------
# Reading a results directory. netprof reads them as root, and a results directory may be another
# user's (or the sudo caller's, who may plant what they like in it): every file is opened without
# following a link, at any level below the directory named, and (read by root) must be a regular file
# of root's or the sudo caller's; its text loses its control characters (an ESC sequence in a crafted
# backend name would otherwise reach the terminal through compare and report): safetext.clean_text,
# the one owner of that rule.


def clean_frame(df: pd.DataFrame) -> pd.DataFrame:
    """String columns (and column names) without control characters."""
    df = df.rename(columns=lambda c: clean_text(c) if isinstance(c, str) else c)
    for col in df.columns:
        if df[col].dtype == object or pd.api.types.is_string_dtype(df[col]):
            df[col] = df[col].map(lambda v: clean_text(v) if isinstance(v, str) else v)
    return df


def _refuse(path: str, why: str) -> InputError:
    return InputError(f"{path} {why}: netprof reads only regular files and directories of a results directory "
                      "that root, you or the sudo caller own (a link could make root read any file); replace it "
                      "with the real one")


def _check(fd: int, path: str, directory: bool) -> None:
    st = os.fstat(fd)
    if directory != stat.S_ISDIR(st.st_mode) or not (directory or stat.S_ISREG(st.st_mode)):
        raise _refuse(path, "is not a directory" if directory else "is not a regular file")
    if os.geteuid() != 0:  # not root: what we can open is ours to read anyway
        return
    if st.st_uid not in paths.caller_uids():
        raise _refuse(path, f"is owned by uid {st.st_uid}")
    if not directory and st.st_nlink > 1:  # a hard link to a file of root's
        raise _refuse(path, f"has {st.st_nlink} hard links")


_OPEN = named_file.READ_FLAGS


def _open_at(dir_fd: int, base: str, parts: tuple[str, ...], directory: bool) -> int | None:
    """fd of `base/parts…` (dir_fd: `base`), opened without following a link at any part; None when
    missing."""
    fd = dir_fd
    try:
        for i, part in enumerate(parts):
            is_dir = directory or i < len(parts) - 1
            path = os.path.join(base, *parts[: i + 1])
            try:
                nxt = os.open(part, _OPEN | (os.O_DIRECTORY if is_dir else 0), dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise _refuse(path, "is a symlink" if os.path.islink(path) else "is not a directory") from None
            if fd != dir_fd:
                os.close(fd)
            fd = nxt
            _check(fd, path, is_dir)
        opened, fd = fd, dir_fd
        return opened
    finally:
        if fd != dir_fd:
            os.close(fd)


def open_input(directory: str | os.PathLike, name: str) -> IO[bytes] | None:
    """The file `name` ("meta.json", "flamegraphs/index.json") of a results directory, open for
    reading, or None when it is not there; InputError (one line naming it) for a link, a file that
    is not regular, or one another user owns."""
    base = os.fspath(directory)
    dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the directory named: followed
    return _open_file_at(dir_fd, base, Path(name).parts)


def _open_file_at(dir_fd: int, base: str, parts: tuple[str, ...]) -> IO[bytes] | None:
    """_open_at for a file, as a file object (None when missing); closes `dir_fd`."""
    try:
        fd = _open_at(dir_fd, base, parts, directory=False)
    finally:
        os.close(dir_fd)
    if fd is None:
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_input_path(path: str | os.PathLike) -> IO[bytes]:
    """open_input for a file named by its whole path (a .folded file netprof hands to inferno): its
    directory is walked as root's writes walk it (atomic.open_dir: only root's links followed), so a
    directory swapped for a link cannot send the read elsewhere either. FileNotFoundError when missing."""
    full = os.path.abspath(os.fspath(path))
    base, name = os.path.split(full)
    opened = _open_file_at(atomic.open_dir(base), base, (name,))
    if opened is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), full)
    return opened


def list_input_dir(directory: str | os.PathLike, name: str) -> list[str] | None:
    """The entries of the subdirectory `name` ("stacks", "flamegraphs") checked as open_input checks
    a file, sorted; None when it is not there. Entries are names only: read them with open_input."""
    base = os.fspath(directory)
    dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_at(dir_fd, base, Path(name).parts, directory=True)
    finally:
        os.close(dir_fd)
    if fd is None:
        return None
    try:
        return sorted(clean_text(n) for n in os.listdir(fd))
    finally:
        os.close(fd)


def input_kind(directory: str | os.PathLike, name: str) -> str | None:
    """"dir", "file" or None (missing) for an entry of a results directory; InputError for a link."""
    path = os.path.join(os.fspath(directory), name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symlink")
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def read_json(directory: str | os.PathLike, name: str, default=None):
    """A JSON file of a results directory, its strings cleaned; `default` when it is not there.
    ValueError when it is not JSON."""
    f = open_input(directory, name)
    if f is None:
        return default
    with f:
        return clean(json.loads(f.read().decode("utf-8", "replace")))


def read_parquet(directory: str | os.PathLike, name: str) -> pd.DataFrame | None:
    f = open_input(directory, name)
    if f is None:
        return None
    with f:
        return clean_frame(pd.read_parquet(f))


def load(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """(results, per-connection counts or None, meta) of a results directory."""
    df = read_parquet(out_dir, RESULTS_PARQUET)
    if df is None:
        raise FileNotFoundError(f"{out_dir} holds no {RESULTS_PARQUET}: is it a netprof results directory?")
    meta = read_json(out_dir, META_JSON, {})
    return df, read_parquet(out_dir, PER_CONN_PARQUET), meta if isinstance(meta, dict) else {}


def load_conn_rows(out_dir: str | Path, instrument: str) -> pd.DataFrame | None:
    """An instrument's per-connection rows of a results directory, or None."""
    return read_parquet(out_dir, CONN_PARQUET.format(instrument))


def load_timeline(out_dir: str | Path) -> pd.DataFrame | None:
    """The open-loop cells' timelines of a results directory (one row per slice), or None."""
    return read_parquet(out_dir, TIMELINE_PARQUET)


def load_sockwait_conns(out_dir: str | Path) -> pd.DataFrame | None:
    """--sockwait's per-connection waits of a results directory, or None."""
    return load_conn_rows(out_dir, "sockwait")


def rows_of(df: pd.DataFrame) -> list[dict]:
    return [unflatten(r) for r in df.to_dict(orient="records")]
