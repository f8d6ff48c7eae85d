#!/bin/bash
# issue 51: netprof knee uvicorn_httptools, connections as needed (the default) against a pool of 10, six
# interleaved pairs, the order alternating pair by pair, with the loader of commit 6d159e5 (a connection opened only
# while the thread has fewer than its rate needs at its round trip, Little's law) and the knee search as it stands
# there (a rate ends the search once it failed twice; a failing cell the hypervisor stole more than 10% from is not
# one of the tries; each try's steal is in knee.json); each knee.json and the terminal's lines into this directory,
# each run's results directory under ./runs/ (not committed) (bench/RESULTS.md, "knee ... Little's law").
cd "$(dirname "$0")"
mkdir -p runs
for i in ${PAIRS:-1 2 3 4 5 6}; do  # PAIRS="7 8 9 10 11 12": a second set; "13 14 15 16" a third (2026-12-03)
  if [ $((i % 2)) = 1 ]; then order="default c10"; else order="c10 default"; fi
  for v in $order; do
    if [ $v = default ]; then extra=""; else extra="--max-connections 10"; fi
    s=$(date +%s)
    ../../../../.venv/bin/netprof knee uvicorn_httptools --slo "p99<5ms" $extra --json --out "runs/$v-$i" > ./$v-$i.json 2>./$v-$i.err
    echo "$v $i rc=$? $(( $(date +%s) - s ))s" >&2
  done
done
