"""What identifies a measurement cell: its key columns (every run dimension), its label and its
file-name slug. Everything else imports these; a new run dimension is added here (and as a CLI
option that fills it), nowhere else.

A *cell* is one combination of run dimensions; a *row* is one round of one cell. Results written
before a dimension existed lack its column: `normalize` fills it with the value those runs had
(e.g. `framing` "stream": netprof read 64 KiB per receive before the framing option existed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netprof.profiler.core import units

if TYPE_CHECKING:  # pandas where frames are read, not at import: `netprof list` and --help need none of it
    import pandas as pd


@dataclass(frozen=True)
class Dimension:
    name: str
    legacy: Any  # the value of result files written before this dimension existed
    # How the value reads in a label, and in a file name. Labels leave out a dimension whose value
    # is the same in every cell of the table being labelled (`varying`); slugs always hold it all.
    text: Callable[[Any], str]
    slug: Callable[[Any], str]


def _pipeline_text(v) -> str:
    return f"pipeline {int(v)}"


def _pinned_text(v) -> str:
    return "pinned" if bool(v) else "not pinned"


def _rate_text(v) -> str:
    return f"at {units.number(v)}/s" if v else "closed loop"


def _rate_slug(v) -> str:
    if not v:
        return ""
    return f"r{int(v)}" if float(v).is_integer() else f"r{float(v):g}"


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("backend", None, str, str),
    Dimension("interpreter", "", str, lambda v: str(v) or "default"),
    # "own": the user's server (--cmd/--attach) frames messages its own way
    Dimension("framing", "stream", lambda v: "" if v == "own" else f"{v} framing",
              lambda v: "" if v == "own" else str(v)),
    Dimension("protocol", "echo", str, lambda v: "" if v == "echo" else str(v)),
    Dimension("connections", None, lambda v: f"c={int(v)}", lambda v: f"c{int(v)}"),
    Dimension("pipeline", 1, _pipeline_text, lambda v: f"p{int(v)}"),
    Dimension("pinned", True, _pinned_text, lambda v: "" if bool(v) else "nopin"),
    # --tag: a label the user gives a run's cells (netprof itself varies nothing by it): `--tag a,b`
    # runs every cell twice, an A/A control within one run; `--tag old` / `--tag new` names what two
    # runs compare. Untagged rows have "".
    Dimension("tag", "", lambda v: f"tag {v}" if v else "", lambda v: f"tag-{v}" if v else ""),
    # --rate: the open-loop load's target, requests/s over all connections (the loader sends on a schedule
    # and measures latency from each request's intended time); 0 = closed loop, as every run before it.
    Dimension("rate", 0, _rate_text, _rate_slug),
    # --io-uring off: the server started under a seccomp filter that fails io_uring_setup with ENOSYS (as
    # container runtimes' default profiles do), so a loop that falls back does its ring work as syscalls;
    # "on" (the server as it is) is every run before it and adds nothing to a label or a file name.
    Dimension("io_uring", "on", lambda v: "" if v == "on" else f"io_uring {v}",
              lambda v: "" if v == "on" else "nouring"),
)
BY_NAME = {d.name: d for d in DIMENSIONS}
CELL_KEYS: list[str] = [d.name for d in DIMENSIONS]
ROW_KEYS: list[str] = CELL_KEYS + ["round"]
# Dimensions that are one value per run today but still part of a cell's identity in tables when
# a results frame mixes runs (compare): they are not split into separate cells.
SERIES_KEYS: list[str] = [k for k in CELL_KEYS if k != "connections"]  # one plotted line per these
# What names a server as a whole (its program and the interpreter it runs on): the findings about a
# backend rather than one cell are one per these.
SERVER_KEYS: tuple[str, ...] = ("backend", "interpreter")
# How a finding (an anomaly in summary.json) names its cell: the interface contract's two first
# (connections None: the backend as a whole), then the dimensions added since, after the finding.
FINDING_KEYS: tuple[str, ...] = ("backend", "connections")
FINDING_MORE_KEYS: tuple[str, ...] = ("pipeline", "interpreter", "framing", "rate")
# Run-wide settings rows record that are not cell dimensions (one value per run; `compare` matches
# runs on them too), with the value of rows written before they were recorded (as Dimension.legacy).
# arrivals: how an open-loop load spaces its requests (constant, poisson); "closed" for a closed-loop run.
# zmq_client: what drove the ZeroMQ backends (--zmq-client: libzmq or native); libzmq before it was recorded.
# max_connections: with --rate, the most connections the loader could open as requests needed them (at least -c;
# plan.RunConfig.max_connections_for); 0 for closed loop and for rows written before: the -c connections only.
# warmup_after: when the loader's warm-up began (--warmup-after, plan.WARMUP_AFTER): connected (every connection up,
# the default and what rows written before did) or served (every connection answered once).
RUN_SETTINGS: dict[str, Any] = {"msize": 64, "work": "none", "think": "none", "arrivals": "closed",
                                "zmq_client": "libzmq", "max_connections": 0, "warmup_after": "connected"}
# arrivals of a `netprof watch --out` row: the requests a running server's own clients sent (no loader; its
# latency the server time, watch/rundir.py).
WATCHED = "watched"


def watched(row: Mapping) -> bool:
    """A row or cell of `netprof watch` (no loader: its round trip is the server time)."""
    return row.get("arrivals") == WATCHED


# A watched cell's throughput has no interval: one window, no rounds (said where a run's says "1 round")
ONE_WATCH = "one watch: no interval"


def watched_frame(frame: pd.DataFrame) -> bool:
    """Rows or cells of `netprof watch --out` (docs/results-format.md, "A watched row"): its results directory
    holds nothing else."""
    return bool("arrivals" in frame and (frame["arrivals"] == WATCHED).any())


def latency_seen(frame: pd.DataFrame | None) -> tuple[str, str, str]:
    """What the rows' latency is, as an axis says it and as a title does, and where it was seen: the loader's round
    trip, or a watched server's time (watch/rundir.py)."""
    if frame is not None and watched_frame(frame):
        return "server time", "Server time", "in the kernel (a request's first byte in → its answer sent)"
    return "round-trip latency", "Latency", "seen by the loader"


