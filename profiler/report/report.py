"""Turn a results directory into what a person reads: a few sentences of findings, the anomalies with
their evidence, network_ping_test's tables and the plots — as terminal output, report.md, a self-contained
report.html, and summary.json (the interface contract's JSON summary).

This module only gathers and renders; the numbers come from `stats.aggregate`, the
judgements from `rules`, the figures from `plots`, the layout from `templates/`.
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
from netprof.profiler.model.stats import num, syscalls_of
from netprof.profiler.report import plotset, tables

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
     "over the rounds, and how far apart the unprobed parts before and after it were (headline numbers exclude it, "
     "not the --sockwait set's)",
     tables.probe_cost_table),
)
FLAMEGRAPH_KINDS = ("oncpu", "python", "offcpu", "mixed")
TEMPLATES = Path(__file__).parent / "templates"


# ---------------------------------------------------------------------------------------------
# Findings: the opening sentences, generated from the data.

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
                f"netprof knee: the {line}. Each try is in the first table, with its own verdict.")
    except (ValueError, KeyError, TypeError):
        return None


def _table_title(title: str, cells: pd.DataFrame) -> str:
    """A TABLES title in the words of `cells`' protocols."""
    protocol = cells.get("protocol")
    return title.format(rate=units.rate_unit(protocol), per=units.per_unit(protocol))


def _scale(r) -> str:
    """'100 connections, 8 messages in flight, message framing' (what varies in this run, in words)."""
    piped = (r.get("pipeline") or 1) > 1
    pipe = f", {int(r['pipeline'])} {units.exchanges(r.get('protocol'))} in flight" if piped else ""
    vary = r.get("_vary") or ()
    interp = f" on {r['interpreter']}" if "interpreter" in vary else ""
    framing = _framing_words(r.get("framing")) if "framing" in vary else ""
    pinned = ", not pinned" if "pinned" in vary and not r.get("pinned") else ""
    rate = f", {schema.BY_NAME['rate'].text(r.get('rate') or 0)}" if "rate" in vary else ""
    return f"{int(r['connections'])} connections{pipe}{framing}{interp}{pinned}{rate}"


def _framing_words(framing) -> str:
    """', message framing'; nothing for a server that frames its own way (schema's text)."""
    text = schema.BY_NAME["framing"].text(framing) if framing else ""
    return f", {text}" if text else ""


def _cost(r) -> str | None:
    """'9.1 µs of CPU per message (5.0 user + 4.1 kernel) and 2.01 syscalls per message' ('per request'
    in an HTTP cell) or None."""
    u, k = num(r, "cpu_us_per_msg.user"), num(r, "cpu_us_per_msg.sys")
    per = syscalls_of(r)
    each = units.per_unit(r.get("protocol"))
    parts = []
    if u is not None and k is not None:
        parts.append(f"{units.duration_us(u + k)} of CPU {each} ({units.duration_us(u)} user + "
                     f"{units.duration_us(k)} kernel)")
    if per:
        parts.append(f"{units.per_message(sum(per.values()))} syscalls {each}")
    return " and ".join(parts) or None


def _why(best, other) -> str:
    """One clause on why `best` beats `other`: where its per-message CPU is lower."""
    ub, kb, uo, ko = (num(best, "cpu_us_per_msg.user"), num(best, "cpu_us_per_msg.sys"),
                      num(other, "cpu_us_per_msg.user"), num(other, "cpu_us_per_msg.sys"))
    cb, co = _cost(best), _cost(other)
    if not cb or not co:
        return ""
    text = f" It needs {cb}; {other['backend']} needs {co}"
    if ub is not None and kb is not None and uo is not None and ko is not None:
        du, dk = uo - ub, ko - kb
        text += (", the difference mostly in user space (interpreter and event loop)" if du >= dk
                 else ", the difference mostly in the kernel (more or costlier syscalls)")
    return text + "."


