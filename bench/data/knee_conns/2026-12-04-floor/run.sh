#!/bin/bash
# issue 51: netprof knee uvicorn_httptools, connections as needed (the default) against a pool of 10, six
# interleaved pairs, the order alternating pair by pair, with the loader of commit ba5b4d8 (the server judged
# queueing against the thread's least mean round trip over 64 answers, not its fastest answer; otherwise the
# loader and the search of bench/data/knee_conns/2026-12-02-little); each knee.json and the terminal's lines into
# this directory, each run's results directory under ./runs/ (not committed) (bench/RESULTS.md, "least mean").
cd "$(dirname "$0")"
mkdir -p runs
for i in ${PAIRS:-1 2 3 4 5 6}; do
  if [ $((i % 2)) = 1 ]; then order="default c10"; else order="c10 default"; fi
  for v in $order; do
    if [ $v = default ]; then extra=""; else extra="--max-connections 10"; fi
    s=$(date +%s)
    ../../../../.venv/bin/netprof knee uvicorn_httptools --slo "p99<5ms" $extra --json --out "runs/$v-$i" > ./$v-$i.json 2>./$v-$i.err
    echo "$v $i rc=$? $(( $(date +%s) - s ))s" >&2
  done
done
