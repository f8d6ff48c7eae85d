#!/usr/bin/env bash
# Tools only the benchmarks need (not `make test`): idempotent, as root.
# vegeta: an independent open-loop HTTP load generator (constant rate, latency from each request's
# scheduled time), which bench/open_loop_vs_vegeta.py checks netprof's --rate against. Pinned.
set -euo pipefail
VEGETA_VERSION=v12.13.0
if ! command -v vegeta >/dev/null 2>&1; then
  go="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$go" ] || { echo "setup-bench: go not found; vegeta needs it (apt install golang)" >&2; exit 1; }
  echo "setup-bench: installing vegeta $VEGETA_VERSION into /usr/local/bin (go install)"
  GOBIN=/usr/local/bin "$go" install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
fi