def _span(values: list[float], fmt) -> str:
    """'90k' when the values agree within 5%, else '60k–90k'."""
    lo, hi = min(values), max(values)
    return fmt(hi) if hi <= lo * 1.05 else f"{fmt(lo)}–{fmt(hi)}"


def _counts(cs: list[int]) -> str:
    return _and([str(c) for c in cs])


def _ranking_sentence(runs: list[pd.Series], groups: list[pd.DataFrame]) -> str:
    """One sentence for consecutive scales that share the same winner and runner-up."""
    best, last = runs[-1], groups[-1]
    scales = [int(r["connections"]) for r in runs]
    where = _scale(best).replace(f"{int(best['connections'])} connections", f"{_counts(scales)} connections")
    rate = f"{_span([r['mps_mean'] for r in runs], units.rate)} {units.rate_unit(best.get('protocol'))}"
    head = f"At {where}, **{best['backend']}** " + (f"is fastest with {rate}" if len(last) > 1 else f"handled {rate}")
    ci = [num(r, "mps_ci_pct") for r in runs]
    known_ci = [c for c in ci if c is not None]
    if len(known_ci) == len(ci):
        head += f" (±{max(known_ci):.0f}%)"
    elif not known_ci:  # one round: there is no interval to give
        head += f" ({units.interval(None, min(num(r, 'mps_n') or 0 for r in runs))})"
    if len(last) == 1:
        cost = _cost(best)
        return head + (f", using {cost}." if cost else ".")
    ratios = [g.iloc[0]["mps_mean"] / g.iloc[1]["mps_mean"] for g in groups]
    nxt = last.iloc[1]
    head += f", {_span(ratios, lambda v: f'{v:.2f}')}× the next, {nxt['backend']}"
    if len(last) > 2:
        slowest = [g.iloc[0]["mps_mean"] / g.iloc[-1]["mps_mean"] for g in groups]
        head += f", and up to {max(slowest):.1f}× the slowest, {last.iloc[-1]['backend']}"
    head += "."
    close = [g for g in groups if g.iloc[0]["mps_mean"] - (num(g.iloc[0], "mps_ci") or 0)
             <= g.iloc[1]["mps_mean"] + (num(g.iloc[1], "mps_ci") or 0)]
    if close:
        head += (" The lead is within the measurement intervals"
                 + (f" at {_counts([int(g.iloc[0]['connections']) for g in close])} connections"
                    if len(groups) > 1 else "")
                 + ": not a clear win.")
    why = _why(best, nxt)
    if why and len(runs) > 1:
        why = why.replace(" It needs", f" At {int(best['connections'])} connections it needs", 1)
    return head + why


def _rate_sentences(cells: pd.DataFrame, df: pd.DataFrame) -> list[str]:
    """The sentences for the cells at a set rate: where one backend ran several rates at one scale (a knee, a rate
    sweep), one sentence along its curve (a sentence per rate read as the table again: a knee run opened with seven);
    where several backends ran at one or two rates, one per rate and scale on who kept the lowest p99; at more rates,
    one sentence on who kept it across them (SWEEP_RATES)."""
    keys = [k for k in schema.SERIES_KEYS if k not in ("backend", "rate") and k in cells] + ["connections"]
    out: list[str] = []
    for _, g in cells.groupby(keys, dropna=False, sort=True):
        shared = int((g.groupby("rate")["backend"].nunique() > 1).sum())  # rates run by more than one backend
        if g["backend"].nunique() == 1 and g["rate"].nunique() > 1:
            out.append(_curve_sentence(g.sort_values("rate")))
        elif shared >= SWEEP_RATES:
            out.append(_sweep_sentence(g, df))
        else:  # at a set rate every backend answers the rate asked: ranked by its p99, not its msgs/s
            out.extend(_rate_sentence(r, df) for _, r in g.groupby("rate", sort=True))
    return out


