#!/bin/bash
# Does the speed canary slow down when the server saturates its CPU? (knee.SLOWED reads it beside the server.) The
# canary on CPU 0 for 4 s alone, then 4 s beside a CPU-bound spinner pinned to CPU 0, four times in turn; each
# run's quartiles of the loop time (µs) into canary_beside_spinner.txt.
cd "$(dirname "$0")"
PY=../../../../.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
  $PY -I -m netprof.profiler.core.canary --cpu 0 --seconds 4 --out "$tmp/alone$i"
  taskset -c 0 $PY -c "while 1: pass" & s=$!
  $PY -I -m netprof.profiler.core.canary --cpu 0 --seconds 4 --out "$tmp/busy$i"
  kill $s; wait $s 2>/dev/null
  for k in alone busy; do
    $PY -c "import numpy as np, sys; c = np.loadtxt(sys.argv[1]); q = np.percentile(c[:, 1], [25, 50, 75]) / 1e3
print(f'{sys.argv[2]:5} {sys.argv[3]} samples {len(c)} loop µs p25 {q[0]:.1f} p50 {q[1]:.1f} p75 {q[2]:.1f}')" "$tmp/$k$i" "$k" "$i"
  done
done | tee canary_beside_spinner.txt
