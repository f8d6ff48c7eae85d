"""`netprof compare BASE NEW [NEW…]`: did it get faster, is that real, and why.

pyperf's `compare_to`, for a profiler: cells of two runs are matched on every dimension, every
judged figure (metrics.CELL_METRICS and each syscall per message) becomes a ratio NEW/BASE with a 95%
interval from the per-round values and a verdict, and a significant change gets one sentence saying
which syscall and CPU deltas explain it. This module loads, matches and judges; the numbers come
from `stats` (per_round, compare_samples), a cell's identity from `schema`, and the pages (terminal,
compare.md, compare.html, compare.json) are `compare_report`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

import pandas as pd
from pyarrow.lib import ArrowException

from netprof.flamegraphs.render import diff_stacks
from netprof.probes import registry as instruments
from netprof.profiler.analysis import compare_inputs
from netprof.profiler.analysis import fail_if as fail_if_rules
from netprof.profiler.core import atomic, units
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.units import rate as human
from netprof.profiler.model import metrics, results, schema, stats

ALPHA = 0.05
CONFIDENCE = 0.95
MIN_ROUNDS = 3
SCHEMA = 1  # of the JSON document `compare --json` prints (and compare.json)
METHOD = (f"NEW/BASE is the ratio of the means over each cell's successful rounds, with its "
          f"{CONFIDENCE:.0%} interval by Fieller's theorem (two independent samples, Welch's degrees of "
          f"freedom, so it agrees with the test). The verdict is Welch's t-test (scipy.stats.ttest_ind, "
          f"equal_var=False): significant when p < {ALPHA}. msgs/s is judged on a log scale, as netprof ab "
          f"judges it (a host's speed scales a rate): its means are geometric, the interval exp(Welch's "
          f"interval of the mean logs' difference); fairness is judged through the "
          f"spread of messages across connections (CV = √(1/Jain − 1)) on a log scale too, because Jain "
          f"saturates near 1. A cell with fewer than {MIN_ROUNDS} successful rounds on either side gets "
          f"\"not enough rounds\". Rounds of one run share its machine state, so a small significant change can "
          f"still be run-to-run drift: confirm it by running both again.")

# The load shape is always matched; any other dimension with one value in each run that differs
# between them is what the comparison is about (`--work spin:20`, `--framing stream`, a backend).
LOAD_KEYS = ("connections", "pipeline")
# A cell "changed" when one of these changed significantly; its why-sentence opens with them.
CHANGE_METRICS = ("msgs_per_sec", "lat_us.p50", "lat_us.p99", "per_conn.jain", metrics.CPU_TOTAL)
# ... and continues with these (what explains it), then the instruments' judged figures that say `explains`.
EXPLAIN_METRICS = ("cpu_us_per_msg.user", "cpu_us_per_msg.sys", "ctx_switches_per_msg")
SYSCALL_MIN_DELTA = 0.01  # per message: a smaller change of one syscall is not worth a line
FLAME_KINDS = ("oncpu",)
MINUS = "\u2212"


# ---------------------------------------------------------------------------------------------
# Loading

@dataclass
class Run:
    given: str  # what the user typed
    dir: Path  # the results directory (flamegraphs/ lives there)
    name: str
    df: pd.DataFrame  # stats.per_round rows, schema-normalized, every round (failed ones too)
    meta: dict
    filled: list[str] = field(default_factory=list)  # schema.RUN_SETTINGS this run's rows lack


def load_run(path: str | Path) -> Run:
    """A results directory (results.parquet, else summary.json) or a summary.json file."""
    instruments.judge_metrics()  # the instruments' judged figures, by name (their folders' metrics.py)
    p = Path(path)
    if not p.exists():
        raise compare_inputs.not_a_run(str(path), "no such file or directory")
    d = p if p.is_dir() else p.parent
    try:  # through results.py's readers: no link followed, control characters dropped
        if p.is_dir() and results.input_kind(p, results.RESULTS_PARQUET):
            df, _, meta = results.load(p)
        else:
            doc = results.read_json(d, p.name if not p.is_dir() else results.SUMMARY_JSON)
            if doc is None:
                raise compare_inputs.not_a_run(str(path), f"not a netprof run (it holds no {results.RESULTS_PARQUET} "
                                            f"or {results.SUMMARY_JSON})")
            if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
                raise compare_inputs.not_a_run(str(path), 'not a netprof summary (no "runs" list)')
            df = pd.DataFrame([results.flatten(r) for r in doc["runs"]])
            meta = doc.get("meta") or results.read_json(d, results.META_JSON, {})
            meta = meta if isinstance(meta, dict) else {}
    except InputError:
        raise
    except (OSError, ValueError, ArrowException) as e:
        raise InputError(f"{path}: its results cannot be read ({type(e).__name__}: {e}); the run that wrote "
                         "them was cut off or a file was changed: re-run it") from None
    if df.empty or "msgs_per_sec" not in df:
        raise compare_inputs.not_a_run(str(path), "it holds no measured row")
    return Run(str(path), d, d.name or str(path), stats.per_round(df), meta)


def _settings(base: Run, new: Run) -> list[str]:
    """schema.RUN_SETTINGS that are columns of either run; a run without one gets the value from its
    meta.json config, else the value netprof used before the column existed."""
    present = [s for s in schema.RUN_SETTINGS if s in base.df or s in new.df]
    for run in (base, new):
        cfg = run.meta.get("config") or {}
        for col in present:
            if col not in run.df:
                value = cfg.get(col, schema.RUN_SETTINGS[col])
                run.df[col] = value if isinstance(value, (str, int, float)) else schema.RUN_SETTINGS[col]
                run.filled.append(col)
    return present


# ---------------------------------------------------------------------------------------------
# Matching

def _scalar(v):
    """A hashable, comparable plain value (numpy → Python, 100.0 → 100, NaN → None)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if v.is_integer():
            return int(v)
    return v