SWEEP_RATES = 3  # backends side by side at this many rates or more: one sentence across them, not one per rate


def _scale_of_rates(r) -> str:
    """_scale without the rate: for a sentence that goes on to name several."""
    return _scale({**r, "_vary": tuple(v for v in r["_vary"] if v != "rate")})


def _by_p99(g: pd.DataFrame) -> pd.DataFrame:
    """`g`'s cells, the lowest p99 (from the intended send) first."""
    return g.assign(_p99=[num(r, "lat_us.p99") for _, r in g.iterrows()]).sort_values("_p99", na_position="last")


def _sweep_sentence(g: pd.DataFrame, df: pd.DataFrame) -> str:
    """Several backends at several rates, at one scale: who kept the lowest p99 at how many of the rates (and the
    others where they did), the rates where the runner-up's rounds reached the leader's p99 (not a clear win), and
    who answered less than the rate asked, where."""
    ranked = [_by_p99(r) for _, r in g.groupby("rate", sort=True)]
    wins: dict[str, list] = {}
    for r in ranked:
        wins.setdefault(r.iloc[0]["backend"], []).append(r.iloc[0])
    (lead, led), *others = sorted(wins.items(), key=lambda kv: -len(kv[1]))
    first = ranked[0].iloc[0]
    where = _scale_of_rates(first)
    p99s = [num(c, "lat_us.p99") or 0.0 for c in led]
    span = _span(p99s, units.duration_us).replace("–", " to ")
    at = "every one" if not others else f"{len(led)} of them"
    text = (f"At {where}, across {len(ranked)} rates from {_asked(ranked[0].iloc[0])} to {_asked(ranked[-1].iloc[0])}, "
            f"**{lead}** kept the lowest p99 from the intended send at {at} ({span})")
    text += "".join(f"; {name} at " + _and([f"{_asked(c)} ({units.duration_us(num(c, 'lat_us.p99'))})" for c in cs])
                    for name, cs in others) + "."
    close = [_asked(r.iloc[0]) for r in ranked if len(r) > 1 and _overlap(df, r.iloc[0], r.iloc[1])]
    if close:
        text += f" At {_and(close)} the runner-up's rounds reached the leader's p99: not a clear win there."
    short: dict[str, list[str]] = {}
    for r in ranked:
        for _, c in r.iterrows():
            if (share := _short_of(c)) is not None:
                short.setdefault(c["backend"], []).append(f"{units.share(share, 0)} of {_asked(c)}")
    if short:
        text += " Short of the rate asked: " + "; ".join(f"{b} answered {_and(v)}" for b, v in short.items()) + "."
    return text


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _curve_sentence(g: pd.DataFrame) -> str:
    """One backend at several rates, lowest first: its p99 from the intended send at each (and the share of a rate it
    answered, where short of it), then its cost per message at the lowest rate and at the highest."""
    first, last = g.iloc[0], g.iloc[-1]
    where = _scale_of_rates(first)
    at = [f"{units.duration_us(num(r, 'lat_us.p99'))} at {_asked(r)}" + (f" ({a})" if (a := _answered(r)) else "")
          for _, r in g.iterrows()]
    if isinstance(first.get(open_loop.KNEE_ROUNDS), str):  # a knee run: the tries its verdict read
        read = (" Each rate is read as the knee's verdict read it: its passing try where it passed, the mean of its "
                "tries where it failed (the first table has each try).")
    else:
        n = [int(num(r, "mps_n") or 1) for _, r in g.iterrows()]
        many = str(max(n)) if min(n) == max(n) else f"{min(n)}–{max(n)}"
        read = f" Each rate is the mean of its {many} rounds." if max(n) > 1 else ""
    text = (f"At {where}, **{first['backend']}**, asked {len(g)} rates, kept a p99 from the intended send of "
            f"{', '.join(at[:-1])} and {at[-1]}.{read}")
    lo, hi = _cpu_us(first), _cpu_us(last)
    if lo is not None and hi is not None:
        each = units.per_unit(first.get("protocol"))
        calls = [sum(per.values()) if (per := syscalls_of(r)) else None for r in (first, last)]
        lo_calls, hi_calls = ((f" and {units.per_message(calls[0])} syscalls", f" and {units.per_message(calls[1])}")
                              if None not in calls else ("", ""))
        text += (f" It used {units.duration_us(lo)} of CPU{lo_calls} {each} at {_asked(first)}, "
                 f"{units.duration_us(hi)}{hi_calls} at {_asked(last)}.")
    return text


