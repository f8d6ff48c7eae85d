"""Turn a results directory into what a person reads: a few sentences of findings, the anomalies with
their evidence, network_ping_test's tables and the plots — as terminal output, report.md, a self-contained
report.html, and summary.json (the interface contract's JSON summary).

This module only gathers and renders; the numbers come from `stats.aggregate`, the opening sentences from
`findings`, the judgements from `rules`, the figures from `plots`, the layout from `templates/`.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup
from rich.console import Console
from rich.markup import escape

from netprof.profiler.analysis import rules
from netprof.profiler.analysis.rules import open_loop
from netprof.profiler.core import atomic, cache, units
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import knee_doc, results, schema, stats
from netprof.profiler.report import findings, plotset, routes, tables

HEADLINE = "Headline: every cell"
# A title's {rate} and {per} are the cells' words (units.rate_unit, units.per_unit: req/s for HTTP).
TABLES = (  # a function may return None: the table does not apply to this run (e.g. one backend)
    ("Throughput, {rate} ± 95% interval", tables.throughput_table),
    ("Relative speed (slowest backend of each column = 1)", tables.relative_table),
    ("Latency p50 / p95 / p99 / p999", tables.latency_table),
    ("Fairness across connections", tables.fairness_table),
    ("Backend CPU", tables.cpu_table),
    ("Syscalls {per}", tables.syscalls_table),
    ("Probe cost in each cell: probed sub-window {rate} and server CPU {per} vs the unprobed rest, ± 95% interval "
     "over the rounds, and how far apart the unprobed parts before and after it were (the headline numbers exclude "
     "it)",
     tables.probe_cost_table),
)
FLAMEGRAPH_KINDS = ("oncpu", "python", "offcpu", "mixed")
TEMPLATES = Path(__file__).parent / "templates"


# ---------------------------------------------------------------------------------------------
# The knee's page parts, the tables' titles and the instruments' sections (the opening sentences: findings.py).

def _knee(src: Path) -> tuple[dict, str] | None:
    """When `src` is `netprof knee`'s run: the table of its tries (tables.knee_tries_table) and its verdict's line
    (knee_doc.summary_line), the report's first finding. None otherwise, and for a knee.json this version cannot
    read (the rest of the report does not depend on it)."""
    try:
        doc = results.read_json(src, results.KNEE_JSON)
        made = tables.knee_tries_table(doc) if isinstance(doc, dict) else None
        if made is None:
            return None
        line = knee_doc.summary_line(doc)
        return ({"title": f"The knee's tries, each judged on its own against {doc['slo']['text']} (the tables below "
                          "average a rate's tries as rounds)", "header": made[0], "rows": made[1]},
                f"netprof knee: the {line}. Each try is in the table of the knee's tries, with its own verdict.")
    except (ValueError, KeyError, TypeError):
        return None


def _table_title(title: str, cells: pd.DataFrame) -> str:
    """A TABLES title in the words of `cells`' protocols."""
    protocol = cells.get("protocol")
    return title.format(rate=units.rate_unit(protocol), per=units.per_unit(protocol))


def instrument_sections() -> list[ModuleType]:
    """The instruments' report sections: probes/<name>/report.py with a SECTION, found by name (report.py names
    none). Each has `read(src)` (what it needs from the results directory, read before anything is written),
    `section(out, df, cells, read, meta)` (its template context, or None when the run did not carry it),
    SECTION (its anchor, its word in the page's navigation, the text of an anomaly's link to it), optionally
    `probe_note(cells)` (a sentence for the headline's probe sentence), and templates report.{md,html}.j2."""
    from netprof.probes import registry  # deferred: the instruments' packages, only when a report is made

    return [part for part in registry.parts("report") if hasattr(part, "SECTION")]


def _section_name(part: ModuleType) -> str:
    return part.__name__.rsplit(".", 2)[-2]  # netprof.probes.<name>.report


# ---------------------------------------------------------------------------------------------
# Run summary, failed cells, flamegraphs.

