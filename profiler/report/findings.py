"""The report's opening sentences, generated from the data: who is fastest at each scale and why (at a set rate,
who kept the lowest p99; one server along its rates), whether service was fair, where the figures come from and what
the probes cost in these cells, and the worst anomalies. The terminal prints them; report.md and report.html open
with them. `sentences` is the one entry; the rest says one thing each."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from netprof.profiler.analysis import rules
from netprof.profiler.analysis.rules import open_loop
from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import QUEUED_AT_OPEN
from netprof.profiler.kit.rule_registry import Thresholds
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num, ring_of, syscalls_of


def _scale(r) -> str:
    """'100 connections, 8 messages in flight, message framing' (what varies in this run, in words)."""
    piped = (r.get("pipeline") or 1) > 1
    pipe = f", {int(r['pipeline'])} {units.exchanges(r.get('protocol'))} in flight" if piped else ""
    vary = r.get("_vary") or ()
    interp = f" on {r['interpreter']}" if "interpreter" in vary else ""
    framing = _framing_words(r.get("framing")) if "framing" in vary else ""
    pinned = ", not pinned" if "pinned" in vary and not r.get("pinned") else ""
    rate = f", {schema.BY_NAME['rate'].text(r.get('rate') or 0)}" if "rate" in vary else ""
    return f"{units.connections(r['connections'])}{pipe}{framing}{interp}{pinned}{rate}"


def _framing_words(framing) -> str:
    """', message framing'; nothing for a server that frames its own way (schema's text)."""
    text = schema.BY_NAME["framing"].text(framing) if framing else ""
    return f", {text}" if text else ""


def _cost(r) -> str | None:
    """'9.1 µs of CPU per message (5.0 user + 4.1 kernel) and 2.01 syscalls per message' ('per request'
    in an HTTP cell; '9.03 syscalls + 1.00 io_uring operations' where the server hands work to io_uring, whose
    operations are kernel work no syscall count shows) or None."""
    u, k = num(r, "cpu_us_per_msg.user"), num(r, "cpu_us_per_msg.sys")
    per, ring = syscalls_of(r), ring_of(r)
    each = units.per_unit(r.get("protocol"))
    parts = []
    if u is not None and k is not None:
        parts.append(f"{units.duration_us(u + k)} of CPU {each} ({units.duration_us(u)} user + "
                     f"{units.duration_us(k)} kernel)")
    if per:
        ops = f" + {units.per_message(sum(ring.values()))} io_uring operations" if ring else ""
        parts.append(f"{units.per_message(sum(per.values()))} syscalls{ops} {each}")
    return " and ".join(parts) or None


def _why(best, other) -> str:
    """One clause on why `best` beats `other`: where its per-message CPU is lower, or that it is not lower
    (a server that answers sooner on more CPU: its lead is elsewhere, e.g. threads off the pinned CPU)."""
    ub, kb, uo, ko = (num(best, "cpu_us_per_msg.user"), num(best, "cpu_us_per_msg.sys"),
                      num(other, "cpu_us_per_msg.user"), num(other, "cpu_us_per_msg.sys"))
    cb, co = _cost(best), _cost(other)
    if not cb or not co:
        return ""
    text = f" It needs {cb}; {other['backend']} needs {co}"
    if ub is not None and kb is not None and uo is not None and ko is not None:
        du, dk = uo - ub, ko - kb
        if du + dk <= 0:
            text += f": its lead is not less CPU {units.per_unit(best.get('protocol'))}"
        else:
            text += (", the difference mostly in user space (interpreter and event loop)" if du >= dk
                     else ", the difference mostly in the kernel (more or costlier syscalls)")
    return text + "."


def _span(values: list[float], fmt) -> str:
    """'90k' when the values agree within 5%, else '60k–90k'."""
    lo, hi = min(values), max(values)
    return fmt(hi) if hi <= lo * 1.05 else f"{fmt(lo)}–{fmt(hi)}"


def _counts(cs: list[int]) -> str:
    return units.joined([str(c) for c in cs])


def _ranking_sentence(runs: list[pd.Series], groups: list[pd.DataFrame]) -> str:
    """One sentence for consecutive scales that share the same winner and runner-up."""
    best, last = runs[-1], groups[-1]
    scales = [int(r["connections"]) for r in runs]
    where = _scale(best).replace(units.connections(best["connections"]), units.connections(*scales))
    rate = f"{_span([r['mps_mean'] for r in runs], units.rate)} {units.rate_unit(best.get('protocol'))}"
    head = f"At {where}, **{best['backend']}** " + (f"is fastest with {rate}" if len(last) > 1 else f"handled {rate}")
    ci = [num(r, "mps_ci_pct") for r in runs]
    known_ci = [c for c in ci if c is not None]
    if len(known_ci) == len(ci):
        head += f" (±{max(known_ci):.0f}%)"
    elif schema.watched(best):  # one watch: no rounds
        head += f" ({schema.ONE_WATCH})"
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
                 + (f" at {units.connections(*[int(g.iloc[0]['connections']) for g in close])}"
                    if len(groups) > 1 else "")
                 + ": not a clear win.")
    why = _why(best, nxt)
    if why and len(runs) > 1:
        why = why.replace(" It needs", f" At {units.connections(best['connections'])} it needs", 1)
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
    span = _p99_range(led)
    at = "every one" if not others else f"{len(led)} of them"
    text = (f"At {where}, across {len(ranked)} rates from {_asked(ranked[0].iloc[0])} to {_asked(ranked[-1].iloc[0])}, "
            f"**{lead}** kept the lowest p99 from the intended send at {at} ({span})")
    text += "".join(f"; {name} at " + units.joined([f"{_asked(c)} ({units.duration_us(num(c, 'lat_us.p99'))})"
                                                    for c in cs])
                    for name, cs in others) + "."
    close = [_asked(r.iloc[0]) for r in ranked if len(r) > 1 and _overlap(df, r.iloc[0], r.iloc[1])]
    if close:
        text += f" At {units.joined(close)} the runner-up's rounds reached the leader's p99: not a clear win there."
    short: dict[str, list[str]] = {}
    for r in ranked:
        for _, c in r.iterrows():
            if (share := _short_of(c)) is not None:
                short.setdefault(c["backend"], []).append(f"{units.share(share, 0)} of {_asked(c)}")
    if short:
        text += (" Short of the rate asked: " + "; ".join(f"{b} answered {units.joined(v)}" for b, v in short.items())
                 + ".")
    return text


