#!/usr/bin/env bash
# A lab of SSH "hosts" on this machine, for multi-host runs over OpenSSH (issue 36).
#
#   scripts/lab.sh up N     N hosts (1-16); prints, as its last line, the ssh config to use with `ssh -F`
#   scripts/lab.sh status   the lab's hosts and whether their sshd answers
#   scripts/lab.sh down     removes all of it; a second `down` finds nothing and succeeds
#
# Host I is the network namespace nplabI with 10.213.0.I/24 on a veth (eth0 inside, nplabvI in the
# root namespace), lo up, and a real sshd (Debian's openssh-server, `/usr/sbin/sshd -f CONFIG`) listening
# on 10.213.0.I:22 only, in a UTS namespace of its own whose hostname is labI. The root namespace's ends
# hang off the bridge nplab0 (10.213.0.254/24), so the hosts reach each other and the root namespace
# reaches them; no default route, nothing routed beyond the bridge. Host 1 (lab1) is the server's host.
#
# Everything the lab makes is named here and nowhere else: namespaces nplab1..nplab16, the bridge
# nplab0, the veths nplabv1..nplabv16, the directory /run/netprof-lab (0700, root's: keys, sshd
# configs, pid and log files, known_hosts, ssh_config) and, when `up` runs through sudo, the caller's
# copy /run/netprof-lab.UID (0700, the caller's: the client key, known_hosts and an ssh_config naming
# them), since netprof runs ssh as the sudo caller, who cannot read root's. `down` touches nothing else.
#
# A lab key is root on this machine: a lab host is a set of namespaces of this kernel, sharing its
# filesystem and processes, and its sshd lets the key in as root. Only root holds it, and the user who
# brought the lab up through sudo (who is root already); each sshd listens on its host's address
# (10.213.0.I), reached only from this machine's bridge, and takes nothing but that key.
#
# netprof's own reaper (profiler/run/link/netns.py `cleanup_leftovers`, run by profiler/run/reap.py at every run's
# start, by the watchdog and by `netprof doctor`) deletes namespaces matching ^netprof-<pid>-[bl]$ whose
# pid is gone. The lab's names (nplab*) must never match that pattern, or a netprof run would delete a
# live lab under the hosts' feet; its veth names (npb<pid>, npl<pid>) are numeric after the prefix,
# which nplabv<I> is not.
#
# Inside `ip netns exec` (and so in every process sshd starts in a lab host) /sys is remounted and
# tracefs is absent: the lab itself does not need it, but an agent probing in a lab host must mount it
# first (`mount -t tracefs nodev /sys/kernel/tracing`) before attaching tracepoints.
#
# Exit codes: 0 done, 1 a step failed or the machine refuses (one line on stderr saying which), 2 bad
# input. A failed `up` removes what it made before it exits.
set -Eeuo pipefail

LAB=/run/netprof-lab
MARK="$LAB/.netprof-lab"
CFG="$LAB/ssh_config"
BRIDGE=nplab0
NET=10.213.0
BRIDGE_ADDR="$NET.254"
MAX_HOSTS=16
SSHD=/usr/sbin/sshd

say() { echo "lab: $*" >&2; }
die() { say "$*"; exit 1; }
usage() { say "usage: scripts/lab.sh up N (1 <= N <= $MAX_HOSTS) | status | down"; exit 2; }

# A command's failure as one line: what we were doing, then the last line the command printed.
try() {
  local what="$1" out
  shift
  if ! out="$("$@" 2>&1)"; then
    out="$(printf '%s\n' "$out" | sed '/^[[:space:]]*$/d' | tail -n 1)"
    die "$what failed${out:+: $out}"
  fi
}

trap 'say "failed at line $LINENO: $BASH_COMMAND"; exit 1' ERR
trap 'exit 130' INT TERM

ns_name() { echo "nplab$1"; }
veth_name() { echo "nplabv$1"; }

lab_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^nplab[0-9]+$' || true; }
lab_links() {
  ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' \
    | grep -E "^($BRIDGE|nplabv[0-9]+)\$" || true
}
# The lab's namespaces and links that exist, on one line (empty: none).
lab_leftovers() { { lab_namespaces; lab_links; } | paste -sd ' ' -; }

# 0 when $LAB is a lab this script made: a real directory (no link), root's, 0700, with our mark.
lab_is_ours() {
  [ -d "$LAB" ] && [ ! -L "$LAB" ] && [ "$(stat -c '%u %a' "$LAB")" = "0 700" ] \
    && [ -f "$MARK" ] && [ ! -L "$MARK" ]
}

