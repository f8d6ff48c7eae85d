#!/usr/bin/env bash
# mypy on the netprof package (`make typecheck`, part of `make lint` and so of `make test`).
#
# The repo keeps the design card's layout (profiler/, probes/, ...); installed, these directories
# become netprof.profiler, netprof.probes, ... (pyproject's [tool.scikit-build.wheel.packages]).
# mypy needs that package layout to resolve `from netprof.profiler import ...`, so this builds it
# from symlinks under build/typecheck/ (the umbrella __init__.py is cmake/netprof_init.py, as the
# wheel installs it) and checks the sources through them. Paths in the output are the repo's.
# Extra arguments go to mypy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mypy="${MYPY:-$root/.venv/bin/mypy}"
pkg="$root/build/typecheck/netprof"

mkdir -p "$pkg"
for sub in profiler probes flamegraphs backends; do
  ln -sfn "../../../$sub" "$pkg/$sub"
done
cp -f "$root/cmake/netprof_init.py" "$pkg/__init__.py"

cd "$root/build/typecheck"
"$mypy" --config-file "$root/mypy.ini" "$@" \
  -p netprof.profiler -p netprof.probes -p netprof.flamegraphs -p netprof.backends \
  | sed -E 's#^netprof/(profiler|probes|flamegraphs|backends)/#\1/#'
