#!/bin/bash
# issue 51: netprof knee uvicorn_httptools, connections as needed (default) against a pool of 10, three interleaved
# pairs; each knee.json into this directory (bench/RESULTS.md, "knee ... after the opened connections fall idle").
cd "$(dirname "$0")"
for i in 1 2 3; do
  for v in default c10; do
    if [ $v = default ]; then extra=""; else extra="--max-connections 10"; fi
    s=$(date +%s)
    ../../../../.venv/bin/netprof knee uvicorn_httptools --slo "p99<5ms" $extra --json --out "$(mktemp -d)/run" > ./$v-$i.json 2>./$v-$i.err
    echo "$v $i rc=$? $(( $(date +%s) - s ))s" >&2
  done
done
