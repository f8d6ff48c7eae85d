#!/bin/bash
# issue 51: the knee once a try the host slowed (the speed canary's slowest 0.3 s on the backend's CPU at least
# knee.SLOWED over its usual) is not one of the tries (commit 7e85b87). netprof knee uvicorn_httptools three ways: the
# default, the same command with -c 10 (the default's -c: the same command), and a pool capped at 10
# (--max-connections 10), in rounds whose order rotates; each knee.json and the terminal's lines into this
# directory, each run's results directory under ./runs/ (not committed) (bench/RESULTS.md, "the knee against the
# host's slow stretches").
cd "$(dirname "$0")"
mkdir -p runs
arms=(default c10 pool10)
for i in ${ROUNDS:-1 2 3}; do
  for k in 0 1 2; do
    v=${arms[$(( (i + k) % 3 ))]}
    case $v in
      default) extra=() ;;
      c10) extra=(-c 10) ;;
      pool10) extra=(--max-connections 10) ;;
    esac
    s=$(date +%s)
    ../../../../.venv/bin/netprof knee uvicorn_httptools --slo "p99<5ms" "${extra[@]}" --json --out "runs/$v-$i" > ./$v-$i.json 2>./$v-$i.err
    echo "$v $i rc=$? $(( $(date +%s) - s ))s $(date +%T)" >&2
  done
done