# Why $LAB may not be touched, or nothing when it is absent or ours.
lab_refusal() {
  if [ -L "$LAB" ]; then
    echo "$LAB is a symbolic link, not a lab of ours; remove it yourself"
  elif [ -e "$LAB" ] && ! [ -d "$LAB" ]; then
    echo "$LAB exists and is not a directory; remove it yourself"
  elif [ -d "$LAB" ] && [ "$(stat -c %u "$LAB")" != 0 ]; then
    echo "$LAB is not owned by root; not a lab of ours, remove it yourself"
  elif [ -d "$LAB" ] && ! lab_is_ours; then
    echo "$LAB is not a lab made by scripts/lab.sh (no mark or not 0700); remove it yourself"
  fi
}

# Stops every process in a lab namespace (its sshd, the sessions it started, whatever ran there):
# SIGTERM, then SIGKILL for what is still there after 2 s.
stop_namespace_processes() {
  local ns="$1" pids i
  for sig in TERM KILL; do
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086  # a list of pids
    kill "-$sig" $pids 2>/dev/null || true
    for i in $(seq 20); do
      [ -n "$(ip netns pids "$ns" 2>/dev/null || true)" ] || return 0
      sleep 0.1
    done
  done
  [ -z "$(ip netns pids "$ns" 2>/dev/null || true)" ] || die "processes in $ns survive SIGKILL: $(ip netns pids "$ns" | tr '\n' ' ')"
}

# Everything the lab may have made, in any state (a half-made `up`, a lab directory lost): idempotent.
teardown() {
  local ns link why
  for ns in $(lab_namespaces); do
    stop_namespace_processes "$ns"
    try "deleting namespace $ns" ip netns delete "$ns"
  done
  # Deleting a namespace deletes its veth pair, a moment later (the kernel cleans up namespaces
  # asynchronously): wait for that, then delete what is left (the bridge, a veth of a cut-short `up`).
  local i
  for i in $(seq 30); do
    [ -n "$(lab_links | grep -v "^$BRIDGE\$" || true)" ] || break
    sleep 0.1
  done
  for link in $(lab_links); do
    if ! ip link delete "$link" 2>/dev/null && ip link show "$link" >/dev/null 2>&1; then
      try "deleting link $link" ip link delete "$link"
    fi
  done
  # sshd started from a lab config but no longer in a lab namespace cannot exist (it never leaves
  # one); its pid files are checked anyway, each pid only if its command line names our config.
  if lab_is_ours; then
    local pidfile pid
    for pidfile in "$LAB"/host*/sshd.pid; do
      [ -f "$pidfile" ] || continue
      pid="$(head -c 20 "$pidfile" | tr -cd 0-9)"
      [ -n "$pid" ] || continue
      if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-f $LAB/"; then
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
    local caller
    caller="$(head -c 64 "$LAB/caller_dir" 2>/dev/null || true)"
    if [[ "$caller" =~ ^/run/netprof-lab\.[0-9]+$ ]] && [ -d "$caller" ] && [ ! -L "$caller" ]; then
      rm -rf --one-file-system -- "$caller"
    fi
    rm -rf --one-file-system -- "$LAB"
  elif why="$(lab_refusal)" && [ -n "$why" ]; then
    die "$why"
  fi
}

host_sshd_config() {
  local i="$1" dir="$LAB/host$1"
  cat <<EOF
# sshd of lab host $i (network namespace $(ns_name "$i")), made by scripts/lab.sh: keys only, root only.
ListenAddress $NET.$i:22
AddressFamily inet
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $LAB/authorized_keys
AllowUsers root
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
UsePAM no
PermitEmptyPasswords no
StrictModes yes
X11Forwarding no
AllowAgentForwarding no
AllowTcpForwarding no
AllowStreamLocalForwarding no
PermitTunnel no
GatewayPorts no
PermitUserEnvironment no
PrintMotd no
PrintLastLog no
UseDNS no
LogLevel INFO
Subsystem sftp internal-sftp
EOF
}

# The ssh config for `up N` whose key and known_hosts are in directory $2 (root's $LAB, or the caller's copy).
client_config() {
  local n="$1" dir="$2" i
  echo "# Lab hosts made by scripts/lab.sh up $n: ssh -F $dir/ssh_config labI. lab1 is the server's host."
  for i in $(seq "$n"); do
    cat <<EOF

Host lab$i
  HostName $NET.$i
  User root
  Port 22
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
EOF
  done
}

