"""What failed: cells whose rounds failed (network_ping_test's FF), with the cause read from the
error, and connections lost in rounds that otherwise succeeded."""

from __future__ import annotations

import re

from netprof.profiler.kit.rule_common import r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, rule
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num

FAILURE_CAUSES = (  # (pattern in the error, cause, what it means)
    (r"when stopped with SIGTERM|of SIGTERM \(netprof had to|before netprof stopped it", "unclean stop",
     "did not exit 0 when netprof stopped it (SIGTERM): a backend must serve until told to stop, then exit 0 "
     "with nothing left behind."),
    (r"EMFILE|too many open files", "fd limit",
     "ran out of file descriptors: backend and loader each hold one per connection. Lower -c or raise `ulimit -n`."),
    (r"code -9\b|SIGKILL|killed", "killed",
     "was killed (SIGKILL) — on a run that grows memory with connections, usually the OOM killer."),
    (r"code -\d+|signal|segfault|SIGSEGV", "crash",
     "died from a signal: a crash in native code (the error shows which signal)."),
    (r"exited with code \d+", "exit",
     "exited by itself, usually an uncaught exception; its stderr is quoted in the error."),
    (r"stall", "stall",
     "stopped answering during the measurement: a deadlock, or a loop that never yields (network_ping_test's thread "
     "backend sometimes hung at 100% CPU)."),
    (r"connections could be opened|connect", "connection setup",
     "could not accept all connections: listen backlog, local ports or fds ran out during setup."),
    (r"timeout|timed out", "timeout", "did not finish in time."),
)


@rule("failed_cells", needs_cells=False)
def failed_cells(ctx: Context) -> list[Anomaly]:
    """Cells (network_ping_test's FF) whose rounds failed, with the cause read from the error."""
    df, found = ctx.df, []
    if "status" not in df or df.empty:
        return []
    df = schema.normalize(df)
    for _, all_rounds in df.groupby(schema.CELL_KEYS, dropna=False, sort=False):
        g = all_rounds[all_rounds["status"] != "ok"]
        if g.empty:
            continue
        r, total = g.iloc[0], len(all_rounds)
        error = str(r.get("error") or "unknown error")
        cause, meaning = _cause(error)
        ev = {"cause": cause, "error": error[:400], "failed rounds": f"{len(g)} of {total}",
              "errors": sorted({str(e)[:120] for e in g["error"].dropna()})[:3] if g["error"].nunique() > 1 else None}
        text = f"{where(r)} failed (FF) in {len(g)} of {total} rounds: the backend {meaning}"
        found.append(Anomaly.at(r, "failed_cells", "critical", f"Failed ({cause}): {where(r)}", text, ev))
    return found


def _cause(error: str) -> tuple[str, str]:
    """(cause, what it means) of the first FAILURE_CAUSES pattern the error matches."""
    for pattern, cause, meaning in FAILURE_CAUSES:
        if re.search(pattern, error, re.IGNORECASE):
            return cause, meaning
    return "unknown", "failed; see the error."


CONNECTION_ERRORS = (  # (errors.* column, what the loader saw)
    ("reset", "reset or closed by the backend"),
    ("timeout", "never completed the handshake"),
    ("connect", "could not connect"),
)


@rule("connection_errors", plots=("throughput",))
def connection_errors(ctx: Context) -> list[Anomaly]:
    """Connections reset, timed out or refused in rounds that otherwise succeeded (the loader's
    errors.reset/timeout/connect): the cell's figures cover fewer connections than it asked for."""
    t, found = ctx.t, []
    kinds = [k for k, _ in CONNECTION_ERRORS if f"errors.{k}" in ctx.cells]
    if not kinds:
        return []
    df = schema.normalize(ctx.df)
    for _, r in ctx.cells.iterrows():
        n = int(r["connections"])
        per_round = _errors_per_round(df, r, kinds)
        lost = [sum(counts.values()) for _, counts in per_round]
        if not lost or max(lost) < t.connection_errors_min:
            continue
        worst = max(lost)
        means = {k: num(r, f"errors.{k}") or 0.0 for k in kinds}
        what = dict(CONNECTION_ERRORS)
        ev = {f"{k} per round (mean): connections {what[k]}": r2(v) for k, v in means.items()}
        ev["per round (" + " / ".join(kinds) + ")"] = "; ".join(
            f"round {rnd}: " + " / ".join(str(c[k]) for k in kinds) for rnd, c in per_round)
        ev["rounds that lost connections"] = f"{sum(1 for x in lost if x)} of {len(lost)}"
        ev["worst round lost"] = f"{worst} of {n} connections ({100 * worst / n:.1f}%)"
        text = (f"{where(r)} lost connections in {ev['rounds that lost connections']} rounds: per round on average "
                + ", ".join(f"{means[k]:.1f} {what[k]}" for k in kinds)
                + f"; the worst round lost {worst} of {n} ({100 * worst / n:.1f}%). A reset means the backend "
                "closed or reset a connection during the run (a worker that died, a handler error, an overflowing "
                "queue); timeouts and connect failures mean connection setup did not keep up (listen backlog, "
                "ports, descriptors). The cell's figures cover only the connections that stayed up.")
        sev = "critical" if worst > t.connection_errors_critical * n else "warning"
        found.append(Anomaly.at(r, "connection_errors", sev, f"Connections lost: {where(r)}", text, ev))
    return found


def _errors_per_round(df, r, kinds: list[str]) -> list[tuple]:
    """[(round, {kind: connections lost})] over the cell's successful rounds."""
    rounds = schema.select(df, r)
    if "status" in rounds:
        rounds = rounds[rounds["status"] == "ok"]
    return [(row.get("round"), {k: int(num(row, f"errors.{k}") or 0) for k in kinds}) for _, row in rounds.iterrows()]
