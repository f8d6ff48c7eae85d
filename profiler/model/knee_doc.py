"""knee.json read back: the knee's verdict in one line (the CLI's last line, and the report's first finding of a
knee run). knee.py writes the document (docs/results-format.md, "knee.json"); this reads it, below the report."""

from __future__ import annotations


def summary_line(doc: dict) -> str:
    """'knee of selector at c=10 for p99<5ms: 850/s (between 850 and 870/s; 85% of the closed-loop 1,000/s)'; when
    the open-loop cells opened more connections than -c: 'at c=10 (up to 37 open) for ...'."""
    most = doc.get("conns_max")
    opened = f" (up to {most:,} open)" if most and most > doc["connections"] else ""
    head = f"knee of {doc['server']} at c={doc['connections']}{opened} for {doc['slo']['text']}: "
    ceiling = doc["ceiling"]["msgs_per_sec"] or 0
    lo, hi = doc["bounds"]
    for by, fix in (("loader", "give the loader more CPUs, --loader-threads or --max-connections"),
                    ("host", "run it again when the hypervisor takes less: /proc/stat's steal")):
        if (out := doc.get(f"{by}_ran_out")) is not None:
            return head + (f"not found: the {by}, not the server, ran out at {out['rate']:,.0f}/s ({out['why']}); "
                           + (f"the server met the objective up to {lo:,.0f}/s" if lo else "no lower rate passed")
                           + f" ({fix})")
    if doc["knee"] is None:
        return head + f"below {hi:,.0f}/s, the lowest rate probed (closed-loop ceiling {ceiling:,.0f}/s)"
    return head + (f"{lo:,.0f}/s (between {lo:,.0f} and {hi:,.0f}/s; {lo / ceiling:.0%} of the closed-loop "
                   f"{ceiling:,.0f}/s)")