# Refuses an address range the root namespace already uses (a route to or inside 10.213.0.0/24).
check_range_free() {
  local used
  used="$( { ip -4 route show root "$NET.0/24"; ip -4 route show match "$NET.0/24"; } 2>/dev/null \
    | awk '$1 != "default" { print; exit }' || true)"
  [ -z "$used" ] || die "$NET.0/24 is already routed here ($used); the lab needs it to itself"
}

# An `up` that stops before its end (a failed step, Ctrl-C) removes what it made.
up_exit() {
  local rc=$?
  trap - EXIT ERR
  if [ "$rc" != 0 ]; then
    (teardown) >/dev/null 2>&1 || say "could not remove all of it; run scripts/lab.sh down"
  fi
  exit "$rc"
}

up() {
  local n="$1" i ns veth cfg
  [ -x "$SSHD" ] || die "$SSHD is missing: install openssh-server (scripts/setup-system.sh)"
  local tool
  for tool in ip ssh ssh-keygen unshare ss; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (scripts/setup-system.sh installs it)"
  done

  local why
  why="$(lab_refusal)"
  [ -z "$why" ] || die "$why"
  [ ! -e "$LAB" ] || die "a lab is up ($LAB exists); run scripts/lab.sh down first"
  local left
  left="$(lab_leftovers)"
  [ -z "$left" ] || die "lab namespaces or links are left ($left); run scripts/lab.sh down first"
  check_range_free

  # From here on a failure removes what was made.
  umask 077
  mkdir -m 0700 "$LAB" 2>/dev/null || die "cannot create $LAB (made meanwhile?); run scripts/lab.sh down first"
  trap up_exit EXIT
  [ "$(stat -c '%u %a' "$LAB")" = "0 700" ] || die "$LAB is not root's with mode 0700 after mkdir"
  echo "netprof lab: made by scripts/lab.sh; removed by scripts/lab.sh down" >"$MARK"
  echo "$n" >"$LAB/hosts"
  mkdir -p /run/sshd  # sshd's privilege separation directory
  chmod 0755 /run/sshd

  try "making the client key" ssh-keygen -q -t ed25519 -N '' -C netprof-lab-client -f "$LAB/id_ed25519"
  cp "$LAB/id_ed25519.pub" "$LAB/authorized_keys"
  : >"$LAB/known_hosts"
  for i in $(seq "$n"); do
    mkdir -m 0700 "$LAB/host$i"
    try "making lab$i's host key" ssh-keygen -q -t ed25519 -N '' -C "lab$i" -f "$LAB/host$i/ssh_host_ed25519_key"
    echo "$NET.$i $(cut -d' ' -f1,2 "$LAB/host$i/ssh_host_ed25519_key.pub")" >>"$LAB/known_hosts"
    host_sshd_config "$i" >"$LAB/host$i/sshd_config"
    try "checking lab$i's sshd config" "$SSHD" -t -f "$LAB/host$i/sshd_config"
  done
  client_config "$n" "$LAB" >"$CFG"
  cfg="$CFG"
  if [ -n "${SUDO_UID:-}" ] && [ "$SUDO_UID" != 0 ]; then
    cfg="$(caller_copy "$n")"
  fi

  try "making the bridge $BRIDGE" ip link add "$BRIDGE" type bridge stp_state 0
  { echo 1 >"/proc/sys/net/ipv6/conf/$BRIDGE/disable_ipv6"; } 2>/dev/null || true
  try "addressing the bridge" ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
  try "bringing the bridge up" ip link set "$BRIDGE" up

  for i in $(seq "$n"); do
    ns="$(ns_name "$i")"
    veth="$(veth_name "$i")"
    try "making namespace $ns" ip netns add "$ns"
    try "making the veth of $ns" ip link add "$veth" type veth peer name eth0 netns "$ns"
    { echo 1 >"/proc/sys/net/ipv6/conf/$veth/disable_ipv6"; } 2>/dev/null || true
    try "attaching $veth to $BRIDGE" ip link set "$veth" master "$BRIDGE" up
    try "bringing lo up in $ns" ip -n "$ns" link set lo up
    try "addressing $ns" ip -n "$ns" addr add "$NET.$i/24" dev eth0
    try "bringing eth0 up in $ns" ip -n "$ns" link set eth0 up
    # sshd daemonizes (the pid file is its daemon's); its own hostname, in a UTS namespace of its own;
    # without the lock's descriptor (9), or the lab's sshds would hold the lock for good.
    # shellcheck disable=SC2016  # sh -c's own positional parameters
    try "starting sshd in $ns" ip netns exec "$ns" unshare --uts -- sh -c \
      'exec 9<&- && hostname "$1" && exec "$2" -f "$3" -E "$4"' sh "lab$i" "$SSHD" "$LAB/host$i/sshd_config" "$LAB/host$i/sshd.log"
  done

  # Each host answers over ssh (sshd listens shortly after it daemonizes: retried for up to 5 s).
  local tries out
  for i in $(seq "$n"); do
    for tries in $(seq 50); do
      if out="$(ssh -F "$CFG" "lab$i" true 2>&1 </dev/null)"; then
        break
      fi
      [ "$tries" -lt 50 ] || die "ssh to lab$i ($NET.$i) failed: $(printf '%s\n' "$out" | tail -n 1) (sshd log: $LAB/host$i/sshd.log)"
      sleep 0.1
    done
  done
  # The hosts reach each other over the bridge: lab1 reads lab2's SSH banner.
  if [ "$n" -ge 2 ]; then
    out="$(timeout 5 ip netns exec "$(ns_name 1)" bash -c \
      "exec 3<>/dev/tcp/$NET.2/22 && head -c 7 <&3" 2>/dev/null || true)"
    [ "$out" = "SSH-2.0" ] || die "lab1 does not reach lab2's port 22 over $BRIDGE (bridged traffic filtered? see net.bridge.bridge-nf-call-iptables and the FORWARD chain)"
  fi

  trap - EXIT
  echo "lab: $n host(s) up: lab1..lab$n at $NET.1..$NET.$n (lab1 is the server's); ssh -F $cfg labI"
  echo "$cfg"
}

