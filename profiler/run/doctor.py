"""`netprof doctor`: every capability a profiled run needs, one line each, with the fix."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass

from netprof.profiler.core import paths, procs
from netprof.profiler.run import plan, reap

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
# Capability bits (linux/capability.h)
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # False: informational, does not change the exit code


def _effective_caps() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def check_privileges() -> Check:
    caps = _effective_caps()
    has = lambda bit: bool(caps >> bit & 1)  # noqa: E731
    if os.geteuid() == 0 and has(CAP_SYS_ADMIN):
        return Check("privileges", True, "root")
    if has(CAP_BPF) and has(CAP_PERFMON):
        return Check("privileges", True, "CAP_BPF + CAP_PERFMON")
    missing = [n for n, b in (("CAP_BPF", CAP_BPF), ("CAP_PERFMON", CAP_PERFMON)) if not has(b)]
    return Check("privileges", False, f"uid {os.geteuid()}, missing {' and '.join(missing)}",
                 "run as root (sudo), or grant CAP_BPF+CAP_PERFMON; `netprof run --no-probes` works without")


def check_bcc() -> Check:
    try:
        import bcc  # noqa: F401
    except Exception as e:
        return Check("bcc module", False, f"cannot import bcc: {e}",
                     "`make setup` (installs python3-bpfcc; the venv must use --system-site-packages)")
    return Check("bcc module", True, f"{bcc.__file__}")


def check_headers() -> Check:
    build = f"/lib/modules/{platform.release()}/build"
    if os.path.isdir(os.path.join(build, "include")):
        target = os.path.realpath(build)
        generic = "" if platform.release() in target else " (generic Debian headers linked by setup)"
        return Check("kernel headers", True, f"{build} -> {target}{generic}")
    return Check("kernel headers", False, f"{build} missing: BCC will fail with 'Unable to find kernel headers'",
                 "`make setup` (installs linux-headers-amd64 and links it for this kernel)")


def check_compile(prereqs_ok: bool) -> Check:
    if not prereqs_ok:
        return Check("BPF compile+attach", False, "skipped: fix the lines above first", "")
    from netprof.probes import check_available

    why = check_available()
    if why:
        return Check("BPF compile+attach", False, why, "see the lines above; `netprof run --no-probes` works without")
    return Check("BPF compile+attach", True, "counting programs compile and attach")


def check_probe_cost(compiled_ok: bool) -> Check:
    """This host's price of the counting set per syscall (hosts differ by 3x: docs/facts.md)."""
    if not compiled_ok:
        return Check("probe cost", False, "skipped: the probes do not compile", "", required=False)
    from netprof.probes import CountingProbes, selfcost

    with CountingProbes(attached=False) as probes:
        c = selfcost.cached(probes, refresh=True)  # runs then reuse this figure until the next boot
    return Check("probe cost", True, f"{c['added_target_ns']:+.0f} ns per watched syscall, "
                 f"{c['added_bystander_ns']:+.0f} ns per syscall of other processes while attached "
                 f"(getppid from Python: {c['bare_ns']:.0f} ns; runs reuse this figure until the next boot)",
                 required=False)


def _tracefs() -> str | None:
    for root in TRACEFS:
        if os.path.isdir(os.path.join(root, "events")):
            return root
    return None


def check_tracepoints() -> list[Check]:
    root = _tracefs()
    if root is None:
        return [Check("tracepoints", False, "tracefs not mounted or not readable",
                      "run as root; `mount -t tracefs nodev /sys/kernel/tracing`")]
    checks = []
    for group in ("raw_syscalls", "sched"):
        ok = os.path.isdir(os.path.join(root, "events", group))
        checks.append(Check(f"{group} tracepoints", ok, f"{root}/events/{group}" + ("" if ok else " missing"),
                            "" if ok else "a kernel with CONFIG_FTRACE_SYSCALLS / sched tracepoints"))
    kprobes = os.path.exists(os.path.join(root, "kprobe_events"))
    checks.append(Check("kprobes", kprobes, "present" if kprobes else "absent (CONFIG_KPROBES unset); netprof uses "
                        "tracepoints only, so this is fine", required=False))
    return checks