def _asked(r) -> str:
    return f"{int(r['rate']):,}/s"


def _cpu_us(r) -> float | None:
    u, k = num(r, "cpu_us_per_msg.user"), num(r, "cpu_us_per_msg.sys")
    return None if u is None or k is None else u + k


def _short_of(r) -> float | None:
    """The share of the rate asked a cell answered, where short of it (under 95%); else None."""
    share = num(r, "open_loop.achieved_share")
    return share if share is not None and share < 0.95 else None


def _answered(r) -> str:
    """'answering 81% of it', where the cell answered short of the rate asked; else ''."""
    share = _short_of(r)
    return "" if share is None else f"answering {units.share(share, 0)} of it"


def _rate_sentence(g: pd.DataFrame, df: pd.DataFrame) -> str:
    """One sentence for the backends at one set rate and scale: throughput is the rate asked, so who kept the lowest
    p99 from the intended send (and whether the runner-up's rounds reached as low: `df`'s rows, normalized), how
    much of the rate each answered where short of it, and what the best one costs per message."""
    g = _by_p99(g)
    best = g.iloc[0]

    def answered(r) -> str:
        return f", {a}" if (a := _answered(r)) else ""

    p99, p50 = units.duration_us(num(best, "lat_us.p99")), units.duration_us(num(best, "lat_us.p50"))
    where = _scale(best) + ("" if "rate" in (best.get("_vary") or ()) else  # the rate said even when the only one
                            f", {schema.BY_NAME['rate'].text(best['rate'])}")
    n = int(num(best, "mps_n") or 1)
    tries = best.get(open_loop.KNEE_ROUNDS)
    if isinstance(tries, str):  # a knee run: the rounds its verdict read
        said = (f" (its try that passed, round {tries})" if best.get(open_loop.KNEE_MET) else
                f" (the mean of its {n} tries, rounds {tries}, each failed)" if n > 1 else
                f" (its one try, round {tries}, failed)")
    else:
        said = f" (the mean of {n} rounds)" if n > 1 else ""
    head = f"At {where}{said}, **{best['backend']}** "
    head += (f"kept the lowest p99 from the intended send, {p99} (p50 {p50}){answered(best)}" if len(g) > 1 else
             f"answered with p99 {p99} from the intended send (p50 {p50}){answered(best)}")
    if len(g) > 1:
        head += "; " + ", ".join(f"{r['backend']} {units.duration_us(num(r, 'lat_us.p99'))}{answered(r)}"
                                 for _, r in g.iloc[1:].iterrows())
        if _overlap(df, best, g.iloc[1]):
            head += (f". Their rounds' p99s overlapped ({_p99_span(df, best)} against {_p99_span(df, g.iloc[1])}): "
                     "not a clear win")
    cost = _cost(best)
    return head + (f". It used {cost}." if cost else ".")


def _p99s(df: pd.DataFrame, cell) -> list[float]:
    """The p99 of each successful round of `cell` (df's rows of it; df normalized)."""
    rows = schema.select(df, cell)
    rows = rows[rows["status"] == "ok"] if "status" in rows else rows
    return [float(v) for v in rows.get("lat_us.p99", pd.Series(dtype=float)).dropna()]