# The sudo caller's copy of the client side (netprof runs ssh as that user): a directory of theirs in /run
# (where only root creates), recorded in $LAB so that `down` removes it; prints its ssh config's path.
caller_copy() {
  local n="$1" uid gid dir
  uid="$(printf '%s' "$SUDO_UID" | tr -cd 0-9)"
  gid="$(printf '%s' "${SUDO_GID:-$SUDO_UID}" | tr -cd 0-9)"
  [ -n "$uid" ] && [ -n "$gid" ] || die "SUDO_UID/SUDO_GID are not numbers"
  dir="$LAB.$uid"
  [ ! -e "$dir" ] && [ ! -L "$dir" ] || die "$dir exists (a lab's leftover?); remove it first"
  echo "$dir" >"$LAB/caller_dir"
  mkdir -m 0700 "$dir"
  install -m 0600 "$LAB/id_ed25519" "$dir/id_ed25519"
  install -m 0644 "$LAB/known_hosts" "$dir/known_hosts"
  client_config "$n" "$dir" >"$dir/ssh_config"
  chmod 0600 "$dir/ssh_config"
  chown -R -- "$uid:$gid" "$dir"
  echo "$dir/ssh_config"
}

status() {
  local why n i state left
  why="$(lab_refusal)"
  [ -z "$why" ] || die "$why"
  if ! lab_is_ours; then
    echo "lab: down"
    left="$(lab_leftovers)"
    [ -z "$left" ] || echo "lab: left over (run scripts/lab.sh down): $left"
    return 0
  fi
  n="$(tr -cd 0-9 <"$LAB/hosts")"
  for i in $(seq "$n"); do
    if ssh -F "$CFG" -o ConnectTimeout=2 "lab$i" true </dev/null >/dev/null 2>&1; then
      state="sshd answers"
    else
      state="sshd does not answer"
    fi
    echo "lab$i $NET.$i $(ns_name "$i"): $state"
  done
  echo "$CFG"
}

# The number of hosts of `up N`, checked before anything else (bad input: exit 2).
host_count() {
  if ! [[ "$1" =~ ^[0-9]{1,3}$ ]] || [ "$((10#$1))" -lt 1 ] || [ "$((10#$1))" -gt "$MAX_HOSTS" ]; then
    say "up N: N must be a number from 1 to $MAX_HOSTS, not '$1'"
    exit 2
  fi
  echo "$((10#$1))"
}

[ "$#" -ge 1 ] || usage
case "$1" in
  up) [ "$#" -eq 2 ] || usage; count="$(host_count "$2")" || exit 2 ;;
  down | status) [ "$#" -eq 1 ] || usage ;;
  *) usage ;;
esac
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, a bridge, sshd)"
command -v ip >/dev/null 2>&1 || die "ip is missing: install iproute2 (scripts/setup-system.sh)"

# One lab command at a time (an `up` and a `down` interleaved would leave half of each).
exec 9<"${BASH_SOURCE[0]}"
flock -w 60 9 || die "another scripts/lab.sh is still running"

case "$1" in
  up) up "$count" ;;
  down) teardown ;;
  status) status ;;
esac
