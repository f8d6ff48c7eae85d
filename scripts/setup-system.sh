#!/usr/bin/env bash
# Installs the system pieces netprof needs (Debian packages, kernel headers BCC can use).
# Idempotent: on a ready machine it only checks, in about a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  python3 python3-venv python3-dev
  bpfcc-tools python3-bpfcc bpftrace bpftool linux-perf linux-headers-amd64
  libgtest-dev googletest clang-format
  wrk
  iproute2 procps util-linux
  libzmq3-dev nlohmann-json3-dev
  chromium
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-system: must run as root (apt-get, /lib/modules links). Try: sudo make setup" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-system: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# BCC compiles BPF C at run time against /lib/modules/$(uname -r)/build. This kernel ships no
# headers package, but Debian's generic headers work for tracepoint programs (see FACTS.md).
kver="$(uname -r)"
moddir="/lib/modules/$kver"
if [ ! -e "$moddir/build/include" ] || [ ! -e "$moddir/source" ]; then
  hdr="$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1)"
  common="${hdr%-amd64}-common"
  if [ -z "$hdr" ] || [ ! -d "$common" ]; then
    echo "setup-system: no linux-headers-*-amd64 under /usr/src; install linux-headers-amd64" >&2
    exit 1
  fi
  mkdir -p "$moddir"
  [ -e "$moddir/build/include" ] || ln -sfn "$hdr" "$moddir/build"
  [ -e "$moddir/source" ] || ln -sfn "$common" "$moddir/source"
  echo "################################################################################"
  echo "# setup-system: kernel $kver has no headers package; linked Debian's generic"
  echo "#   $moddir/build  -> $hdr"
  echo "#   $moddir/source -> $common"
  echo "# so that BCC can compile tracepoint programs. 'netprof doctor' checks this."
  echo "################################################################################"
fi

# Flamegraph rendering: inferno (the maintained Rust port of FlameGraph). ~75 s to build, once.
if ! command -v inferno-flamegraph >/dev/null 2>&1; then
  cargo="$(command -v cargo || echo "$HOME/.cargo/bin/cargo")"
  if [ -x "$cargo" ]; then
    echo "setup-system: installing inferno into /usr/local (cargo install, ~75 s)"
    "$cargo" install --quiet --root /usr/local inferno --version 0.12.8 --locked
  else
    echo "setup-system: cargo not found; flamegraph SVGs need inferno (cargo install inferno)" >&2
  fi
fi

# The probes read tracepoints through tracefs; some boots leave it unmounted.
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing && echo "setup-system: mounted tracefs on /sys/kernel/tracing"
fi
