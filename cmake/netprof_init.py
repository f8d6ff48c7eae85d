"""netprof: an eBPF/perf-instrumented syscall profiler for Python network backends."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # `__version__` on first use only: importlib.metadata costs ~30 ms at import, and every backend server a
    # cell starts imports this package without wanting the version.
    if name != "__version__":
        raise AttributeError(f"module 'netprof' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("netprof")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