# kernel.io_uring_disabled (Linux 6.6+): who may create a ring
RING_SYSCTL = "/proc/sys/kernel/io_uring_disabled"
RING_ALLOWED = {"0": "every process may use it", "1": "only processes in kernel.io_uring_group may use it",
                "2": "no process may use it"}


def check_io_uring() -> Check:
    """What the counts see of io_uring: its tracepoints (the counting set hooks io_uring_submit_req and
    io_uring_complete) and whether submissions are told apart by operation (the opcode's offset, from BTF)."""
    from netprof.probes.ring_ops import UNKNOWN_WHY, opcode_offset

    root = _tracefs()
    if root is None or not os.path.isdir(os.path.join(root, "events", "io_uring")):
        return Check("io_uring", False, "no io_uring tracepoints: a kernel without io_uring (CONFIG_IO_URING)",
                     "a kernel with io_uring; or `netprof run --no-probes`")
    off = opcode_offset()
    counted = (f"submissions counted by operation (struct io_kiocb's opcode at byte {off}, from BTF)"
               if off is not None else f"submissions not told apart: {UNKNOWN_WHY}")
    try:
        with open(RING_SYSCTL) as f:
            value = f.read().strip()
        allowed = f"; kernel.io_uring_disabled={value}: {RING_ALLOWED.get(value, 'unknown value')}"
    except OSError:  # before 6.6: no such switch, every process may use it
        allowed = ""
    # a note when the opcode cannot be read: counted still, as `unknown`
    return Check("io_uring", off is not None, f"tracepoints present, {counted}{allowed}", required=False)