def _overlap(df: pd.DataFrame, best, other) -> bool:
    """Whether the runner-up's best round reached the leader's worst: with one round each, not known (False)."""
    a, b = _p99s(df, best), _p99s(df, other)
    return len(a) > 1 and len(b) > 1 and min(b) <= max(a)


def _p99_span(df: pd.DataFrame, cell) -> str:
    v = _p99s(df, cell)
    return f"{units.duration_us(min(v))}–{units.duration_us(max(v))}"


def _fairness_sentence(cells: pd.DataFrame, found: list[dict]) -> str | None:
    """Whether service was fair, stated plainly either way (network_ping_test's starvation question),
    and, when it was not, the mechanism the starvation rule found."""
    if "per_conn.jain" not in cells or cells["per_conn.jain"].dropna().empty:
        return None
    starving = [a for a in found if a["id"] == "starvation"]
    piped = sorted(int(p) for p in cells["pipeline"].dropna().unique() if p > 1)
    if not starving:
        jain = cells["per_conn.jain"].dropna()
        lo, hi = f"{jain.min():.2f}", f"{jain.max():.2f}"
        span = lo if lo == hi else f"{lo}–{hi}"
        text = f"Every cell served its connections evenly (Jain index {span})"
        if piped:
            framings = set(cells["framing"].dropna()) if "framing" in cells else set()
            text += (f", also with {_counts(piped)} {units.exchanges(cells.get('protocol'))} in flight per connection: "
                     "the `sock_recv` starvation of network_ping_test (data already waiting lets one coroutine "
                     "keep reading without yielding) did not appear in this run")
            if framings == {"stream"}:
                text += (" — with stream framing each receive drains every queued message, so no connection "
                         "can run ahead; `--framing message` reads one message per receive, as the reference does")
        return text + "."
    where = "; ".join(f"{a['backend']} at {a['connections']} connections"
                      + (f", {a['pipeline']} in flight" if (a.get("pipeline") or 1) > 1 else "")
                      + _framing_words(a.get("framing"))
                      + (f" (Jain {j:.2f})" if (j := a["evidence"].get("Jain index (1 = fair)")) is not None else "")
                      for a in sorted(starving, key=lambda a: (a["backend"], a["connections"], a.get("pipeline") or 1)))
    see = (f"see the starvation {'anomaly' if len(starving) == 1 else 'anomalies'} and the per-connection plot")
    if len(starving) <= 3:
        text = (f"Fairness broke in {units.plural(len(starving), 'cell')}: {where} ({see}); the other cells served "
                "their connections evenly.")
    else:  # many: the first sentence says who and how badly, the list follows
        per: dict[str, int] = {}
        for a in starving:
            per[a["backend"]] = per.get(a["backend"], 0) + 1
        jains = [j for a in starving if (j := a["evidence"].get("Jain index (1 = fair)")) is not None]
        worst = f", Jain down to {min(jains):.2f}" if jains else ""
        text = (f"Fairness broke in {len(starving)} cells of {units.plural(len(per), 'backend')}: "
                + ", ".join(f"{b} ({n})" for b, n in sorted(per.items(), key=lambda kv: -kv[1]))
                + f" ({see}{worst}). The cells: {where}; the other cells served their connections evenly.")
    mechanisms = list(dict.fromkeys(a["evidence"]["mechanism"] for a in starving if a["evidence"].get("mechanism")))
    if mechanisms:
        text += " Why: " + " ".join(mechanisms)
    return text


def _probe_sentence(cells: pd.DataFrame) -> str | None:
    """Where the figures come from, and what the probes cost in these very cells."""
    if cells.empty or "probe_cost" not in cells or cells["probe_cost"].dropna().empty:
        return None
    share = cells["probed.share"].dropna() if "probed.share" in cells else pd.Series(dtype=float)
    part = f"the middle {100 * share.iloc[0]:.0f}%" if not share.empty else "a probed part"
    return (f"Throughput, latency, fairness and /proc CPU come from the unprobed part of each cell's window; the "
            f"syscall and context-switch counts from {part}, with the probes attached. Measured in these cells, "
            + _costs(cells) + "; the probe-cost table has each cell."
            + _drift_sentence(cells[~schema.at_rate(cells)])  # closed loop: msgs/s theirs to lose
            + _guard_sentence(cells)
            + "".join(part.probe_note(cells) for part in instrument_sections() if hasattr(part, "probe_note")))


