#!/usr/bin/env bash
# Installs the system pieces netprof needs (Debian packages, kernel headers BCC can use).
# Idempotent: on a ready machine it only checks, in about a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  python3 python3-venv python3-dev
  bpfcc-tools python3-bpfcc bpftrace bpftool linux-perf linux-headers-amd64
  libgtest-dev googletest clang-format
  wrk
  iproute2 procps util-linux
  openssh-server
  libzmq3-dev nlohmann-json3-dev
  python3-seccomp liburing-dev
  chromium
  tcpdump prometheus
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-system: must run as root (apt-get, /lib/modules links). Try: sudo make setup" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# openssh-server is here for scripts/lab.sh (SSH "hosts" in network namespaces, each running its own
# `sshd -f CONFIG`), prometheus for the tests of `netprof watch --metrics-port` (each starts its own
# `prometheus --config.file`, as the lab starts sshd). The system's own daemons must never be enabled or
# listening because of them: during the install a policy-rc.d (exit 101: "action forbidden") stops their
# postinst from starting them, then the services are disabled and their ports (22, 9090) checked.
installing_sshd=0
installing_prometheus=0
for p in "${missing[@]}"; do
  [ "$p" = openssh-server ] && installing_sshd=1
  [ "$p" = prometheus ] && installing_prometheus=1
done
policy=/usr/sbin/policy-rc.d
made_policy=0
drop_policy() { if [ "$made_policy" = 1 ]; then rm -f "$policy"; made_policy=0; fi; }
trap drop_policy EXIT
trap 'exit 130' INT TERM
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-system: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$((installing_sshd + installing_prometheus))" -gt 0 ] && [ ! -e "$policy" ] && [ ! -L "$policy" ]; then
    printf '#!/bin/sh\n# setup-system.sh: no service starts during its apt-get install\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    made_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  drop_policy
fi
if [ "$installing_sshd" = 1 ]; then
  if command -v systemctl >/dev/null 2>&1; then
    systemctl disable ssh.service ssh.socket >/dev/null 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null 2>&1; then
    update-rc.d ssh disable >/dev/null 2>&1 || true
  fi
  if [ -n "$(ss -Htln 'sport = :22' 2>/dev/null)" ]; then
    echo "setup-system: something listens on port 22 after installing openssh-server (see: ss -tlnp 'sport = :22'); stop it: netprof's lab needs no system sshd" >&2
    exit 1
  fi
fi
if [ "$installing_prometheus" = 1 ]; then
  if command -v systemctl >/dev/null 2>&1; then
    systemctl disable prometheus.service >/dev/null 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null 2>&1; then
    update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  if [ -n "$(ss -Htln 'sport = :9090' 2>/dev/null)" ]; then
    echo "setup-system: something listens on port 9090 after installing prometheus (see: ss -tlnp 'sport = :9090'); stop it: netprof's tests start their own" >&2
    exit 1
  fi
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
