#!/bin/bash
# issue 51's acceptance from a fresh clone's own setup: CLONE=/path/to/a/fresh/clone (after its `make test`) bash accept.sh.
# The open-loop run at 500 and 2,000/s (and at 2,000/s with --max-connections 10), a one-second HTTP run's terminal,
# then two rounds of netprof knee uvicorn_httptools three ways (the default, -c 10, --max-connections 10): each
# knee.json and the terminal's lines into this directory, every results directory under ./runs/ (not committed).
here=$(cd "$(dirname "$0")" && pwd)
cd "${CLONE:?a fresh clone after its make test}" || exit 1
NP=$CLONE/.venv/bin/netprof
mkdir -p "$here/runs"
$NP run selector --work sleep:1000 -c 10 --rate 500,2000 --no-probes --json --out "$here/runs/rate" > "$here/runs/rate.json"; echo "rate rc=$?"
$NP run selector --work sleep:1000 -c 10 --rate 2000 --max-connections 10 --no-probes --json --out "$here/runs/rate10" > "$here/runs/rate10.json"; echo "rate10 rc=$?"
$NP run uvicorn_httptools -c 10 -d 1 --no-probes --out "$here/runs/http" > "$here/runs/http.out" 2>&1; echo "http rc=$?"
for i in 1 2; do
  for v in default c10 pool10; do
    case $v in default) extra=() ;; c10) extra=(-c 10) ;; pool10) extra=(--max-connections 10) ;; esac
    $NP knee uvicorn_httptools --slo "p99<5ms" "${extra[@]}" --json --out "$here/runs/knee-$v-$i" > "$here/knee-$v-$i.json" 2> "$here/knee-$v-$i.err"
    echo "knee $v $i rc=$? $(date +%T)"
  done
done
