"""Plumbing shared by the tests: BPF/tool requirements, the installed CLI, process checks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from netprof.backends import registry

REQUIRE_BPF = os.environ.get("NETPROF_REQUIRE_BPF") == "1"
# CI (CI=true) runs after `make setup`, which installs every tool and interpreter the tests use:
# there a missing one is a failure, elsewhere a skip with the reason.
REQUIRE_TOOLS = os.environ.get("CI") == "true"
VENV_BIN = os.path.dirname(sys.executable)


def _missing_bpf() -> str | None:
    if os.geteuid() != 0:
        return "not root (BPF needs root or CAP_BPF+CAP_PERFMON)"
    try:
        import bcc  # noqa: F401
    except Exception as e:  # ImportError, or libbcc missing
        return f"bcc not importable: {e}"
    if not os.path.exists("/sys/kernel/tracing/events/raw_syscalls") and not os.path.exists(
        "/sys/kernel/debug/tracing/events/raw_syscalls"
    ):
        return "raw_syscalls tracepoints not available"
    return None


def require_bpf() -> None:
    why = _missing_bpf()
    if why:
        if REQUIRE_BPF:
            pytest.fail(f"NETPROF_REQUIRE_BPF=1 but BPF is unavailable: {why}")
        pytest.skip(f"BPF unavailable: {why}")


def require(ok: bool, what: str) -> None:
    """Skip without `what` (a tool, root, an interpreter), or fail in CI, whose setup provides it."""
    if not ok:
        if REQUIRE_TOOLS:
            pytest.fail(f"CI=true but {what} (make setup / scripts/setup-system.sh provides it)")
        pytest.skip(what)


def require_tool(name: str) -> str:
    in_venv = os.path.join(VENV_BIN, name)
    path = shutil.which(name) or (in_venv if os.access(in_venv, os.X_OK) else None)
    require(path is not None, f"`{name}` is not installed")
    return path


def default_sigint() -> None:
    """preexec_fn for a child that is sent SIGINT: under a parent that ignores it (nohup, a background
    job) the child would inherit SIG_IGN and CPython would install no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def netprof_cmd(*args: str) -> list[str]:
    """argv for the installed CLI (the same entry point a user types)."""
    return [os.path.join(VENV_BIN, "netprof"), *args]


def run_netprof(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(netprof_cmd(*args), capture_output=True, text=True, timeout=timeout, **kw)


OUR_PROCESS_MARKERS = ("netprof.backends", "netprof-loader")


def _ours(p: psutil.Process) -> bool:
    try:
        return p.environ().get("NETPROF_TEST_TAG") == os.environ.get("NETPROF_TEST_TAG")
    except psutil.Error:
        return False


def netprof_children() -> list[psutil.Process]:
    """Backends and loaders started by this test session that are still alive (must be none after a run)."""
    found = []
    for p in psutil.process_iter(["cmdline", "name"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if (any(m in cmd for m in OUR_PROCESS_MARKERS) or p.info.get("name") == "netprof-loader") and _ours(p):
            found.append(p)
    return found


def wait_until_empty(probe, timeout: float = 10.0) -> list:
    """Call `probe()` until it returns nothing or `timeout` passes; returns what is still left."""
    deadline = time.monotonic() + timeout
    left = probe()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = probe()
    return left


def wait_no_children(timeout: float = 10.0) -> list[psutil.Process]:
    return wait_until_empty(netprof_children, timeout)


def backend_params(names) -> list:
    """pytest params for backends by name: one this interpreter is too old for (registry
    min_python, e.g. asyncio_eager on 3.11) is skipped with the registry's one-line reason."""
    params = []
    for name in names:
        why = registry.python_requirement(registry.get(name))
        params.append(pytest.param(name, marks=pytest.mark.skipif(why is not None, reason=why or "")))
    return params