def check_perf() -> Check:
    perf = shutil.which("perf")
    if not perf:
        return Check("perf", False, "not found", "`make setup` (installs linux-perf)")
    try:
        out = procs.run([perf, "--version"], timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("perf", False, f"{perf} does not run: {e}", "`make setup` (installs linux-perf)")
    if out.returncode != 0:
        return Check("perf", False, out.stderr.strip()[:120], "`make setup` (installs linux-perf)")
    return Check("perf", True, out.stdout.strip())


def check_loader() -> Check:
    try:
        return Check("netprof-loader", True, paths.loader_binary())
    except paths.LoaderMissingError as e:
        return Check("netprof-loader", False, "not found", str(e).split(": ", 1)[-1])
    except paths.UntrustedPathError as e:
        return Check("netprof-loader", False, str(e).split("; ", 1)[0], "make NETPROF_LOADER root's and not "
                     "writable by others, or unset it")


def check_fd_limit() -> Check:
    soft = plan.fd_limit()
    ceiling = plan.max_connections()
    ok = ceiling >= 1000
    return Check("ulimit -n", ok, f"{soft} → at most {ceiling} connections per run",
                 "" if ok else "raise it: `ulimit -n 65536` (needs CAP_SYS_RESOURCE)")


def check_port_range() -> Check:
    try:
        lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    except OSError:
        return Check("local port range", True, "unknown", required=False)
    return Check("local port range", True, f"{lo}–{hi}: {hi - lo + 1} ports per source address "
                 "(more connections need several 127.x source addresses)", required=False)


def check_cpus() -> Check:
    n = len(os.sched_getaffinity(0))
    ok = n >= 2
    return Check("CPUs", ok, f"{n} usable" + ("" if ok else ": backend and loader cannot be pinned apart"),
                 "" if ok else "run on ≥2 CPUs, or pass --no-pin", required=False)


def check_pyspy() -> Check:
    import sys

    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    ok = os.access(spy, os.X_OK)
    return Check("py-spy", ok, spy if ok else "not found", "" if ok else "`make setup`", required=False)


def check_interpreters() -> list[Check]:
    """Informational: which interpreters can run backends, and which give mixed Python+kernel stacks."""
    from netprof.profiler.run.interpreters import InterpreterError, available, cache_summary, pyenv_versions

    checks = []
    try:
        pyenv_versions()
    except InterpreterError as e:
        checks.append(Check("pyenv", False, str(e).split("; ", 1)[0], "make PYENV_ROOT root's and not writable "
                            "by others, or unset it", required=False))
    for it in available():
        flag, note = it.mixed_stack_flag()
        why = note if flag else note.split(": ", 1)[-1]
        detail = f"{it.base}: probes yes; mixed stacks {'yes' if flag else 'no'} ({why})"
        checks.append(Check(f"python {it.version}", True, detail, required=False))
    try:
        checks.append(Check("python environments", True, cache_summary(), required=False))
    except InterpreterError as e:
        checks.append(Check("python environments", False, str(e).split("; ", 1)[0],
                            "make it root's or set NETPROF_CACHE elsewhere", required=False))
    return checks


def check_backends() -> Check:
    """Informational: built-in backends this interpreter cannot run because a dependency is not
    installed (each names its fix); a run of one of them would be a failed cell with that line."""
    from netprof.backends import registry

    missing = {}
    for name in registry.names():
        info = registry.get(name)
        if registry.python_requirement(info) is None and (why := registry.uninstalled_requirement(info)):
            missing[name] = why
    if not missing:
        return Check("backends", True, f"the dependencies of all {len(registry.names())} are installed",
                     required=False)
    reasons = {why.partition("; fix: ")[0] for why in missing.values()}  # "needs X, which is not installed"
    fixes = {why.rpartition("; fix: ")[2] for why in missing.values()}
    return Check("backends", False, f"{len(missing)} cannot run here ({', '.join(missing)}): "
                 f"{'; '.join(sorted(reasons))}", "; ".join(sorted(fixes)), required=False)


def check_netns_leftovers() -> Check:
    """Namespaces of a netprof killed during a --remote netns run are removed here (and by the next run)."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        return Check("netns leftovers", True, "not checked (needs root and iproute2)", required=False)
    removed = reap.reap_dead_runs("namespaces")["namespaces"]
    return Check("netns leftovers", True, f"removed {', '.join(removed)}" if removed else "none", required=False)


def check_symlink_protection() -> Check:
    """Informational: with fs.protected_symlinks=0, root follows links others plant in /tmp (the
    backends' perf maps, py-spy and perf scratch). netprof creates those files itself, but a backend's
    forked children write their own maps."""
    try:
        with open("/proc/sys/fs/protected_symlinks") as f:
            value = f.read().strip()
    except OSError:
        return Check("symlink protection", True, "fs.protected_symlinks unknown", required=False)
    if value == "0":
        return Check("symlink protection", False, "fs.protected_symlinks=0: root follows links other users "
                     "plant in /tmp", "`sysctl -w fs.protected_symlinks=1` (the kernel's default on most "
                     "distributions)", required=False)
    return Check("symlink protection", True, f"fs.protected_symlinks={value}", required=False)


def check_stale_files() -> Check:
    """stderr files and sampling scratch of netprof runs that died without cleaning up: removed here
    (and by the next run)."""
    removed = [path for paths in reap.reap_dead_runs("temp files", "sampling scratch").values() for path in paths]
    return Check("stale temp files", True, f"removed {len(removed)} of dead runs" if removed else "none",
                 required=False)


def run_checks() -> list[Check]:
    priv, bcc, headers = check_privileges(), check_bcc(), check_headers()
    tps = check_tracepoints()
    checks = [priv, bcc, headers, *tps, check_io_uring()]
    checks.append(check_compile(priv.ok and bcc.ok and headers.ok and all(c.ok for c in tps if c.required)))
    checks.append(check_probe_cost(checks[-1].ok))
    checks += [check_perf(), check_loader(), check_fd_limit(), check_port_range(), check_cpus(), check_pyspy(),
               check_netns_leftovers(), check_symlink_protection(), check_stale_files(), check_backends(),
               *check_interpreters()]
    return checks


def all_ok(checks: list[Check]) -> bool:
    return all(c.ok for c in checks if c.required)
