"""The names of a results directory's files: their one owner. Light (no pandas), so the CLI can refuse a
directory that is not a run's before it loads the modules that read one."""

from __future__ import annotations

RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"
PER_CONN_PARQUET = "per_conn.parquet"
# An instrument's per-connection rows (probes/instrument.py), beside the row's keys, as per_conn.parquet.
CONN_PARQUET = "{}_conn.parquet"
SOCKWAIT_CONN_PARQUET = CONN_PARQUET.format("sockwait")
# Open-loop cells: the window in slices (stats.timeline_rows), beside the row's keys, as per_conn.parquet.
TIMELINE_PARQUET = "timeline.parquet"
META_JSON = "meta.json"
SUMMARY_JSON = "summary.json"
KNEE_JSON = "knee.json"  # `netprof knee`'s document (knee.py), read by the report
