"""Shared test plumbing.

Tests that need BPF/perf use the `bpf` fixture (or call `require_bpf()`): they skip with a reason when
the machine cannot do it, and fail instead when NETPROF_REQUIRE_BPF=1 (as in CI), so the probes
really run there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

REQUIRE_BPF = os.environ.get("NETPROF_REQUIRE_BPF") == "1"
# Every process this test session starts inherits this tag, so leftover checks see only our own
# processes (not those of another session running on the same machine).
TEST_TAG = f"pytest-{os.getpid()}"
os.environ["NETPROF_TEST_TAG"] = TEST_TAG
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


def require_tool(name: str) -> str:
    path = shutil.which(name) or (os.path.join(VENV_BIN, name) if os.access(os.path.join(VENV_BIN, name), os.X_OK) else None)
    if not path:
        if REQUIRE_BPF:
            pytest.fail(f"NETPROF_REQUIRE_BPF=1 but `{name}` is not installed")
        pytest.skip(f"`{name}` not installed")
    return path


@pytest.fixture
def bpf():
    require_bpf()


def netprof_cmd(*args: str) -> list[str]:
    """argv for the installed CLI (the same entry point a user types)."""
    return [os.path.join(VENV_BIN, "netprof"), *args]


def run_netprof(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(netprof_cmd(*args), capture_output=True, text=True, timeout=timeout, **kw)