def run_facts(df: pd.DataFrame, meta: dict) -> dict:
    cfg = meta.get("config", {}) or {}
    ok = df[df["status"] == "ok"] if "status" in df else df
    facts = {
        "command": meta.get("command", ""),
        "started": meta.get("started", ""),
        "backends": ", ".join(dict.fromkeys(map(str, df["backend"]))) if "backend" in df else "",
        "connections": ", ".join(str(c) for c in sorted(df["connections"].unique())) if "connections" in df else "",
        "pipeline": ", ".join(str(p) for p in sorted(df["pipeline"].unique())) if "pipeline" in df else "1",
        "opened": _opened(df),
        "framing": ", ".join(sorted(schema.normalize(df)["framing"].dropna().unique())) if len(df) else "",
        "interpreters": _interpreters(df),
        "rounds": cfg.get("rounds", int(df["round"].max()) if "round" in df and len(df) else ""),
        "duration": cfg.get("duration", ""),
        "warmup": _warmup_words(df, cfg),
        "msize": cfg.get("msize", df["msize"].iloc[0] if "msize" in df and len(df) else ""),
        "message": _message_words(schema.normalize(df), cfg) if len(df) else "",
        "zmq_client": _zmq_client_words(df),
        "measured_s": float(ok["duration_s"].sum()) if "duration_s" in ok else None,
        "cells_total": len(df), "cells_failed": int((df["status"] != "ok").sum()) if "status" in df else 0,
        "probes": ", ".join(sorted({p for v in df.get("probes", pd.Series(dtype=str)).dropna()
                                    for p in str(v).split(",") if p})) or "none",
        "machine": f"{meta.get('cpu_model', '?')}, {meta.get('cpus', '?')} CPUs, kernel {meta.get('kernel', '?')}",
        "python": (meta.get("python") or {}).get("version", ""),
        "packages": ", ".join(f"{k} {v}" for k, v in (meta.get("packages") or {}).items() if v),
        "pinning": _pinning(meta.get("pinning") or {}),
        "netprof": " ".join(filter(None, (meta.get("netprof_version"),
                                          meta.get("netprof_source") and f"({meta['netprof_source']})"))),
        "probe_cost": _syscall_cost(meta.get("probe_cost_per_syscall")),
    }
    return facts


def _warmup_words(df: pd.DataFrame, cfg: dict) -> str:
    """' after 1 s of warm-up' (and when it began, with --warmup-after served), from the run's config; '' without
    one (a watch has none)."""
    if cfg.get("warmup") is None:
        return ""
    served = "warmup_after" in df and (df["warmup_after"] == "served").any()
    return (f" after {cfg['warmup']:g} s of warm-up"
            + (" begun once every connection had been answered (--warmup-after served)" if served else ""))


def _opened(df: pd.DataFrame) -> str:
    """'; at a set rate, more as requests needed them: up to 79 open at once (--max-connections 1,000)', where the
    loader opened connections during the window (PROTOCOL.md "Connections as needed"); else ''."""
    if "open_loop.conns_max" not in df or df["open_loop.conns_max"].dropna().empty:
        return ""
    most = int(df["open_loop.conns_max"].max())
    cap = df["open_loop.max_connections"].dropna() if "open_loop.max_connections" in df else pd.Series(dtype=float)
    cap_text = f" (--max-connections {int(cap.max()):,})" if not cap.empty else ""
    return (f"; at a set rate, more as {units.exchanges(df.get('protocol'))} needed them: up to {most:,} open at "
            f"once{cap_text}")


def _interpreters(df: pd.DataFrame) -> str:
    """The cells' interpreters; a watched server's is its own (netprof did not start it, and will not run its
    binary as root to ask)."""
    names = [str(v) for v in df["interpreter"].dropna() if str(v)] if "interpreter" in df else []
    if not names and schema.watched_frame(df):
        return "the watched server's own, not started by netprof"
    kinds = set(df["server_kind"].dropna()) if "server_kind" in df else set()
    own = [f"--{k}" for k in ("cmd", "attach") if k in kinds]  # the user's servers run what they were given
    if own:
        names.append(f"the {' and '.join(own)} server's own")
    return ", ".join(dict.fromkeys(names))


def _message_words(df: pd.DataFrame, cfg: dict) -> str:
    """What one message of this run was: '64-byte messages, message framing', or 'HTTP `GET
    /plaintext` requests, each server's own framing' (the HTTP backends and your own servers parse
    requests themselves)."""
    if schema.watched_frame(df):
        return "the requests its clients sent (netprof watch: no loader)"
    framings = sorted(df["framing"].dropna().unique())
    words = ", ".join("each server's own" if f == "own" else f for f in framings) + " framing"
    protocols = set(df["protocol"].dropna())
    if protocols <= {"echo"}:
        return f"{cfg.get('msize', df['msize'].iloc[0] if 'msize' in df else '?')}-byte messages, {words}"
    if protocols == {"http"}:
        return f"HTTP {cfg.get('request', '?')} requests, {words}"
    return f"{', '.join(sorted(protocols))} exchanges, {words}"


