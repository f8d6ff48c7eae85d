"""The results directory: one tidy row per (backend, connections, pipeline, round).

Rows are nested dicts in memory and in JSON (the interface contract), flattened with dotted column
names (`lat_us.p99`, `syscalls_per_msg.sendto`) in `results.parquet` / `results.csv`. Both files are
rewritten atomically (atomic.py) after every cell, so an interrupted run keeps every finished cell. The
per-connection message counts go to `per_conn.parquet` (long format), since one row cannot hold 20k.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from netprof.profiler import atomic, schema

RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"
PER_CONN_PARQUET = "per_conn.parquet"
SOCKWAIT_CONN_PARQUET = "sockwait_conn.parquet"  # --sockwait: per connection, as per_conn.parquet
META_JSON = "meta.json"
SUMMARY_JSON = "summary.json"

# Nested groups of a row; everything else is a scalar column.
NESTED = ("lat_us", "per_conn", "cpu", "cpu_bpf", "syscalls", "syscalls_per_msg", "syscall_time_s",
          "ctx", "loader_cpu", "errors", "faults", "probed", "sockwait", "unanswered", "unprobed_parts")


def flatten(row: dict) -> dict:
    flat = {}
    for k, v in row.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
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
    for k, v in flat.items():
        v = _clean(v)
        if "." in k and k.split(".", 1)[0] in NESTED:
            group, name = k.split(".", 1)
            if v is not None:
                row.setdefault(group, {})[name] = v
        else:
            row[k] = v
    if isinstance(row.get("probes"), str):
        row["probes"] = [p for p in row["probes"].split(",") if p]
    return row


class ResultsStore:
    def __init__(self, out_dir: str | Path) -> None:
        self.dir = atomic.ensure_out_dir(out_dir)
        self.rows: list[dict] = []
        self.per_conn: list[pd.DataFrame] = []
        self.sockwait_conns: list[pd.DataFrame] = []

    def write_meta(self, meta: dict) -> None:
        atomic.write_text(self.dir / META_JSON, json.dumps(meta, indent=2, default=str))

    def add(self, row: dict, per_conn_messages: list[int] | None = None,
            sockwait_conns: list[dict] | None = None) -> None:
        self.rows.append(row)
        if per_conn_messages:
            self.per_conn.append(pd.DataFrame({
                **{k: row.get(k) for k in schema.ROW_KEYS},
                "conn": range(len(per_conn_messages)), "messages": per_conn_messages,
            }))
        if sockwait_conns:  # the row keys, then probes/sockwait.conn_rows' columns
            frame = pd.DataFrame(sockwait_conns)
            for i, k in enumerate(schema.ROW_KEYS):
                frame.insert(i, k, row.get(k))
            self.sockwait_conns.append(frame)
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
        if self.sockwait_conns:
            sw = pd.concat(self.sockwait_conns, ignore_index=True)
            with atomic.open_atomic(self.dir / SOCKWAIT_CONN_PARQUET, "wb") as f:
                sw.to_parquet(f, index=False)


def load(out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """(results, per-connection counts or None, meta) of a results directory."""
    d = Path(out_dir)
    if not (d / RESULTS_PARQUET).exists():
        raise FileNotFoundError(f"{d} holds no {RESULTS_PARQUET}: is it a netprof results directory?")
    df = pd.read_parquet(d / RESULTS_PARQUET)
    pc = pd.read_parquet(d / PER_CONN_PARQUET) if (d / PER_CONN_PARQUET).exists() else None
    meta = json.loads((d / META_JSON).read_text()) if (d / META_JSON).exists() else {}
    return df, pc, meta


def load_sockwait_conns(out_dir: str | Path) -> pd.DataFrame | None:
    """--sockwait's per-connection waits of a results directory, or None."""
    path = Path(out_dir) / SOCKWAIT_CONN_PARQUET
    return pd.read_parquet(path) if path.exists() else None


def rows_of(df: pd.DataFrame) -> list[dict]:
    return [unflatten(r) for r in df.to_dict(orient="records")]
