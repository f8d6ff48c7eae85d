"""netprof.flamegraphs: stack sampling of a running backend → folded stacks → flamegraph SVGs.

    art = sample(pid, 3, "runs/x/flame/selector-c100", title="selector, 100 connections")
    diff(art_a.oncpu_folded, art_b.oncpu_folded, "diff.svg", title="B vs A")

Views: "oncpu" (perf, kernel + native), "python" (py-spy), "offcpu" (BCC sched_switch, µs blocked),
"mixed" (perf DWARF + CPython -X perf_jit: Python, native and kernel frames in one stack).
"""

from netprof.flamegraphs.render import diff
from netprof.flamegraphs.session import DEFAULT_VIEWS, VIEWS, FlameArtifacts, check_available, compile_offcpu, sample

__all__ = ["FlameArtifacts", "sample", "compile_offcpu", "diff", "check_available", "VIEWS", "DEFAULT_VIEWS"]