def _costs(cells: pd.DataFrame) -> str:
    """What the probes cost: closed-loop cells in msgs/s; cells at a set rate, where every part of the window
    answers the rate asked, in the server's CPU per message (probe_cpu_cost)."""
    closed = ~schema.at_rate(cells)  # closed loop: msgs/s theirs to lose to the probes
    said = []
    cost = 100 * cells.loc[closed, "probe_cost"].dropna()
    if not cost.empty:
        said.append(f"the probes cost {_cost_phrase(cost)}")
    if (~closed).any():
        cpu = 100 * (cells.loc[~closed, "probe_cpu_cost"] if "probe_cpu_cost" in cells else cost.iloc[0:0]).dropna()
        per = units.per_unit(cells.loc[~closed].get("protocol"))
        at = ("at a set rate, where every part of the window answers the rate asked, " if said else
              "at a set rate every part of the window answers the rate asked, so ")
        if cpu.empty:  # rows written before the CPU figure
            said.append(at + "the probes' cost does not show in throughput; these cells, older, have no CPU "
                        "figure for it")
        elif round(float(cpu.max())) < 0:
            said.append(at + f"the probes cost nothing measurable in server CPU {per}: the probed part took "
                        f"{_span_pct(-cpu)} less than the rest of its window")
        elif round(float(cpu.min())) < 0:
            said.append(at + f"the probes cost between {_signed_span(cpu)} in server CPU {per} while attached "
                        "(below zero: noise)")
        else:
            said.append(at + f"the probes cost {_span_pct(cpu)} more server CPU {per} while attached")
    return "; ".join(said)


def _cost_phrase(cost: pd.Series) -> str:
    """'4% of throughput while attached'; where every cell's probed part ran faster than its unprobed parts (a
    negative cost: noise), that, not a 'cost' of −8%."""
    if round(float(cost.max())) < 0:
        return f"nothing measurable: the probed part ran {_span_pct(-cost)} faster than the rest of its window"
    if round(float(cost.min())) < 0:
        return f"between {_signed_span(cost)} of throughput while attached (below zero: noise)"
    return f"{_span_pct(cost)} of throughput while attached"


def _drift_sentence(cells: pd.DataFrame) -> str:
    """The cells' own noise floor for that cost: how far apart their two unprobed parts were."""
    if "unprobed_drift" not in cells or cells["unprobed_drift"].dropna().empty:
        return ""
    drift = 100 * cells["unprobed_drift"].dropna()
    return (f" With no probe attached, the two unprobed parts of the same windows (before and after the probed "
            f"part) were {_span_pct(drift)} apart: a cost within that is within the cell's own noise.")


def _guard_sentence(cells: pd.DataFrame) -> str:
    """Whether the probes really ran only inside the guards around the probed part (measured per round)."""
    if "probed.guard_s" not in cells or cells["probed.guard_s"].dropna().empty:
        return ""
    g = cells.dropna(subset=["probed.guard_s"])
    guard = units.duration_us(1e6 * float(g["probed.guard_s"].max()))
    spill = g[(g["probed.spill_ms"] > 0) | (g["probed.late_ms"] > 0)]
    if spill.empty:
        return (f" They were attached {units.duration_us(1e3 * float(g['probed.attach_lead_ms'].min()))} or more "
                f"before it and detached within {units.duration_us(1e3 * float(g['probed.detach_lag_ms'].max()))} "
                f"after it, inside the {guard} on each side that counts in neither part: no probe ran in headline "
                "time.")
    where = ", ".join(schema.cell_label(r) for _, r in spill.iterrows())
    return (f" In {units.plural(len(spill), 'cell')} ({where}) the probes attached late or stayed attached past the "
            f"{guard} guard (probed.late_ms, probed.spill_ms): there the headline holds some probed time.")


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


