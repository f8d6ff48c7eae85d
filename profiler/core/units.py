"""How numbers read in every report (terminal, report.md, report.html, tables, plots): one place that
picks the unit and the digits, so 2,113,929 µs reads "2.1 s" everywhere and a rate "92.3k".

Every function takes None or NaN and returns "–": a missing figure is a dash, never "nan".
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def calls_and_ring(syscalls, ring) -> str:
    """Syscalls per request and the io_uring operations beside them, for a column of one decimal (watch's):
    '3.1', or '9.0 + 1.0 io_uring' where the server hands work to io_uring (no syscall count shows it)."""
    if _missing(syscalls):
        return DASH
    # a ring figure that rounds to 0.0 is left out ("+ 0.0 io_uring" says nothing)
    return f"{float(syscalls):.1f}" + (f" + {float(ring):.1f} io_uring" if not _missing(ring) and ring >= 0.05 else "")


# ---------------------------------------------------------------------------------------------
# What one exchange is called (the only place that says it): an HTTP cell (its row's `protocol` is
# "http") exchanges requests, every other cell (echo, line, ZeroMQ) messages. The rows keep their
# column names (`msgs_per_sec`, `syscalls_per_msg`, ...): for an HTTP row they count requests
# (docs/results-format.md). Each function below takes a row's protocol (None or NaN: an older row,
# "echo"), or the protocols of several cells (a frame's `protocol` column, a set): when all of them
# are HTTP the words are a request's, when none is a message's, and when they mix the message words
# followed by the request words for HTTP ("msgs/s (req/s for HTTP)"): the cells' own lines say which.

HTTP = "http"
# kind → (singular, plural, rate, abbreviation)
_WORDS = {"message": ("message", "messages", "msgs/s", "msg"),
          "request": ("request", "requests", "req/s", "req")}


def exchange_kind(protocol) -> str:
    """'request' (HTTP), 'message' (echo, line, ZeroMQ, an older row) or 'mixed' (several cells, some HTTP)."""
    if protocol is None or isinstance(protocol, str):
        return "request" if protocol == HTTP else "message"
    if not isinstance(protocol, Iterable):  # NaN: a row written before the column
        return "message"
    kinds = {exchange_kind(p) if isinstance(p, str) else "message" for p in protocol}
    if kinds == {"request"}:
        return "request"
    return "mixed" if "request" in kinds else "message"


def _say(protocol, form: int, pattern: str = "{}") -> str:
    kind = exchange_kind(protocol)
    if kind != "mixed":
        return pattern.format(_WORDS[kind][form])
    return f"{pattern.format(_WORDS['message'][form])} ({pattern.format(_WORDS['request'][form])} for HTTP)"


def exchange(protocol=None) -> str:
    """One exchange: 'request' (HTTP) or 'message'."""
    return _say(protocol, 0)


def exchanges(protocol=None) -> str:
    """Exchanges, plural: 'requests' (HTTP) or 'messages' ('95% of requests', 'requests in flight')."""
    return _say(protocol, 1)


def rate_unit(protocol=None) -> str:
    """The throughput unit: 'req/s' (HTTP) or 'msgs/s'; mixed cells 'msgs/s (req/s for HTTP)'."""
    return _say(protocol, 2)


def per_unit(protocol=None) -> str:
    """A figure's divisor in words: 'per request' (HTTP) or 'per message' ('syscalls per request')."""
    return _say(protocol, 0, "per {}")


def per_abbrev(protocol=None) -> str:
    """The same, short, for a column header: '/req' (HTTP) or '/msg' ('CPU µs/req', 'kernel ops/req')."""
    return _say(protocol, 3, "/{}")


def reword(text: str, protocol=None) -> str:
    """A label written in message words (an anomaly's evidence key: summary.json keeps it as written) as
    `protocol`'s cells read it: 'epoll_ctl per message' → 'epoll_ctl per request' for HTTP."""
    if exchange_kind(protocol) != "request":
        return text
    for old, new in (("msgs/s", rate_unit(HTTP)), ("per message", per_unit(HTTP)), ("/msg", per_abbrev(HTTP)),
                     ("messages", exchanges(HTTP)), ("message", exchange(HTTP))):
        text = text.replace(old, new)
    return text


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


def largest_parts(parts: dict[str, float], n: int = 3, within: dict[str, str] | None = None) -> str:
    """'queue_wait 4 ms (53%), off_cpu_sleep 2.7 ms (36%), loop_wait 426 µs (6%)': the `n` largest of a breakdown's
    parts (µs), each with its share of the positive parts' sum (and `within`'s words on it, after the share);
    DASH when none is positive."""
    total = sum(max(0.0, v) for v in parts.values())
    top = [(p, v) for p, v in sorted(parts.items(), key=lambda kv: -kv[1])[:n] if v > 0]
    within = within or {}
    return ", ".join(f"{p} {duration_us(v)} ({100 * v / total:.0f}%{within.get(p, '')})" for p, v in top) \
        if top else DASH


def connections(*counts: int) -> str:
    """'1 connection', '100 connections', '10, 100 and 1000 connections' (the counts as a cell's label writes them)."""
    return f"{joined([str(int(c)) for c in counts])} connection{'' if counts == (1,) else 's'}"


def joined(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def plural(n, one: str, many: str | None = None) -> str:
    """'1 cell', '3 cells', '0 cells'; `many` when the plural is not `one` + 's'."""
    k = int(n)
    return f"{k:,} {one if k == 1 else (many or one + 's')}"


def value(key: str, v, protocol=None) -> tuple[str, str]:
    """An evidence line as it reads: a key that names its unit in parentheses, '(µs)' or '(s)',
    loses it and the value carries the chosen unit; other numbers get separators or 3 digits. The key
    is in `protocol`'s words (reword: 'per request' in an HTTP cell's evidence)."""
    key = reword(key, protocol)
    if isinstance(v, (list, tuple)):
        return key, ", ".join(map(str, v))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return key, str(v)
    for suffix, fmt in ((" (µs)", duration_us), (" (s)", seconds)):
        if key.endswith(suffix):
            return key[: -len(suffix)], fmt(v)
    return key, number(v)
