"""How numbers read in every report (terminal, report.md, report.html, tables, plots): one place that
picks the unit and the digits, so 2,113,929 µs reads "2.1 s" everywhere and a rate "92.3k".

Every function takes None or NaN and returns "–": a missing figure is a dash, never "nan".
"""

from __future__ import annotations

import math

DASH = "–"


def _missing(v) -> bool:
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def _sig(v: float, digits: int = 3) -> str:
    """`v` with `digits` significant digits, no exponent, no trailing '.0': 0.00912 → '0.00912',
    2.0 → '2', 412.4 → '412', 1234.5 → '1,235'."""
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    text = f"{v:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def duration_us(v) -> str:
    """A duration given in µs, in the unit a person reads, one decimal below 100 of that unit:
    0.85 → '850 ns', 9.13 → '9.1 µs', 21.24 → '21.2 µs', 412 → '412 µs', 69546 → '69.5 ms',
    2113929 → '2.1 s'."""
    if _missing(v):
        return DASH
    v = float(v)
    if v == 0:
        return "0 µs"
    for unit, scale in (("s", 1e6), ("ms", 1e3), ("µs", 1.0), ("ns", 1e-3)):
        if abs(v) >= scale or unit == "ns":
            x = v / scale
            text = f"{x:.1f}".removesuffix(".0") if abs(x) < 100 else f"{x:,.0f}"
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def seconds(v) -> str:
    """A duration given in seconds: 0.5 → '500 ms', 90 → '1.5 min', 5400 → '1.5 h'."""
    if _missing(v):
        return DASH
    v = float(v)
    if abs(v) >= 3600:
        return f"{v / 3600:.1f}".removesuffix(".0") + " h"
    if abs(v) >= 90:
        return f"{v / 60:.1f}".removesuffix(".0") + " min"
    return duration_us(v * 1e6)


def rate(v) -> str:
    """A rate or a large count, as network_ping_test writes throughput: 92345 → '92.3k', 1.21e6 →
    '1.21M', 850 → '850'."""
    if _missing(v):
        return DASH
    v = float(v)
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{_sig(v / scale, 3)}{unit}"
    return f"{v:.0f}"


def count(v) -> str:
    """A whole number with thousands separators: 13887 → '13,887'."""
    if _missing(v):
        return DASH
    return f"{round(float(v)):,}"


def per_message(v) -> str:
    """A per-message ratio (syscalls, switches): 3 significant digits, at most 2 decimals above 1:
    9.0213 → '9.02', 0.00912 → '0.0091', 0 → '0'."""
    if _missing(v):
        return DASH
    v = float(v)
    if v == 0:
        return "0"
    return f"{v:.2f}" if abs(v) >= 1 else _sig(v, 2)


def number(v) -> str:
    """Any other figure: integers with separators, others with 3 significant digits."""
    if _missing(v):
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    f = float(v)
    return count(f) if f.is_integer() else _sig(f, 3)


def share(frac, digits: int = 0) -> str:
    """A fraction as a percentage: 0.934 → '93%'."""
    if _missing(frac):
        return DASH
    return f"{100 * float(frac):.{digits}f}%"


def interval(ci_pct, n) -> str:
    """The ± of a cell's mean over its rounds: '±3%', or why there is none ('1 round: no interval')."""
    rounds = 0 if _missing(n) else int(n)
    if rounds < 2 or _missing(ci_pct):
        return f"{plural(rounds, 'round')}: no interval"
    return f"±{float(ci_pct):.0f}%"


def plural(n, one: str, many: str | None = None) -> str:
    """'1 cell', '3 cells', '0 cells'; `many` when the plural is not `one` + 's'."""
    k = int(n)
    return f"{k:,} {one if k == 1 else (many or one + 's')}"


def value(key: str, v) -> tuple[str, str]:
    """An evidence line as it reads: a key that names its unit in parentheses, '(µs)' or '(s)',
    loses it and the value carries the chosen unit; other numbers get separators or 3 digits."""
    if isinstance(v, (list, tuple)):
        return key, ", ".join(map(str, v))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return key, str(v)
    for suffix, fmt in ((" (µs)", duration_us), (" (s)", seconds)):
        if key.endswith(suffix):
            return key[: -len(suffix)], fmt(v)
    return key, number(v)