ZMQ_CLIENT_WORDS = {  # --zmq-client, as "What ran" says it
    "libzmq": "libzmq DEALER sockets in the loader (--zmq-client libzmq; a round trip includes its I/O thread's queue)",
    "native": "the loader's own ZMTP 3.0 DEALER connections on its epoll loop (--zmq-client native)",
}


def _zmq_client_words(df: pd.DataFrame) -> str:
    """What drove the ZeroMQ backends' rows (reads "frames"), "" in a run without them: it changes what their
    latency holds. Rows written before the column have its legacy value (schema.RUN_SETTINGS)."""
    if "reads" not in df:
        return ""
    zmq = df[df["reads"] == "frames"]
    legacy = schema.RUN_SETTINGS["zmq_client"]
    values = zmq["zmq_client"].fillna(legacy) if "zmq_client" in zmq else [legacy] * len(zmq)
    return "; ".join(ZMQ_CLIENT_WORDS.get(str(v), str(v)) for v in dict.fromkeys(values))


def _syscall_cost(c: dict | None) -> str:
    if not c:
        return ""
    if c.get("source") == "cache":  # selfcost.cached: measured earlier in this boot (doctor, or a probed run)
        when = f"measured on this host {units.seconds(float(c.get('age_s') or 0))} earlier in this boot, and cached"
    else:
        when = "measured on this host during the run"
    return (f"{c['added_target_ns']:+.0f} ns per syscall of the watched server, {c['added_bystander_ns']:+.0f} ns per "
            f"syscall of every other process, while attached (a getppid() costs {c['bare_ns']:.0f} ns from Python "
            f"here; {when})")


def _pinning(p: dict) -> str:
    if not p:
        return "unknown"
    if not p.get("enabled", True):
        return "not pinned"
    loader = p.get("loader_cpus")
    loader = ",".join(map(str, loader)) if isinstance(loader, (list, tuple)) else loader
    return f"backend on CPU {p.get('backend_cpu')}, loader on CPU(s) {loader}"


def failed_rows(df: pd.DataFrame) -> list[dict]:
    if "status" not in df:
        return []
    bad = schema.normalize(df[df["status"] != "ok"])
    return [{"label": schema.cell_label(r, with_round=True), "error": r.get("error") or "?"} for _, r in bad.iterrows()]


def sampling_cost(entry: dict, df: pd.DataFrame) -> str | None:
    """What sampling cost this cell: the sampling round's msgs/s against the same cell's throughput
    rounds (measured in this run; bench/RESULTS.md has the interleaved benchmark)."""
    sampled = entry.get("msgs_per_sec")
    if not sampled or df.empty or "msgs_per_sec" not in df:
        return None
    same = schema.select(schema.normalize(df), entry)
    same = same[same["status"] == "ok"] if "status" in same else same
    unit = units.rate_unit(entry.get("protocol") or (same["protocol"] if "protocol" in same else None))
    if same.empty:
        return f"sampling round: {sampled:,.0f} {unit} (no throughput round of this cell to compare)"
    base = float(same["msgs_per_sec"].mean())
    return (f"sampling round ran at {sampled:,.0f} {unit} vs {base:,.0f} in the throughput rounds "
            f"(×{sampled / base:.2f}: what the samplers cost; one run, and this machine varies ±10%)")


