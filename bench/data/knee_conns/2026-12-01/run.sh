#!/bin/bash
# issue 51: netprof knee uvicorn_httptools, connections as needed (default: grown only while the server is not
# queueing) against a pool of 10, six interleaved
# pairs, the order alternating pair by pair; each knee.json into this directory (bench/RESULTS.md, "knee ... six pairs").
cd "$(dirname "$0")"
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then order="default c10"; else order="c10 default"; fi
  for v in $order; do
    if [ $v = default ]; then extra=""; else extra="--max-connections 10"; fi
    s=$(date +%s)
    ../../../../.venv/bin/netprof knee uvicorn_httptools --slo "p99<5ms" $extra --json --out "$(mktemp -d)/run" > ./$v-$i.json 2>./$v-$i.err
    echo "$v $i rc=$? $(( $(date +%s) - s ))s" >&2
  done
done