def _values(df: pd.DataFrame, key: str) -> list:
    return list(dict.fromkeys(_scalar(v) for v in df[key]))


def _keys_of(df: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Each row's match key (schema.key_of for the cell dimensions, then the run settings)."""
    cells = [dict(zip(schema.CELL_KEYS, schema.key_of(r))) | {s: r.get(s) for s in schema.RUN_SETTINGS if s in keys}
             for _, r in df.iterrows()]
    return pd.Series([tuple(_scalar(c[k]) for k in keys) for c in cells], index=df.index)


@dataclass
class Match:
    keys: list[str]  # matched on
    across: dict[str, tuple]  # dimension → (BASE value, NEW value): what the comparison is about
    pairs: list[tuple[tuple, pd.DataFrame, pd.DataFrame]]  # (key, BASE rows, NEW rows)
    base_only: list[str]
    new_only: list[str]


def match(base: Run, new: Run) -> Match:
    settings = _settings(base, new)
    candidates = schema.CELL_KEYS + settings
    across = {}
    for k in candidates:
        if k in LOAD_KEYS:
            continue
        bv, nv = _values(base.df, k), _values(new.df, k)
        if len(bv) == 1 and len(nv) == 1 and bv != nv:
            across[k] = (bv[0], nv[0])
    keys = [k for k in candidates if k not in across]
    bk, nk = _keys_of(base.df, keys), _keys_of(new.df, keys)
    bgroups = {k: base.df.loc[idx] for k, idx in bk.groupby(bk, sort=False).groups.items()}
    ngroups = {k: new.df.loc[idx] for k, idx in nk.groupby(nk, sort=False).groups.items()}
    pairs = [(k, g, ngroups[k]) for k, g in bgroups.items() if k in ngroups]
    if not pairs:
        differ = [f"{k} {', '.join(map(str, _values(base.df, k)))} vs {', '.join(map(str, _values(new.df, k)))}"
                  for k in keys if not set(_values(base.df, k)) & set(_values(new.df, k))]
        raise InputError(
            f"{base.given} and {new.given} share no cell ({'; '.join(differ) or 'no combination in common'}): "
            f"compare runs made with the same -c/--pipeline; they may differ in one run-wide setting "
            f"(backend, --framing, --work, --python, ...)")
    label = _labeller(base, new, keys, across)
    return Match(keys, across, pairs,
                 [label(g.iloc[0], "base") for k, g in bgroups.items() if k not in ngroups],
                 [label(g.iloc[0], "new") for k, g in ngroups.items() if k not in bgroups])


def _labeller(base: Run, new: Run, keys: list[str], across: dict):
    """Cell labels naming the backend and the dimensions that vary within the runs."""
    both = pd.concat([base.df, new.df], ignore_index=True)
    dims = [k for k in schema.CELL_KEYS if k in keys and (k == "backend" or k in schema.varying(both, keys))]
    if "connections" not in dims:
        dims.append("connections")
    pipe = "pipeline" in keys and "pipeline" not in dims and _values(both, "pipeline") != [1]

    def label(row, side: str = "base") -> str:
        text = schema.cell_label(row, dims + (["pipeline"] if pipe else []))
        settings = [f"{k}={_scalar(row[k])}" for k in schema.RUN_SETTINGS
                    if k in keys and k in schema.varying(both, keys)]
        if "backend" in across:
            text = f"{across['backend'][0]} → {across['backend'][1]} {text}"
        return " ".join([text, *settings])
    return label


# ---------------------------------------------------------------------------------------------
# Judging

def _verdict(col: str, c: dict) -> tuple[str, bool | None]:
    """(verdict, better?) of one metric of one cell."""
    if c["n_base"] < MIN_ROUNDS or c["n_new"] < MIN_ROUNDS:
        return "not enough rounds", None
    if not c["significant"] or not c["direction"]:
        return "no significant change", None
    up = c["direction"] > 0
    better = up == metrics.metric_info(col).higher_is_better
    if col == "msgs_per_sec":
        return ("faster" if up else "slower"), better
    return ("higher" if up else "lower"), better


def describe(col: str, c: dict, protocol=None) -> dict:
    """A judged figure `c` (stats.compare_samples' fields) with its label (in the words of the cell's
    `protocol`: units), unit, verdict and whether the pages show it (a syscall only when it changed);
    `netprof ab` judges its pairs and describes them here."""
    info = metrics.metric_info(col, protocol)
    c["label"], c["unit"], c["higher_is_better"] = info.label, info.unit, info.higher_is_better
    c["verdict"], c["better"] = _verdict(col, c)
    syscall = col.startswith(metrics.KERNEL_OP_PREFIXES)  # a syscall or an io_uring operation, by name
    c["shown"] = not syscall or (c["verdict"] in ("higher", "lower") and abs(c["delta"]) >= SYSCALL_MIN_DELTA)
    return c


# At a set rate (--rate) a cell's throughput is the schedule's, not the server's: it is judged on this instead
# (netprof ab's default stopping metric under --rate), said as faster or slower.
RATE_METRIC = "lat_us.p99"


def judged_on(base_rate, new_rate, metric: str = RATE_METRIC) -> str:
    """The figure a cell's verdict is: msgs/s, or `metric` when both sides ran at a set rate."""
    return metric if (base_rate or 0) > 0 and (new_rate or 0) > 0 else "msgs_per_sec"


def cell_verdict(metrics: dict, col: str) -> str:
    """A cell's verdict, its judged figure `col`'s: 'faster' or 'slower' also where a lower figure is better (a
    latency, CPU per message)."""
    m = metrics.get(col)
    if m is None:
        return "not measured"
    if m["verdict"] in ("higher", "lower"):
        return "faster" if m["better"] else "slower"
    return m["verdict"]


def protocols(*frames: pd.DataFrame) -> list:
    """The protocols of the rows of `frames` (units' words for them: req/s when all are HTTP)."""
    return [p for f in frames if "protocol" in f for p in f["protocol"]]


def judge_cell(b: pd.DataFrame, n: pd.DataFrame, alpha: float = ALPHA) -> dict:
    """Every judged metric of one matched cell: stats.compare_metric plus label, verdict, shown."""
    bok = b[b["status"] == "ok"] if "status" in b else b
    nok = n[n["status"] == "ok"] if "status" in n else n
    metrics = {}
    cols = stats.metric_columns(pd.concat([bok, nok]))
    bok, nok = _zero_ops(bok, cols), _zero_ops(nok, cols)
    for col in cols:
        c = stats.compare_metric(col, bok, nok, alpha, CONFIDENCE)
        if c["n_base"] == 0 and c["n_new"] == 0:
            continue
        metrics[col] = describe(col, c, protocols(b, n))
    return {"rounds": {"base": int(len(bok)), "new": int(len(nok)),
                       "base_failed": int(len(b) - len(bok)), "new_failed": int(len(n) - len(nok))},
            "metrics": metrics}


def _zero_ops(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """`df` with the kernel operations (by name) of `cols` that its run never made: 0 in its probed rows
    (io_uring_enter with io_uring off; stats.per_round does the same within one run), unknown in the others."""
    missing = [c for c in cols if c.startswith(metrics.KERNEL_OP_PREFIXES) and c not in df]
    if not missing or metrics.SYSCALLS_TOTAL not in df:
        return df
    probed = df[metrics.SYSCALLS_TOTAL].notna()
    return df.assign(**{c: pd.Series(0.0, index=df.index).where(probed) for c in missing})


def _judged(c: dict | None) -> TypeGuard[dict]:
    return c is not None and c["verdict"] not in ("no significant change", "not enough rounds")


# Significant changes smaller than this are not worth a why-sentence (Jain 1.00 → 0.99 is still fair).
MIN_NOTABLE = {"per_conn.jain": 0.02}


def notable(col: str, c: dict | None) -> bool:
    return _judged(c) and abs(c["delta"]) >= MIN_NOTABLE.get(col, 0.0)


def why(label: str, figures: dict, protocol=None) -> str | None:
    """One sentence for a significant change: what changed, then the syscall and CPU deltas that
    explain it ('uvloop_sock c=100: +18% msgs/s; epoll_ctl per message 6.00 → 2.00, kernel CPU per
    message −3.1 µs'; req/s and per request for HTTP: `protocol` says, and `figures` have their labels
    in its words); None when nothing in CHANGE_METRICS changed significantly."""
    head = []
    for col in CHANGE_METRICS:
        c = figures.get(col)
        if c is None or not notable(col, c):
            continue
        if col == "msgs_per_sec":
            head.append(f"{_pct(c['ratio'])} {c['label']}")
        else:
            head.append(f"{c['label']} {fmt(col, c['mean_base'])} → {fmt(col, c['mean_new'])}"
                        + (f" ({_pct(c['ratio'])})" if col.startswith("lat_us.") else ""))
    if not head:
        return None
    explain = sorted((c for col, c in figures.items() if col.startswith(metrics.KERNEL_OP_PREFIXES)
                      and c["shown"] and _judged(c)), key=lambda c: -abs(c["delta"]))[:3]
    per_msg = metrics.SYSCALL_PREFIX  # formatted as a count per message
    parts = [f"{c['label']} {fmt(per_msg, c['mean_base'])} → {fmt(per_msg, c['mean_new'])}" for c in explain]
    for col in (*EXPLAIN_METRICS, *(col for col, m in metrics.INSTRUMENT_METRICS.items() if m.explains)):
        c = figures.get(col)
        if _judged(c):
            parts.append(f"{c['label']} {_signed(c['delta'])}{' ' + c['unit'] if c['unit'] else ''}"
                         if c["unit"] else f"{c['label']} {fmt(col, c['mean_base'])} → {fmt(col, c['mean_new'])}")
    if not parts:
        parts.append(f"no syscall, CPU or context-switch figure {units.per_unit(protocol)} changed significantly"
                     + ("" if metrics.SYSCALLS_TOTAL in figures else " (syscalls not counted: the runs had no probes)"))
    return f"{label}: {', '.join(head)}; {', '.join(parts)}"


# ---------------------------------------------------------------------------------------------
# Comparability of the runs (meta.json)

def _get(meta: dict, path: str):
    v: Any = meta
    for part in path.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(part)
    return v


COMPARABLE = (("netprof_version", "netprof version"), ("netprof_source", "netprof build"), ("kernel", "kernel"),
              ("cpu_model", "CPU model"), ("cpus", "CPU count"), ("python.version", "netprof's Python"),
              ("packages.uvloop", "uvloop"),
              ("packages.gevent", "gevent"), ("pinning.enabled", "pinning"),
              ("pinning.backend_cpu", "backend CPU"), ("pinning.loader_cpus", "loader CPUs"),
              ("config.duration", "measured seconds per cell"), ("config.warmup", "warm-up seconds"),
              ("config.remote", "remote mode"), ("config.netem", "link impairment"))
# A run keeps about one CPU busy per side (backend, loader): a 1-minute load average above the CPU
# count plus this says something else ran too.
BUSY_EXTRA = 1.0
STEAL_SHARE = 0.02  # a run during which more CPU time than this was stolen gets a warning


def _said(v) -> str:
    """A meta.json value as the warning prints it: an older run's missing one as "not recorded", not None."""
    return "not recorded" if v is None else str(v)


def _close(a, b) -> bool:
    """Two seconds within 1% of each other: a watch's are the seconds it watched (3.009 vs 3.011), not a setting."""
    return isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=0.01)


def _load(meta: dict) -> float | None:
    """The higher 1-minute load average of the run's start and end (meta.json host_before/after)."""
    values = [v[0] for v in (_get(meta, "host_before.loadavg"), _get(meta, "host_after.loadavg")) if v]
    return max(values) if values else None


def _steal_share(meta: dict) -> float | None:
    before, after = meta.get("host_before") or {}, meta.get("host_after") or {}
    try:
        total = after["cpu_total_s"] - before["cpu_total_s"]
        return (after["steal_s"] - before["steal_s"]) / total if total > 0 else None
    except (KeyError, TypeError):
        return None


# Separate runs on this kind of host spread up to 25% (docs/ab.md): an msgs/s interval wider than this is
# said to be wider, and that `netprof ab` resolves ±1% by pairing cells on warm servers.
RESOLUTION_WARN = 0.05


def resolution(cell: dict) -> float | None:
    """The msgs/s change these runs can resolve in `cell`: the half-width of its ratio's interval, as a share
    (0.08: ±8%); None without an interval (one round on a side, or BASE's mean not clearly away from 0)."""
    m = cell["metrics"].get("msgs_per_sec") or {}
    lo, hi = m.get("ratio_lo"), m.get("ratio_hi")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return (hi - lo) / 2


def resolution_warning(cells: list[dict], protocol=None) -> str | None:
    """One line when the runs cannot see a change of RESOLUTION_WARN: the widest cell and the way out."""
    widths = [(w, c["label"]) for c in cells if (w := c.get("resolution")) is not None]
    if not widths:
        return None
    w, label = max(widths)
    if w <= RESOLUTION_WARN:
        return None
    return (f"these runs resolve {units.rate_unit(protocol)} to ±{w:.0%} ({label}; the spread of their rounds): a "
            "smaller change is invisible here; `netprof ab` alternates both sides in pairs on warm servers and "
            "resolves ±1% on this kind of host (docs/ab.md)")


def warnings_for(base: Run, new: Run) -> list[str]:
    """What differs between the runs besides the cells: machine, versions, pinning, probes, load."""
    out = []
    for run in (base, new):
        if not run.meta:
            out.append(f"{run.given} has no meta.json: cannot check that the runs are comparable")
    if base.meta and new.meta:
        for path, what in COMPARABLE:
            a, b = _get(base.meta, path), _get(new.meta, path)
            if a != b and not (a is None and b is None) and not _close(a, b):
                out.append(f"{what} differs: {_said(a)} vs {_said(b)}")
        loads = [_load(m) for m in (base.meta, new.meta)]
        cpus = base.meta.get("cpus") or 1
        for run, load in zip((base, new), loads):
            if load is not None and load > cpus + BUSY_EXTRA:
                out.append(f"{run.given} ran on a busy machine: load average {load:.1f} on {cpus} CPUs "
                           "(other work competed with the measurement)")
        if loads[0] is not None and loads[1] is not None and abs(loads[0] - loads[1]) > cpus / 2:
            out.append(f"the machine's load differed: load average {loads[0]:.1f} vs {loads[1]:.1f} on {cpus} CPUs")
    for run in (base, new):
        share = _steal_share(run.meta)
        if share is not None and share > STEAL_SHARE:
            out.append(f"{run.given}: the hypervisor stole {share:.1%} of CPU time during the run")
    probes = [sorted({p for v in r.df.get("probes", pd.Series(dtype=str)).dropna() for p in str(v).split(",") if p})
              for r in (base, new)]
    if probes[0] != probes[1]:
        out.append(f"probes differ: {', '.join(probes[0]) or 'none'} vs {', '.join(probes[1]) or 'none'} "
                   "(probes cost throughput: compare runs made alike, both with or both without --no-probes)")
    for run in (base, new):
        if run.filled:
            out.append(f"{run.given}: rows lack {', '.join(run.filled)} (an older run): taken from its meta.json "
                       "or netprof's default then")
    return out


# ---------------------------------------------------------------------------------------------
# --fail-if (the rules: fail_if.py)

def _for_cell(ch: fail_if_rules.Check, cell: dict) -> fail_if_rules.Check:
    """`slower` is about the figure a cell is judged on (`judged_on`): msgs/s, or at a set rate its p99, whose rise
    is the regression; the other checks name their figure."""
    col = cell.get("judged_on", "msgs_per_sec")
    if ch.name != "slower" or col == ch.column:
        return ch
    return replace(ch, column=col, bad_up=not metrics.metric_info(col).higher_is_better)


def breaches(doc: dict, checks: list[fail_if_rules.Check]) -> list[str]:
    """One line per cell and check whose regression is significant and beyond the threshold."""
    out = []
    for comp in doc["comparisons"]:
        for cell in comp["cells"]:
            for ch in (_for_cell(ch, cell) for ch in checks):
                c = cell["metrics"].get(ch.column)
                if _judged(c) and ch.breached(c):
                    size = _pct(c["ratio"]) if ch.relative else _signed(c["delta"])
                    out.append(f"{ch.text}: {comp['new']['name']} {cell['label']}: {c['label']} "
                               f"{fmt(ch.column, c['mean_base'])} → {fmt(ch.column, c['mean_new'])} "
                               f"({size}, p={c['p']:.3g})")
    return out


# ---------------------------------------------------------------------------------------------
# The comparison document

def compare(paths: Sequence[str | Path], out: str | Path | None = None, fail_if: str = "") -> dict:
    """Compare NEW… against BASE (paths[0]); with `out`, write the differential flamegraphs there
    (compare_report.compare writes the pages too). Returns the JSON document (docs/results-format.md)."""
    checks = compare_inputs.check(paths, fail_if)
    runs = [load_run(p) for p in paths]
    out_dir = atomic.ensure_out_dir(out) if out else None
    base = runs[0]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # two runs in directories of the same name
        for i, r in enumerate(runs):
            r.name = f"{'BASE' if i == 0 else 'NEW' + (str(i) if len(runs) > 2 else '')} ({r.name})"
    comparisons = []
    for i, new in enumerate(runs[1:], 1):
        m = match(base, new)
        label = _labeller(base, new, m.keys, m.across)
        cells = []
        for key, b, n in m.pairs:
            cell = {**dict(zip(m.keys, key)), "label": label(b.iloc[0]), **judge_cell(b, n)}
            cell["judged_on"] = judged_on(b.iloc[0].get("rate"), n.iloc[0].get("rate"))
            cell["verdict"] = cell_verdict(cell["metrics"], cell["judged_on"])
            cell["why"] = why(cell["label"], cell["metrics"], protocols(b, n))
            cell["resolution"] = resolution(cell)
            cell["flamegraph_diff"] = _flame_diff(base, new, b.iloc[0], n.iloc[0], cell, out_dir, i)
            cells.append(cell)
        comparisons.append({
            "new": {"path": new.given, "name": new.name},
            "matched_on": m.keys, "compared_across": {k: list(v) for k, v in m.across.items()},
            "warnings": warnings_for(base, new)
            + [w for w in [resolution_warning(cells, protocols(*(f for _, b, n in m.pairs for f in (b, n))))] if w],
            "unmatched": {"base_only": m.base_only, "new_only": m.new_only},
            "cells": cells,
        })
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "method": {"text": METHOD, "alpha": ALPHA, "confidence": CONFIDENCE, "min_rounds": MIN_ROUNDS,
                   "test": "Welch's t-test (scipy.stats.ttest_ind, equal_var=False)",
                   "interval": "Fieller (Welch's degrees of freedom); log-scale metrics: "
                               "exp of Welch's interval of the difference of mean logs"},
        "base": {"path": base.given, "name": base.name},
        "comparisons": comparisons,
        "fail_if": {"checks": [c.text for c in checks], "breaches": []},
        "artifacts": {}}
    doc["fail_if"]["breaches"] = breaches(doc, checks)
    return json_ready(doc)