def find_flamegraphs(out: Path, df: pd.DataFrame | None = None) -> list[dict]:
    """flamegraphs/<cell>/{oncpu,python,offcpu,mixed}.svg that exist (paths relative to `out`), with the
    sampler's notes and what sampling cost. Read as results.py reads (a link is refused)."""
    try:
        doc = results.read_json(out, "flamegraphs/index.json", [])
    except InputError:  # a link or another user's file: refused, not skipped
        raise
    except ValueError:  # not JSON (a run cut off while writing it): the SVGs are still linked
        doc = []
    index = {Path(str(e.get("dir", ""))).name: e for e in (doc if isinstance(doc, list) else [])
             if isinstance(e, dict)}
    found = []
    for name in results.list_input_dir(out, "flamegraphs") or []:
        if results.input_kind(out / "flamegraphs", name) != "dir":
            continue
        cell = out / "flamegraphs" / name
        svgs = {k: f"flamegraphs/{name}/{k}.svg" for k in FLAMEGRAPH_KINDS
                if results.input_kind(cell, f"{k}.svg") == "file"}
        entry = index.get(name, {})
        notes = list(entry.get("notes") or [])
        if entry.get("mixed_stacks") and "mixed" not in svgs:
            notes.append(f"no mixed Python+kernel view: {entry['mixed_stacks']}")
        cost = sampling_cost(entry, df if df is not None else pd.DataFrame())
        if svgs or notes:
            found.append({"cell": name, "svgs": svgs, "notes": notes, "cost": cost})
    return found


def flamegraph_lines(out: Path) -> list[str]:
    """The end of `netprof flamegraph` on a terminal: each sampled cell's SVGs by path (what py-spy's "Wrote
    flamegraph data to" gives), and why a view is missing."""
    lines = []
    for f in find_flamegraphs(out):
        lines.append(f"{f['cell']}:")
        lines += [f"  {kind:<7} {out / path}" for kind, path in f["svgs"].items()]
        lines += [f"  note: {n}" for n in f["notes"]]
    return lines or [f"no flamegraph was written in {out / 'flamegraphs'}/ (index.json says why)"]


def headline_note(cells: pd.DataFrame, watched: bool = False, knee: bool = False) -> str:
    """Where the headline table's figures come from, in one line. `watched`: rows of `netprof watch --out`
    (latency "server": no loader, the server time where a run has the round trip); `knee`: a knee run's rates as
    its verdict read them (_as_judged)."""
    if cells.empty:
        return ""
    if watched:
        return ("netprof watch: no loader. Requests and their rate counted by the kernel over the watch; "
                "latency is the server time (a request's first byte in → its answer sent); CPU per request from "
                "/proc over the same window.")
    n = sorted({int(v) for v in cells["mps_n"].dropna()}) if "mps_n" in cells else []
    rounds = units.plural(n[0], "round") if len(n) == 1 else f"{n[0]}–{n[-1]} rounds" if n else "the rounds"
    protocol = cells.get("protocol")
    at_rate = bool(schema.at_rate(cells).any())
    said = "one round each, so no interval" if n == [1] else f"mean of {rounds} ± its 95% interval"
    text = ("In this knee run each rate is read as the verdict read it: a rate that passed, its passing try; one "
            "that failed, the mean of its tries (the knee's tries table has each; the other tables average them). "
            if knee else "")
    text += (f"{units.rate_unit(protocol)}: {said}; latency from the loader"
            + (" (at a set rate, from each request's intended send)" if at_rate else "")
            + f"; CPU {units.per_unit(protocol)} from /proc over the same window")
    if "probe_cost" in cells and cells["probe_cost"].notna().any():
        text += f"; syscalls {units.per_unit(protocol)} from the probed part of the window"
    return text + (". Fastest first within each group (at a set rate, the lowest p99 first)." if at_rate
                   else ". Fastest first within each group.")


# ---------------------------------------------------------------------------------------------
# Where each anomaly can be seen: its plot, the flamegraph of its cell.

def _anomaly_cells(a: dict, cells: pd.DataFrame) -> pd.DataFrame:
    """The aggregate's cells an anomaly is about (all of its backend's when it names no scale)."""
    if cells.empty or "backend" not in cells:
        return cells
    sel = cells["backend"] == a.get("backend")
    for k in ("connections", "pipeline", "framing", "interpreter"):
        if a.get(k) is not None and k in cells:
            sel &= cells[k] == a[k]
    return cells[sel]


def _anomaly_protocols(a: dict, cells: pd.DataFrame) -> list:
    """The protocols of an anomaly's cells: its evidence's keys read in their words on the page (units.value)."""
    mine = _anomaly_cells(a, cells)
    return list(mine["protocol"]) if "protocol" in mine else []


