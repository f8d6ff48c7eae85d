"""The throw-away instrument's judged figure (`netprof compare`, summary.json's per-cell aggregates), found by name
(probes/registry.judge_metrics)."""

from __future__ import annotations

from netprof.profiler.model.metrics import Metric

METRICS = {"getpid.per_msg": Metric("getpid() {per}", explains=True)}