def at_rate(frame: pd.DataFrame) -> pd.Series:
    """Which rows or cells ran at a set rate (--rate: open loop); False where the rate is 0 or unset (closed loop,
    rows from before --rate)."""
    import pandas as pd  # see the TYPE_CHECKING import above

    if "rate" not in frame:
        return pd.Series(False, index=frame.index)
    return pd.to_numeric(frame["rate"], errors="coerce").fillna(0) > 0


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with every key column present (older result files get their legacy values)."""
    missing = [d for d in DIMENSIONS if d.name not in df.columns and d.legacy is not None]
    if not missing:
        return df
    df = df.copy()
    for d in missing:
        df[d.name] = d.legacy
    return df


def key_of(row: Mapping) -> tuple:
    """The cell key of a row (dimension values in CELL_KEYS order)."""
    return tuple(_value(row, d) for d in DIMENSIONS)


def _value(row: Mapping, d: Dimension):
    try:
        v = row[d.name]
    except (KeyError, IndexError):
        return d.legacy
    return d.legacy if v is None or (isinstance(v, float) and v != v) else v


def varying(frame: pd.DataFrame, among: list[str] | None = None) -> list[str]:
    """Dimensions (of `among`, default all) that take more than one value in `frame`."""
    names = among if among is not None else CELL_KEYS
    return [k for k in names if k in frame.columns and frame[k].nunique(dropna=False) > 1]


def cell_label(row: Mapping, dims: list[str] | None = None, with_round: bool = False) -> str:
    """'asyncio_sock message framing c=100 pipeline 8': the named dimensions (default: all that
    differ from a plain run: non-default interpreter, pipeline ≠ 1, unpinned)."""
    if dims is None:
        dims = [d.name for d in DIMENSIONS if not _plain(d, _value(row, d))]
    parts = [BY_NAME[k].text(_value(row, BY_NAME[k])) for k in dims]
    if with_round:
        rnd = row.get("round") if hasattr(row, "get") else None
        parts.append(f"round {int(rnd)}" if rnd else "evidence round")
    return " ".join(p for p in parts if p)


def _plain(d: Dimension, v) -> bool:
    """True when a label may leave `d` out because `v` is what a plain run has."""
    return d.name in ("interpreter", "tag", "rate") and not v or d.name == "pipeline" and int(v) == 1 \
        or d.name == "pinned" and bool(v) or d.name == "protocol" and v == "echo"


def series_label(row: Mapping, frame: pd.DataFrame) -> str:
    """Label of one plotted line / table row: 'thread (message framing, not pinned)', the backend
    and, in parentheses, the other series dimensions that vary in `frame`."""
    others = [k for k in varying(frame, SERIES_KEYS) if k != "backend"]
    extra = ", ".join(BY_NAME[k].text(_value(row, BY_NAME[k])) for k in others)
    return f"{row['backend']} ({extra})" if extra else str(row["backend"])


def column_label(row: Mapping, frame: pd.DataFrame) -> str:
    """Label of a table column: connections, plus pipeline when it varies ('100 ×8')."""
    text = f"c={int(row['connections'])}"
    if "pipeline" in varying(frame):
        text += f" ×{int(_value(row, BY_NAME['pipeline']))}"
    return text


def cell_phrase(row: Mapping, closed: bool = False) -> str:
    """'asyncio_sock at 100 connections, 8 in flight (message framing)': a cell in a sentence; an open-loop cell adds
    its asked rate ('selector at 10 connections, at 2,000/s': requests or messages, as its cell's unit), and with
    `closed` a closed-loop one says so (', closed loop': beside open-loop cells, as a knee's ceiling). A card's title
    puts it after a colon, never inside parentheses of its own."""
    pipe = f", {int(row['pipeline'])} in flight" if (row.get("pipeline") or 1) > 1 else ""
    rate = _value(row, BY_NAME["rate"])
    asked = f", at {units.number(rate)}/s" if rate else ", closed loop" if closed else ""
    framing = BY_NAME["framing"].text(row.get("framing") or "own")
    framing = f" ({framing})" if framing else ""
    return f"{row['backend']} at {units.connections(row['connections'])}{pipe}{asked}{framing}"


def scale_phrase(cell: Mapping, beside: Mapping) -> str:
    """'100 ×8 stream framing', '100 at 20,000/s', '36,784/s': a cell's connections and messages in flight (when
    more than one), its open-loop rate and its framing (each when it differs from `beside`'s: the connections
    left out when only the rate does), for the other cells a finding also covers."""
    scale = f"{cell['connections']}" + (f" ×{cell['pipeline']}" if (cell.get("pipeline") or 1) > 1 else "")
    rate, other_rate = (_value(c, BY_NAME["rate"]) for c in (cell, beside))
    same_scale = all(cell.get(k) == beside.get(k) for k in ("connections", "pipeline"))
    parts = [] if rate != other_rate and same_scale else [scale]
    if rate != other_rate:
        parts.append((f"at {units.number(rate)}/s" if parts else f"{units.number(rate)}/s") if rate else "closed loop")
    if cell.get("framing") != beside.get("framing"):
        parts.append(BY_NAME["framing"].text(cell.get("framing")))
    return " ".join(p for p in parts if p)


def finding_cell(row: Mapping, whole_server: bool = False) -> dict:
    """The cell a finding is about, by FINDING_KEYS and FINDING_MORE_KEYS, as summary.json has it:
    counts as ints (pipeline 1 when unset); with `whole_server`, only SERVER_KEYS (the rest None)."""
    cell: dict = {k: row.get(k) for k in FINDING_KEYS + FINDING_MORE_KEYS}
    cell["backend"] = str(row["backend"])
    if whole_server:
        return {k: v if k in SERVER_KEYS else None for k, v in cell.items()}
    cell["connections"] = int(row["connections"])
    cell["pipeline"] = int(row.get("pipeline", 1) or 1)
    rate = float(_value(row, BY_NAME["rate"]))  # 0 (closed loop) for rows from before --rate
    cell["rate"] = int(rate) if rate.is_integer() else rate
    return cell


def cell_slug(row: Mapping) -> str:
    """File-name stem of a cell's artefacts (stacks/<slug>.json, flamegraphs/<slug>/): every
    dimension, so two cells never share a file and writer and reader always agree."""
    parts = [d.slug(_value(row, d)) for d in DIMENSIONS]
    return "-".join(p.replace("/", "_") for p in parts if p)


def select(frame: pd.DataFrame, row: Mapping, **changes) -> pd.DataFrame:
    """Rows of `frame` in the same cell as `row`, except the dimensions in `changes` (a value, or
    None for any value)."""
    import pandas as pd  # see the TYPE_CHECKING import above

    sel = pd.Series(True, index=frame.index)
    for d in DIMENSIONS:
        if d.name not in frame.columns:
            continue
        if d.name in changes and changes[d.name] is None:
            continue
        want = changes.get(d.name, _value(row, d))
        sel &= frame[d.name] == want
    return frame[sel]
