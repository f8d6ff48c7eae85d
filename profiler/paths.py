"""Where netprof's own executables live (one place, so tests and runs agree)."""

from __future__ import annotations

import os
import shutil
import sys


def loader_binary() -> str:
    """The `netprof-loader` binary: $NETPROF_LOADER, else next to this interpreter, else PATH."""
    env = os.environ.get("NETPROF_LOADER")
    if env:
        return env
    beside = os.path.join(os.path.dirname(sys.executable), "netprof-loader")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("netprof-loader")
    if found:
        return found
    raise FileNotFoundError("netprof-loader not found: run `make setup` (it builds and installs it)")


def backend_python() -> str:
    """The interpreter that runs backends by default: the one running netprof."""
    return sys.executable
