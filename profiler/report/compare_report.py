"""The comparison document (compare.compare) as a person reads it: the terminal's tables, compare.md,
compare.html and compare.json. Nothing here judges: every figure and verdict comes from the document."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from netprof.profiler.analysis.compare import MINUS, compare, fmt, notable
from netprof.profiler.core import atomic, units
from netprof.profiler.model import metrics
from netprof.profiler.report import report

# Shown for every cell; syscalls per message are shown when they changed.
HEADLINE = ("msgs_per_sec", "lat_us.p50", "lat_us.p99", "cpu_us_per_msg.user", "cpu_us_per_msg.sys",
            metrics.CPU_TOTAL, metrics.SYSCALLS_TOTAL, "ctx_switches_per_msg", "per_conn.jain")


def _ratio(c: dict) -> str:
    if c.get("judged_by"):  # Jain: the ratio is that of the spread across connections (CV)
        short = re.search(r"\((.+)\)", metrics.metric_info(c["judged_by"]).label)
        return f"{short.group(1) if short else c['judged_by']} {_ratio({**c, 'judged_by': None})}"
    if _missing(c["ratio"]):
        return "–"
    if c["ratio_lo"] is None:
        return f"{_r(c['ratio'])}× [{'unbounded' if c['n_base'] >= 2 and c['n_new'] >= 2 else 'n < 2'}]"
    # A ratio of two figures that are never negative is not either: an interval around a count near 0 (the
    # Fieller bounds of 0.01 → 0 reach below it) is cut at 0 rather than printed as [−0.09, 0.09].
    lo, hi = max(c["ratio_lo"], 0.0), c["ratio_hi"]
    d = _decimals(hi - lo)
    return f"{_r(c['ratio'], d)}× [{_r(lo, d)}, {_r(hi, d)}]".replace("-", MINUS)


def _decimals(width: float) -> int:
    """Decimals that show an interval `width` wide with two significant digits, two at the least: a ratio
    resolved to ±1.4% reads 0.983× [0.969, 0.997], not 0.98× [0.97, 1.00]."""
    if not width or width <= 0 or math.isnan(width) or math.isinf(width):
        return 2
    return min(4, max(2, 1 - math.floor(math.log10(width))))


def _r(x: float, decimals: int = 2) -> str:
    return f"{x:.{decimals}f}" if abs(x) >= 0.1 or x == 0 else f"{x:.2g}"


def _missing(v) -> bool:
    """NaN, or the null compare.json_ready made of it (one round a side has no p-value)."""
    return v is None or v != v


def _p(c: dict) -> str:
    return "–" if _missing(c["p"]) else f"{c['p']:.3f}" if c["p"] >= 0.001 else "<0.001"


def _verdict_text(col: str, c: dict) -> str:
    """'lower (better)', 'slower', 'no significant change'."""
    if c["better"] is None or col == "msgs_per_sec":
        return c["verdict"]
    if not notable(col, c):
        return f"{c['verdict']} (negligible)"
    return f"{c['verdict']} ({'better' if c['better'] else 'worse'})"


def _headline(cell: dict) -> list[str]:
    """BASE, NEW and their ratio of the figure a cell is judged on: msgs/s ('33.3k'), or at a set rate its
    latency, named ('latency p99 1.9 ms')."""
    col = cell.get("judged_on", "msgs_per_sec")
    m = cell["metrics"].get(col) or {}
    name = "" if col == "msgs_per_sec" or not m else f"{m['label']} "
    return [name + fmt(col, m.get("mean_base")), name + fmt(col, m.get("mean_new")), _ratio(m) if m else "–"]


def view(doc: dict) -> dict:
    """The document as table rows of strings: what the terminal, compare.md and compare.html show."""
    comps = []
    for comp in doc["comparisons"]:
        summary = [[cell["label"], *_headline(cell), cell["verdict"]] for cell in comp["cells"]]
        at_rate = any(cell.get("judged_on", "msgs_per_sec") != "msgs_per_sec" for cell in comp["cells"])
        details = []
        for cell in comp["cells"]:
            ms = cell["metrics"]
            # kernel operations (syscalls + io_uring) beside syscalls where a cell did io_uring work
            ring = any(c.startswith(metrics.RING_PREFIX) for c in ms)
            head = [x for c in HEADLINE for x in ((c, metrics.KERNEL_OPS_TOTAL) if ring and c == metrics.SYSCALLS_TOTAL
                                                  else (c,))]
            order = [c for c in head if c in ms] + [c for c in ms
                                                        if c.startswith(metrics.KERNEL_OP_PREFIXES) and ms[c]["shown"]]
            rows = [[ms[c]["label"], fmt(c, ms[c]["mean_base"]), fmt(c, ms[c]["mean_new"]), _ratio(ms[c]), _p(ms[c]),
                     _verdict_text(c, ms[c])] for c in order]
            r = cell["rounds"]
            rounds = f"rounds: {r['base']} vs {r['new']}" + (
                f" (failed: {r['base_failed']} vs {r['new_failed']})" if r["base_failed"] or r["new_failed"] else "")
            flames = [{"kind": k, **v} for k, v in (cell.get("flamegraph_diff") or {}).items()]
            details.append({"label": cell["label"], "rounds": rounds, "rows": rows, "why": cell["why"],
                            "flames": flames})
        across = ", ".join(f"{k} {b} → {n}" for k, (b, n) in comp["compared_across"].items())
        # the cells' protocols (matched on, else compared across): req/s when all are HTTP (units)
        rate = units.rate_unit([c.get("protocol") for c in comp["cells"]]
                               + list(comp["compared_across"].get("protocol", [])))
        comps.append({"name": comp["new"]["name"], "path": comp["new"]["path"],
                      "matched_on": ", ".join(comp["matched_on"]), "across": across,
                      "warnings": comp["warnings"], "unmatched": comp["unmatched"],
                      "summary": summary, "details": details,
                      # at a set rate a row's figures are its judged metric's, named in them ("latency p99 2 ms")
                      "summary_header": ["cell", *(("BASE", "NEW") if at_rate else (f"BASE {rate}", f"NEW {rate}")),
                                         "NEW/BASE [95%]", "verdict"],
                      "whys": [c["why"] for c in comp["cells"] if c["why"]]})
    return {"base": doc["base"], "comparisons": comps, "method": doc["method"]["text"], "ab": bool(doc.get("ab")),
            "tool": "netprof ab" if doc.get("ab") else "netprof compare",
            "fail_if": doc["fail_if"],
            "detail_header": ["metric", "BASE", "NEW", "NEW/BASE [95%]", "p", "verdict"]}


def _ab_plots(doc: dict, out_dir: Path) -> list[str | None]:
    """`netprof ab`'s per-pair plot of each comparison (ab_plot.py), written beside the pages: file names,
    None where a comparison has too few pairs. A plain compare document has none."""
    ab = doc.get("ab")
    if not ab:
        return [None] * len(doc["comparisons"])
    from netprof.profiler.report import ab_plot  # deferred on purpose: matplotlib, for ab's pages only

    names: list[str | None] = []
    for k, (comp, rec) in enumerate(zip(doc["comparisons"], ab["comparisons"]), start=1):
        cell = comp["cells"][0] if comp["cells"] else {}
        svg = ab_plot.draw(rec, (cell.get("metrics") or {}).get(ab["metric"]), ab["metric"], ab.get("metric_log", True),
                           doc["base"]["name"], comp["new"]["name"])
        name = None
        if svg:
            name = f"ab_pairs_{k}.svg"
            atomic.write_bytes(out_dir / name, svg)
        names.append(name)
    return names


def render(doc: dict, out_dir: Path) -> dict:
    """compare.md, compare.html and compare.json in `out_dir`; returns their paths."""
    context = view(doc)
    for comp, plot in zip(context["comparisons"], _ab_plots(doc, out_dir)):
        comp["pairs_plot"] = plot
    md = report.template_env(False).get_template("compare.md.j2").render(**context)
    env = report.template_env(True)
    env.filters["quality"] = _quality
    page = env.get_template("compare.html.j2").render(**context)
    paths = {"compare_md": out_dir / "compare.md", "compare_html": out_dir / "compare.html",
             "compare_json": out_dir / "compare.json"}
    atomic.write_text(paths["compare_md"], md)
    atomic.write_text(paths["compare_html"], page)
    artifacts = {k: str(v) for k, v in paths.items()}
    atomic.write_text(paths["compare_json"], json.dumps({**doc, "artifacts": artifacts}, indent=1, default=str))
    return artifacts


def _quality(verdict: str) -> str:
    """'better', 'worse' or '' for a verdict text (the colour of its cell)."""
    return "better" if verdict == "faster" or "(better)" in verdict else \
        "worse" if verdict == "slower" or "(worse)" in verdict else ""


def _style(verdict: str) -> str | None:
    return {"better": "green", "worse": "red"}.get(_quality(verdict))


def print_doc(doc: dict, console: Console) -> None:
    """The rich terminal rendering."""
    v = view(doc)
    if v["ab"]:  # the variants of one run: named, and the run's directory once
        console.print(f"[bold]BASE[/bold] variant {escape(doc['base']['name'])} of {escape(doc['base']['path'])}")
    else:
        console.print(f"[bold]BASE[/bold] {escape(doc['base']['path'])}")
    for comp in v["comparisons"]:
        console.print(f"[bold]NEW[/bold]  variant {escape(comp['name'])}" if v["ab"] else
                      f"[bold]NEW[/bold]  {escape(comp['path'])}")
        console.print(f"matched on: {escape(comp['matched_on'])}"
                      + (f"; compared across: [bold]{escape(comp['across'])}[/bold]" if comp["across"] else ""))
        for w in comp["warnings"]:
            console.print(f"[yellow]warning:[/yellow] {escape(w)}")
        t = Table(*comp["summary_header"], title=escape(f"{comp['name']} vs {doc['base']['name']}"),
                  title_justify="left", header_style="bold")
        for row in comp["summary"]:
            style = _style(row[-1])
            t.add_row(*map(escape, row[:-1]), f"[{style}]{row[-1]}[/{style}]" if style else row[-1])
        console.print(t)
        for d in comp["details"]:
            t = Table(*v["detail_header"], title=escape(f"{d['label']} ({d['rounds']})"), title_justify="left",
                      header_style="bold", box=None)
            for row in d["rows"]:
                style = _style(row[-1])
                t.add_row(*map(escape, row[:-1]), f"[{style}]{row[-1]}[/{style}]" if style else row[-1])
            console.print(t)
            for f in d["flames"]:
                console.print(f"  {f['kind']} differential flamegraph: {escape(str(f.get('svg') or f.get('note')))}")
        if comp["whys"]:
            console.print("[bold]Why[/bold]")
            for line in comp["whys"]:
                console.print(f"  {escape(line)}", highlight=False)
        for side, cells in (("only in BASE", comp["unmatched"]["base_only"]),
                            ("only in NEW", comp["unmatched"]["new_only"])):
            if cells:
                console.print(f"unmatched, {side}: {escape(', '.join(cells))}")
    # The method in a line on the terminal (ab prints its run's own summary next); the page has it whole.
    line = ("the pairs, the interval and the verdict: compare.html and docs/ab.md" if v["ab"]
            else f"{_first_sentence(v['method'])} The rest is on the page (compare.html; --out DIR writes it)")
    console.print(f"[dim]method: {escape(line)}[/dim]", highlight=False)
    if doc["fail_if"]["checks"]:
        for line in doc["fail_if"]["breaches"]:
            console.print(f"[red]FAIL[/red] {escape(line)}")
        if not doc["fail_if"]["breaches"]:
            console.print(f"--fail-if {escape(','.join(doc['fail_if']['checks']))}: "
                          "no significant regression beyond the thresholds")
    if doc["artifacts"]:
        console.print(f"compare: {escape(doc['artifacts']['compare_html'])} (also compare.md, compare.json)")


def _first_sentence(text: str) -> str:
    """`text` up to its first full stop followed by a space (not a decimal point)."""
    m = re.match(r"(.*?\D\.)\s", text, re.S)
    return m.group(1) if m else text


def main(paths: list[str], as_json: bool = False, out: str | None = None, fail_if: str = "",
         console: Console | None = None) -> int:
    """The CLI's body: compare, write the pages (with `out`), print (rich, or only JSON), return the exit
    code (1 = --fail-if breached)."""
    doc = compare(paths, out=out, fail_if=fail_if)
    if out is not None:
        doc["artifacts"] = render(doc, Path(out))
    if as_json:
        print(json.dumps(doc, default=str))
        if doc["fail_if"]["breaches"]:
            Console(stderr=True).print("\n".join(f"FAIL {b}" for b in doc["fail_if"]["breaches"]),
                                       markup=False, highlight=False)
    else:
        print_doc(doc, console or Console())
    return 1 if doc["fail_if"]["breaches"] else 0
