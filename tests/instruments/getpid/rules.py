"""The throw-away instrument's rule (tests/test_instrument_parts.py): a server that asks the kernel for its pid
on every message. Found by name (probes/registry.parts("rules")), as probes/sockwait/rules.py is."""

from __future__ import annotations

from netprof.profiler.kit.rule_common import r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, rule
from netprof.profiler.model.stats import num

LISTED_AFTER = "syscalls"  # among the findings of one severity: after the syscall topic's
PER_MSG = 0.5  # getpid() per message from which it is worth a line (its own threshold: no Thresholds field)


@rule("getpid_per_message", plots=("syscalls",), section="getpid")
def getpid_per_message(ctx: Context) -> list[Anomaly]:
    """The server calls getpid() on most messages: a syscall a cached pid would save."""
    found = []
    for _, r in ctx.cells.iterrows():
        per_msg = num(r, "getpid.per_msg")
        if per_msg is None or per_msg < PER_MSG:
            continue
        found.append(Anomaly.at(r, "getpid_per_message", "info", f"getpid() on every message: {where(r)}",
                                f"In {where(r)} the server asked the kernel for its pid {per_msg:.2f} times per "
                                "message; keep it in a variable.", {"getpid per message": r2(per_msg)}))
    return found