def _signed_span(values: pd.Series) -> str:
    """'−11% and +3%': a span across zero."""
    lo, hi = round(float(values.min())), round(float(values.max()))
    return f"{lo:+d}% and {hi:+d}%".replace("-", "−")


def _span_pct(values: pd.Series) -> str:
    lo, hi = round(float(values.min())), round(float(values.max()))  # ints: no "-0%" as f"{-0.3:.0f}" gives
    return f"{lo}%" if lo == hi else f"{lo}% to {hi}%"


def findings(cells: pd.DataFrame, found: list[dict], df: pd.DataFrame,
             ranked: pd.DataFrame | None = None) -> list[str]:
    """A few plain sentences: who is fastest at each scale, by how much, and why; then the worst problems.
    `ranked`: the cells the ranking sentences speak of, when not `cells` (a knee run's, as its verdict reads them)."""
    out: list[str] = []
    if cells.empty:
        out.append("No cell produced a measurement: every cell failed (see the failed cells below).")
    else:
        ranked = (cells if ranked is None else ranked).copy()
        vary = tuple(schema.varying(ranked))
        ranked["_vary"] = [vary] * len(ranked)
        starved = {(a["backend"], a["connections"], a.get("pipeline"), a.get("framing"))
                   for a in found if a["id"] == "starvation"}
        others = [k for k in schema.SERIES_KEYS if k != "backend" and k in ranked]
        rows = schema.normalize(df) if schema.at_rate(ranked).any() else df  # each round's p99, by cell
        for _, series in ranked.groupby(others, dropna=False, sort=True):
            if schema.at_rate(series).iloc[0]:
                continue  # after the closed-loop ones: _rate_sentences
            runs: list[pd.Series] = []
            groups: list[pd.DataFrame] = []
            for _, g in series.groupby("connections", sort=True):
                g = g.sort_values("mps_mean", ascending=False)
                order = tuple(g["backend"].iloc[:2])
                if groups and order != tuple(groups[-1]["backend"].iloc[:2]):
                    out.append(_ranking_sentence(runs, groups))
                    runs, groups = [], []
                runs.append(g.iloc[0])
                groups.append(g)
            out.append(_ranking_sentence(runs, groups))
            winners = {int(c): g.loc[g["mps_mean"].idxmax(), "backend"] for c, g in series.groupby("connections")}
            pipe, framing = int(series["pipeline"].iloc[0] or 1), series["framing"].iloc[0]
            caught = sorted(c for (b, c, p, f) in starved if p == pipe and f == framing and winners.get(c) == b)
            if caught:
                out[-1] += (f" Caution: at {_counts(caught)} connections the fastest backend starved part of its "
                            "connections (see the anomalies), so its figure there is not fair service.")
        out.extend(_rate_sentences(ranked[schema.at_rate(ranked)], rows))
        fair = _fairness_sentence(cells, found)
        if fair:
            out.append(fair)
    probe = _probe_sentence(cells)
    if probe:
        out.append(probe)
    if found:
        by_sev = {s: sum(a["severity"] == s for a in found) for s in rules.SEVERITIES}
        counts = ", ".join(f"{n} {s}" for s, n in by_sev.items() if n)  # the severities as labels: "2 warning"
        top = [a for a in found if a["severity"] == found[0]["severity"]][:3]
        lead = "Most severe" if found[0]["severity"] != "info" else "Informational only"
        out.append(f"The analysis flagged {units.plural(len(found), 'anomaly', 'anomalies')} ({counts}). {lead}: "
                   + "; ".join(a["title"] for a in top) + ".")
    else:
        out.append(f"No anomaly rule fired: service was fair, costs {units.per_unit(cells.get('protocol'))} were "
                   "ordinary, and the loader had headroom.")
    return out


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
        "framing": ", ".join(sorted(schema.normalize(df)["framing"].dropna().unique())) if len(df) else "",
        "interpreters": _interpreters(df),
        "rounds": cfg.get("rounds", int(df["round"].max()) if "round" in df and len(df) else ""),
        "duration": cfg.get("duration", ""),
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
        "netprof": meta.get("netprof_version", ""),
        "probe_cost": _syscall_cost(meta.get("probe_cost_per_syscall")),
    }
    return facts


