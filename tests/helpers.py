"""Process checks shared by the end-to-end tests."""

from __future__ import annotations

import os
import time

import psutil

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