def anomaly_links(a: dict, cells: pd.DataFrame, plots: list, flames: list[dict], sections: list[dict]) -> list[dict]:
    """[{text, href, anchor}]: the anomaly's plots (its rule's, anchor in the page, file for report.md),
    its section (one of the report's `sections`, by instrument name) and, when its cell was sampled, that
    cell's flamegraphs."""
    rule = rules.META[a["id"]]
    made = {p.name: p for p in plots}
    links = [{"text": f"{made[n].title} plot", "anchor": f"#{made[n].anchor}", "href": made[n].path}
             for n in rule.plots if n in made]
    for s in sections:
        if rule.section == s["name"]:
            links.append({"text": s["link"], "anchor": f"#{s['anchor']}", "href": f"#{s['anchor']}"})
    by_cell = {f["cell"]: f for f in flames}
    for slug in dict.fromkeys(schema.cell_slug(r) for _, r in _anomaly_cells(a, cells).iterrows()):
        f = by_cell.get(slug)
        for kind, path in (f or {}).get("svgs", {}).items():
            links.append({"text": f"{kind} flamegraph ({slug})" if a.get("connections") is None
                          else f"{kind} flamegraph", "anchor": path, "href": path})
    return links


# ---------------------------------------------------------------------------------------------
# Rendering

def _inline_md(text: str) -> Markup:
    """Escape, then render the two bits of Markdown the explanations use: `code` and **bold**."""
    s = html.escape(str(text))
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    return Markup(s)


def _lead(text: str) -> tuple[str, str]:
    """A finding split into its first sentence (shown) and the rest (one click away in the HTML)."""
    m = re.search(r"(?<=[.:])\s+(?=[A-Z*])", str(text))
    return (text, "") if m is None else (text[:m.start()], text[m.end():])


def _md_cell(v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    def dump_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):  # a cache that cannot be written (read-only /var) is only a miss
            super().dump_bytecode(bucket)


def _bytecode_cache(autoescape: bool) -> jinja2.BytecodeCache | None:
    """Compiled templates kept in netprof's cache (jinja checks each against its template's source):
    compiling the report's templates is ~0.1 s of every report. One set per autoescape setting, which is
    compiled into the code but not part of jinja's key. Only in the root-owned, checked cache directory:
    what is stored there is code that runs."""
    where = cache.directory("jinja")
    return _BytecodeCache(where, f"%s.{int(autoescape)}.cache") if where else None


def template_env(autoescape: bool) -> jinja2.Environment:
    """The templates/ environment with the report's filters (compare_report renders its pages with it too)."""
    from netprof.probes import registry  # deferred: see instrument_sections

    # templates/, then the instruments' folders: a section's templates are <name>/report.{md,html}.j2 there
    loader = jinja2.FileSystemLoader([str(TEMPLATES), *registry.folders()])
    env = jinja2.Environment(loader=loader, autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             bytecode_cache=_bytecode_cache(autoescape))
    env.filters["inline_md"] = _inline_md
    env.filters["md_cell"] = _md_cell
    env.filters["md_table"] = lambda t: tables.to_markdown(t["header"], [[_md_cell(c) for c in r] for r in t["rows"]])
    env.filters["ev_value"] = lambda v: ", ".join(map(str, v)) if isinstance(v, list) else v
    # (key, value[, protocols]) → (label in the cells' words, value in its unit)
    env.filters["ev_row"] = lambda kv: units.value(*kv)
    env.filters["lead"] = _lead
    env.globals["plural"] = units.plural
    return env


def _stack_text(s: dict) -> str:
    return f"{s['syscall']} × {s.get('count')}\n" + "\n".join(f"  {f}" for f in s.get("frames", []))


def render(out: Path, context: dict) -> tuple[Path, Path]:
    md = template_env(False).get_template("report.md.j2").render(**context, stack_text=_stack_text)
    page = template_env(True).get_template("report.html.j2").render(**context, stack_text=_stack_text)
    atomic.write_text(out / "report.md", md)
    atomic.write_text(out / "report.html", page)
    return out / "report.md", out / "report.html"


DRAW_PRELOAD = ("netprof.profiler.report.plots",)  # what _draw imports: a warm drawing process imports it ahead


def _draw(name: str, cells: pd.DataFrame, per_conn: pd.DataFrame | None) -> bytes | None:
    """One plot's SVG, for plotset (which calls it in its drawing children, or not at all when its cache
    has the set). The import is deferred on purpose: matplotlib takes ~0.5 s to import."""
    from netprof.profiler.report import plots

    return plots.draw(name, cells, per_conn)