def _interpreters(df: pd.DataFrame) -> str:
    """The cells' interpreters; a watched server's is its own (netprof did not start it, and will not run its
    binary as root to ask)."""
    names = [str(v) for v in df["interpreter"].dropna() if str(v)] if "interpreter" in df else []
    if not names and _watched(df):
        return "the watched server's own, not started by netprof"
    return ", ".join(dict.fromkeys(names))


def _message_words(df: pd.DataFrame, cfg: dict) -> str:
    """What one message of this run was: '64-byte messages, message framing', or 'HTTP `GET
    /plaintext` requests, each server's own framing' (the HTTP backends and your own servers parse
    requests themselves)."""
    if _watched(df):
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


def _watched(df: pd.DataFrame) -> bool:
    """Rows of `netprof watch --out` (docs/results-format.md, "A watched row")."""
    return bool("arrivals" in df and (df["arrivals"] == schema.WATCHED).any())


def headline_note(cells: pd.DataFrame, watched: bool = False) -> str:
    """Where the headline table's figures come from, in one line. `watched`: rows of `netprof watch --out`
    (latency "server": no loader, the server time where a run has the round trip)."""
    if cells.empty:
        return ""
    if watched:
        return ("netprof watch: no loader. Requests and their rate counted by the kernel over the watch; "
                "latency, and the round trip below, is the server time (a request's first byte in → its answer "
                "sent); CPU per request from /proc over the same window.")
    n = sorted({int(v) for v in cells["mps_n"].dropna()}) if "mps_n" in cells else []
    rounds = units.plural(n[0], "round") if len(n) == 1 else f"{n[0]}–{n[-1]} rounds" if n else "the rounds"
    protocol = cells.get("protocol")
    at_rate = bool(schema.at_rate(cells).any())
    text = (f"{units.rate_unit(protocol)}: mean of {rounds} ± its 95% interval; latency from the loader"
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
    if not render_report:  # `run --no-report`: the findings and summary.json, nothing drawn or rendered
        found = rules.detect(df, per_conn, meta, src, cells=cells)
        summary = _summary(src, out, df, stats.cell_summaries(df), found, meta, None, [], flames, stack_files)
        if console is not None:
            _print(console, {"headline": _headline(cells), "findings": findings(cells, found, df), "anomalies": found},
                   out, rendered=False)
        return summary
    with plotset.start(cells, per_conn, out, _draw) as pending:  # drawn in children meanwhile
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
            + findings(cells, found, df, ranked=_as_judged(cells, df, src)),
            "anomalies": found,
            "headline": _headline(cells), "headline_note": headline_note(cells, watched=_watched(df)),
            "tables": rendered, "flamegraphs": flames, "failed": failed_rows(df), "meta": meta}
        context["sections"] = [dict(made, name=_section_name(part), template=f"{_section_name(part)}/report",
                                    **part.SECTION)
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
    """The cells the opening sentences speak of: in a knee run, its rates as its verdict reads them (a rate that
    passed, its passing try; one that failed, the mean of its tries: rules.open_loop.knee_cells), not the tables'
    mean over every try of a rate (a knee's own rate read p99 47 ms there; its passing try's was 3.6 ms)."""
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
