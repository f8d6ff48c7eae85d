"""`--fail-if` (compare, ab): its rules, parsed before anything is measured. Light (no pandas): `netprof ab` refuses
a malformed rule before it loads what measures; compare.breaches applies the rules to a comparison."""

from __future__ import annotations

import re
from dataclasses import dataclass

from netprof.profiler.core.errors import InputError
from netprof.profiler.model import metrics


@dataclass(frozen=True)
class Check:
    name: str
    column: str
    bad_up: bool  # an increase is the regression
    threshold: float
    relative: bool
    text: str

    def breached(self, c: dict) -> bool:
        """`c`, a significant change (compare's verdict), goes the bad way by more than the threshold."""
        if (c["direction"] > 0) != self.bad_up:
            return False
        size = abs(c["ratio"] - 1) if self.relative else abs(c["delta"])
        return size > self.threshold


CHECKS = {"slower": ("msgs_per_sec", False), "p50": ("lat_us.p50", True), "p99": ("lat_us.p99", True),
          "cpu": (metrics.CPU_TOTAL, True), "syscalls": (metrics.SYSCALLS_TOTAL, True),
          "ctx": ("ctx_switches_per_msg", True), "jain": ("per_conn.jain", False)}
FAIL_IF_EXAMPLE = "--fail-if slower:5%,p99:+10%,syscalls:+0.5"
_CHECK_RE = re.compile(r"^(?P<name>[a-z0-9]+):(?P<sign>[+-]?)(?P<value>\d+(?:\.\d+)?)(?P<pct>%?)$")


def parse_fail_if(text: str) -> list[Check]:
    """'slower:5%,p99:+10%,syscalls:+0.5' → checks; InputError naming the fix when malformed."""
    checks = []
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        m = _CHECK_RE.match(part)
        if not m or m["name"] not in CHECKS:
            raise InputError(f"--fail-if '{part}' is not understood: use NAME:THRESHOLD with NAME one of "
                             f"{', '.join(CHECKS)} and THRESHOLD a percentage or an amount, e.g. {FAIL_IF_EXAMPLE}")
        column, bad_up = CHECKS[m["name"]]
        if m["sign"] and (m["sign"] == "+") != bad_up:
            raise InputError(f"--fail-if '{part}': {m['name']} regresses by going "
                             f"{'up' if bad_up else 'down'}, so its threshold is "
                             f"{'+' if bad_up else '-'}{m['value']}{m['pct']} (or unsigned), e.g. {FAIL_IF_EXAMPLE}")
        value = float(m["value"]) / (100 if m["pct"] else 1)
        checks.append(Check(m["name"], column, bad_up, value, bool(m["pct"]), part))
    return checks