def timeline_plot(out: Path, timeline: pd.DataFrame | None) -> list[plotset.Plot]:
    """The open-loop cells' latency through the window (plots.latency_time), drawn here: only runs with --rate
    have a timeline, so only they pay for importing matplotlib in this process."""
    if timeline is None or timeline.empty:
        return []
    from netprof.profiler.report import plots

    svg = plots.svg_of(plots.latency_time, timeline)
    return plotset.save(out, [("latency_time", "Latency through the window", "open loop (--rate): p99 and p50 from "
                               "each request's intended send, slice by slice through the measured window", svg)])


SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def finish(out_dir: str | Path, console: Console | None = None, dest: str | Path | None = None,
           render_report: bool = True) -> dict:
    """Analyse a results directory and write report.md, report.html, plots/ and summary.json into it,
    or into `dest` (`netprof report DIR --out OTHER`; the caller checked and created it), whose report
    then links the flamegraphs where they are, in DIR. Without `render_report` (`run --no-report`) only
    summary.json: the same rows, cells and anomalies, no plots or pages (`netprof report DIR` draws them)."""
    src = Path(out_dir)
    out = Path(dest) if dest is not None else src
    # Everything read from DIR is read before anything is written: a refused input leaves no half report.
    df, per_conn, meta = results.load(src)
    parts = instrument_sections()
    from netprof.probes import registry  # deferred: see instrument_sections

    registry.judge_metrics()  # the instruments' judged figures (their metrics.py), for summary.json's cells
    inputs = [part.read(src) for part in parts]
    timeline = results.load_timeline(src)
    flames = find_flamegraphs(src, df)
    stack_files = [str(src / "stacks" / n) for n in results.list_input_dir(src, "stacks") or [] if n.endswith(".json")]
    cells = stats.aggregate(df)
    judged = _as_judged(cells, df, src)  # the headline, its plots and the opening sentences: as a knee's verdict read
    notes = [part.probe_note(cells) for part in parts if hasattr(part, "probe_note")]  # for the probe sentence
    by_route = routes.sentence(meta.get("watch_routes"))  # a watched HTTP server's: where its server time went
    if not render_report:  # `run --no-report`: the findings and summary.json, nothing drawn or rendered
        found = rules.detect(df, per_conn, meta, src, cells=cells)
        summary = _summary(src, out, df, stats.cell_summaries(df), found, meta, None, [], flames, stack_files)
        if console is not None:
            said = findings.sentences(cells, found, df, ranked=judged, notes=notes, routes=by_route)
            _print(console, {"headline": _headline(judged), "findings": said, "anomalies": found}, out, rendered=False)
        return summary
    with plotset.start(judged, per_conn, out, _draw) as pending:  # drawn in children meanwhile
        found = rules.detect(df, per_conn, meta, src, cells=cells)
        rendered = ([{"title": _table_title(t, cells), "header": made[0], "rows": made[1]} for t, fn in TABLES
                     if (made := fn(cells)) is not None] if not cells.empty else [])
        knee = _knee(src)
        if knee is not None:
            rendered.insert(0, knee[0])
        if out.resolve() != src.resolve():  # the report lives elsewhere: its links reach back into DIR
            back = os.path.relpath(src.resolve(), out.resolve())
            for f in flames:
                f["svgs"] = {k: f"{back}/{p}" for k, p in f["svgs"].items()}
        context: dict[str, Any] = {
            "facts": run_facts(df, meta),
            "findings": ([knee[1]] if knee is not None else [])
            + findings.sentences(cells, found, df, ranked=judged, notes=notes, routes=by_route),
            "routes": routes.table(meta.get("watch_routes")),
            "anomalies": found, "headline": _headline(judged),
            "headline_note": headline_note(judged, watched=schema.watched_frame(df), knee=judged is not cells),
            "tables": rendered, "flamegraphs": flames, "failed": failed_rows(df), "meta": meta}
        context["sections"] = [{**part.SECTION, **made, "name": _section_name(part),  # made's words win
                                "template": f"{_section_name(part)}/report"}
                               for part, read in zip(parts, inputs)
                               if (made := part.section(out, df, cells, read, meta)) is not None]
        cell_summaries = stats.cell_summaries(df)  # while the plots are drawn
        figures = context["plots"] = pending.result() + timeline_plot(out, timeline)
        context["first_plot"] = _first_plot(cells, figures)
    context["anomalies"] = [dict(a, links=anomaly_links(a, cells, figures, flames, context["sections"]),
                                 protocol=_anomaly_protocols(a, cells))
                            for a in found]  # links and words are for the page only: summary.json keeps `found`
    summary = _summary(src, out, df, cell_summaries, found, meta, render(out, context), figures, flames, stack_files)
    if console is not None:
        _print(console, context, out)
    return summary