def _p99_range(cells: list) -> str:
    """'1.6 ms to 3.3 ms' (or one figure, where they agree within 5%): the p99s of `cells`."""
    return _span([num(c, "lat_us.p99") or 0.0 for c in cells], units.duration_us).replace("–", " to ")


def _curve_sentence(g: pd.DataFrame) -> str:
    """One backend at several rates, lowest first: its p99 from the intended send at each (and the share of a rate it
    answered, where short of it), then its cost per message at the lowest rate and at the highest."""
    first, last = g.iloc[0], g.iloc[-1]
    where = _scale_of_rates(first)
    at = [f"{units.duration_us(num(r, 'lat_us.p99'))} at {_asked(r)}" + (f" ({a})" if (a := _answered(r)) else "")
          for _, r in g.iterrows()]
    flat = _before_the_bend(g) if len(g) > CURVE_LIST else 0
    if flat >= 3:  # a knee's search tries many rates: those before the bend read as one range
        head = g.iloc[:flat]
        at = [f"{_p99_range([r for _, r in head.iterrows()])} at the {flat} rates from {_asked(first)} to "
              f"{_asked(head.iloc[-1])}"] + at[flat:]
    if isinstance(first.get(open_loop.KNEE_ROUNDS), str):  # a knee run: the tries its verdict read
        read = (" Each rate is read as the knee's verdict read it: its passing try where it passed, the mean of its "
                "tries where it failed (the table of the knee's tries has each).")
    else:
        n = [int(num(r, "mps_n") or 1) for _, r in g.iterrows()]
        many = str(max(n)) if min(n) == max(n) else f"{min(n)}–{max(n)}"
        read = f" Each rate is the mean of its {many} rounds." if max(n) > 1 else ""
    text = (f"At {where}, **{first['backend']}**, asked {len(g)} rates, kept a p99 from the intended send of "
            f"{units.joined(at)}.{read}")
    lo, hi = _cpu_us(first), _cpu_us(last)
    if lo is not None and hi is not None:
        each = units.per_unit(first.get("protocol"))
        calls = [sum(per.values()) if (per := syscalls_of(r)) else None for r in (first, last)]
        lo_calls, hi_calls = ((f" and {units.per_message(calls[0])} syscalls", f" and {units.per_message(calls[1])}")
                              if None not in calls else ("", ""))
        text += (f" It used {units.duration_us(lo)} of CPU{lo_calls} {each} at {_asked(first)}, "
                 f"{units.duration_us(hi)}{hi_calls} at {_asked(last)}.")
    return text


