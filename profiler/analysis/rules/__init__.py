"""Anomaly rules: each one looks at the measured cells and, when something is off, says what it is,
why it happens and which numbers (and stacks, and source lines) prove it.

A rule is a small function registered with `@rule(id, ...)` (profiler/kit/rule_registry.py), which also records what the
report needs to know of it: whether its findings merge into one card per backend, the plots that show
it, the report section that explains it. It receives a `Context` and returns `Anomaly` objects; every
threshold lives in `Thresholds`. `detect()` runs them all and returns plain dicts (the JSON summary's
`anomalies`), most severe first. The rules live by topic in the modules imported below.
"""

# Imported for their @rule registrations, in this order: RULES' order is the order in which findings
# of one severity are listed. The instruments' rules (probes/<name>/rules.py) are found by name below.
from netprof.profiler.analysis.rules import fairness, syscalls, cpu, latency, throughput, host, failures, open_loop  # noqa: F401, I001, E501
from netprof.probes import registry as _instruments
from netprof.profiler.kit.rule_registry import (
    META,
    RULES,
    SEVERITIES,
    THRESHOLDS,
    Anomaly,
    Context,
    RuleMeta,
    Thresholds,
    consolidate,
    detect,
    place,
    rule,
)

__all__ = ["META", "RULES", "SEVERITIES", "THRESHOLDS", "Anomaly", "Context", "RuleMeta", "Thresholds",
           "consolidate", "detect", "place", "rule"]

# Each instrument's rules, listed after those of the topic module its LISTED_AFTER names.
for _rules in _instruments.parts("rules"):
    place(_rules.__name__, after=f"{__name__}.{_rules.LISTED_AFTER}")
