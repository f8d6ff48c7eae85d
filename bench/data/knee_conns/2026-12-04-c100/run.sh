#!/bin/bash
# issue 51: does the knee move with the loader's connections? netprof knee uvicorn_httptools three ways: the
# default (10 connections opened first, more opened as requests need them, up to 1,000), a pool capped at 10
# (--max-connections 10) and 100 opened first (-c 100: the closed-loop ceiling measured at 100 connections too),
# in rounds whose order rotates (each arm first, second and third in turn), commit 06f2ffd's loader and search;
# each knee.json and the terminal's lines into this directory, each run's results directory under ./runs/ (not
# committed) (bench/RESULTS.md, "the knee against the loader's connections").
cd "$(dirname "$0")"
mkdir -p runs
arms=(default c10 c100)
for i in ${ROUNDS:-1 2 3 4}; do
  for k in 0 1 2; do
    v=${arms[$(( (i + k) % 3 ))]}
    case $v in
      default) extra=() ;;
      c10) extra=(--max-connections 10) ;;
      c100) extra=(-c 100) ;;
    esac
    s=$(date +%s)
    ../../../../.venv/bin/netprof knee uvicorn_httptools --slo "p99<5ms" "${extra[@]}" --json --out "runs/$v-$i" > ./$v-$i.json 2>./$v-$i.err
    echo "$v $i rc=$? $(( $(date +%s) - s ))s" >&2
  done
done