CURVE_LIST = 6  # a curve's rates said one by one up to this many; past it, the rates before the bend as a range


def _before_the_bend(g: pd.DataFrame) -> int:
    """How many of `g`'s rates, lowest first, come before its latency bends: their p99 within the latency_knee
    rule's factor (Thresholds.knee_factor) of the lowest rate's, and the rate answered."""
    base = num(g.iloc[0], "lat_us.p99")
    if not base:
        return 0
    for i, (_, r) in enumerate(g.iterrows()):
        p99 = num(r, "lat_us.p99")
        if p99 is None or p99 > Thresholds.knee_factor * base or _short_of(r) is not None:
            return i
    return len(g)


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
        who = "Every cell served its connections"
        if schema.watched_frame(cells):  # one server, its own clients' connections
            who = f"The server served its {units.count(cells['connections'].iloc[0])} connections"
        text = f"{who} evenly (Jain index {span})"
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
    return text + _queued_sentence(starving)


def _queued_sentence(starving: list[dict]) -> str:
    """The starved cells whose window opened with connections the server had not accepted yet: those got nothing
    until it took them in (at 1000 connections, most of the echo loops starved that way and no other:
    bench/RESULTS.md, 2026-12-06)."""
    queued = [a for a in starving if a["evidence"].get(QUEUED_AT_OPEN)]
    if not queued:
        return ""
    counts = [a["evidence"][QUEUED_AT_OPEN] for a in queued]
    which = "every one of these cells" if len(queued) == len(starving) else f"{len(queued)} of these cells"
    span = f"{min(counts):,}" if min(counts) == max(counts) else f"{min(counts):,}–{max(counts):,}"
    return (f" In {which} ({', '.join(dict.fromkeys(a['backend'] for a in queued))}) the window opened with "
            f"connections the server had not accepted yet ({span} in its listen queue): they got nothing until it took "
            "them in; `--warmup-after served` measures those cells with every connection in.")


def _probe_sentence(cells: pd.DataFrame, notes: Sequence[str] = ()) -> str | None:
    """Where the figures come from, and what the probes cost in these very cells; then the instruments' `notes`."""
    if cells.empty or "probe_cost" not in cells or cells["probe_cost"].dropna().empty:
        return None
    share = cells["probed.share"].dropna() if "probed.share" in cells else pd.Series(dtype=float)
    part = f"the middle {100 * share.iloc[0]:.0f}%" if not share.empty else "a probed part"
    return (f"Throughput, latency, fairness and /proc CPU come from the unprobed part of each cell's window; the "
            f"syscall and context-switch counts from {part}, with the probes attached. Measured in these cells, "
            + _costs(cells) + "; the probe-cost table has each cell."
            + _drift_sentence(cells[~schema.at_rate(cells)])  # closed loop: msgs/s theirs to lose
            + _guard_sentence(cells)
            + "".join(notes))


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






def _signed_span(values: pd.Series) -> str:
    """'−11% and +3%': a span across zero."""
    lo, hi = round(float(values.min())), round(float(values.max()))
    return f"{lo:+d}% and {hi:+d}%".replace("-", "−")


def _span_pct(values: pd.Series) -> str:
    lo, hi = round(float(values.min())), round(float(values.max()))  # ints: no "-0%" as f"{-0.3:.0f}" gives
    return f"{lo}%" if lo == hi else f"{lo}% to {hi}%"


def sentences(cells: pd.DataFrame, found: list[dict], df: pd.DataFrame, ranked: pd.DataFrame | None = None,
              notes: Sequence[str] = (), routes: str | None = None) -> list[str]:
    """A few plain sentences: who is fastest at each scale, by how much, and why; then the worst problems.
    `ranked`: the cells the ranking sentences speak of, when not `cells` (a knee run's, as its verdict reads them);
    `notes`: the instruments' sentences for the probe sentence (their report.py's probe_note); `routes`: a watched
    server's sentence by route (routes.sentence), after the one of its rate."""
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
                # "the fastest" only where there was a field to be fastest in
                who = "the fastest backend" if series["backend"].nunique() > 1 else "it"
                out[-1] += (f" Caution: at {units.connections(*caught)} {who} starved part of its "
                            "connections (see the anomalies), so its figure there is not fair service.")
        if routes:
            out.append(routes)
        out.extend(_rate_sentences(ranked[schema.at_rate(ranked)], rows))
        fair = _fairness_sentence(cells, found)
        if fair:
            out.append(fair)
    probe = _probe_sentence(cells, notes)
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