def _flame_diff(base: Run, new: Run, brow, nrow, cell: dict, out_dir: Path | None, i: int) -> dict | None:
    """The differential flamegraph of a changed cell when both runs sampled it (needs --out)."""
    return flame_diff((base.dir, schema.cell_slug(brow), base.name), (new.dir, schema.cell_slug(nrow), new.name),
                      cell, out_dir, i)


def flame_diff(base: tuple[Path, str, str], new: tuple[Path, str, str], cell: dict, out_dir: Path | None,
               i: int) -> dict | None:
    """The differential flamegraphs of a judged `cell` whose figures changed notably, from two sampled cells,
    each (results directory, cell slug, name): flamegraphs/<slug>/<kind>.folded under its directory.
    `netprof ab` calls it with its variants' sampling rounds."""
    if not any(notable(c, cell["metrics"].get(c)) for c in CHANGE_METRICS):
        return None
    (bdir, bslug, bname), (ndir, nslug, nname) = base, new
    found = {}
    for kind in FLAME_KINDS:
        a = _folded(bdir, f"flamegraphs/{bslug}/{kind}.folded")
        b = _folded(ndir, f"flamegraphs/{nslug}/{kind}.folded")
        if not (a and b):
            continue
        if out_dir is None:
            found[kind] = {"note": "both runs have flamegraphs: pass --out DIR to write the differential one"}
            continue
        rel = f"flamegraphs/{i}-{nslug}-{kind}-diff.svg"
        atomic.make_subdir(out_dir, "flamegraphs")
        try:
            # inferno gets private copies of what was read (diff_stacks), never a path inside a run
            diff_stacks(a.decode(errors="replace"), b.decode(errors="replace"), str(out_dir / rel),
                        title=f"{cell['label']}: {nname} vs {bname} ({kind})",
                        names=(f"{bname} {kind}", f"{nname} {kind}"))
            found[kind] = {"svg": rel}
        except (OSError, RuntimeError) as e:
            found[kind] = {"note": f"differential flamegraph failed: {e}"}
    return found or None