def _as_judged(cells: pd.DataFrame, df: pd.DataFrame, src: Path) -> pd.DataFrame:
    """The cells the headline table, the plots and the opening sentences show: in a knee run, its rates as its
    verdict reads them (a rate that passed, its passing try; one that failed, the mean of its tries:
    rules.open_loop.knee_cells), not the tables' mean over every try of a rate (a knee's own rate read p99 47 ms
    there, 16.3 ms in another run's headline table under a 5-ms objective; its passing try's were 3.6 and 4.5 ms);
    `cells` itself otherwise."""
    knee = open_loop.knee_cells(df, src)
    if knee is None or "rate" not in cells:
        return cells
    return pd.concat([cells[~schema.at_rate(cells)], knee], ignore_index=True)


def _first_plot(cells: pd.DataFrame, figures: list[plotset.Plot]) -> str:
    """The plot beside the headline table: throughput; where cells ran at a set rate (each answered the rate asked:
    the bars would only draw the rates; a knee's closed-loop ceiling beside them) latency against load, or with one
    rate (no curve to draw) latency through the window."""
    drawn = {p.name for p in figures}
    if schema.at_rate(cells).any():
        for name in ("latency_load", "latency_time"):
            if name in drawn:
                return name
    return "throughput"


def _headline(cells: pd.DataFrame) -> dict | None:
    if cells.empty:
        return None
    header, rows = tables.headline_table(cells)
    return {"title": HEADLINE, "header": header, "rows": rows}


def _summary(src: Path, out: Path, df: pd.DataFrame, cell_summaries: list[dict], found: list[dict], meta: dict,
             pages: tuple[Path, Path] | None, figures: list[plotset.Plot], flames: list[dict],
             stack_files: list[str]) -> dict:
    """summary.json, written to `out` and returned; `pages`: report.md and report.html, None when not drawn."""
    md_path, html_path = pages or (None, None)
    artifacts = {"dir": str(out), "report_md": md_path and str(md_path), "report_html": html_path and str(html_path),
                 "summary_json": str(out / results.SUMMARY_JSON),
                 "results_parquet": str(src / results.RESULTS_PARQUET), "results_csv": str(src / results.RESULTS_CSV),
                 "plots": [str(out / p.path) for p in figures],
                 "flamegraphs": [os.path.normpath(out / s) for f in flames for s in f["svgs"].values()],
                 "stacks": stack_files}
    summary = {"schema": 1, "runs": results.rows_of(df), "cells": cell_summaries,
               "anomalies": found, "artifacts": artifacts, "meta": meta}
    atomic.write_text(out / results.SUMMARY_JSON, json.dumps(summary, indent=1, default=str))
    return summary


def _print(console: Console, context: dict, out: Path, rendered: bool = True) -> None:
    """The terminal's summary: the headline table, the findings, the anomalies' titles (the other
    tables are in the report)."""
    if context["headline"]:
        h = context["headline"]
        console.print(tables.to_rich(h["title"], h["header"], [[escape(str(c)) for c in r] for r in h["rows"]]))
    console.print()
    for line in context["findings"]:
        console.print(line.replace("**", ""), markup=False, highlight=False)
    for a in context["anomalies"][:8]:
        console.print(f"[{SEVERITY_STYLE[a['severity']]}]{a['severity'].upper():8}[/] {escape(a['title'])}")
    if len(context["anomalies"]) > 8:
        console.print(f"… and {len(context['anomalies']) - 8} more in the report")
    if rendered:
        console.print(f"report: {escape(str(out))}/report.html (also report.md, summary.json, results.parquet)")
    else:
        console.print(f"results: {escape(str(out))}/summary.json and results.parquet (no report: "
                      f"`netprof report {escape(str(out))}` draws it)")