def _folded(run_dir: Path, name: str) -> bytes | None:
    """A run's folded stacks (read as results.py reads: no link followed), or None when missing or empty."""
    f = results.open_input(run_dir, name)
    if f is None:
        return None
    with f:
        return f.read() or None


# ---------------------------------------------------------------------------------------------
# Formatting (the why-sentences and --fail-if lines here; the pages' tables in compare_report)

def fmt(col: str, v) -> str:
    """A figure of column `col` as a person reads it: '92.3k', '120 µs', '1.9 ms', '0.98'."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if col == "msgs_per_sec":
        return human(v)
    if col == "per_conn.active_share":
        return f"{v:.0%}"
    if col.startswith("lat_us."):
        return units.duration_us(v)  # '1.9 ms', as the run's own tables
    if col.startswith("cpu_us_per_msg"):
        return f"{v:.2f} µs" if v < 1 else f"{v:.1f} µs"
    return f"{v:.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.3f}"


def _signed(v: float) -> str:
    text = f"{v:+.1f}" if abs(v) >= 0.1 else f"{v:+.2f}"
    return text.replace("-", MINUS)


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.0f}%".replace("-", MINUS) if ratio == ratio else "–"


def json_ready(obj):
    """NaN and infinities → null (strict JSON), numpy scalars → Python, recursively (ab's document too)."""
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    obj = results._clean(obj)
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj
