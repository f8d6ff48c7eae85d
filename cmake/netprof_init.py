"""netprof: an eBPF/perf-instrumented syscall profiler for Python network backends."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # `__version__` and `__source__` on first use only: importlib.metadata costs ~30 ms at import, and every backend
    # server a cell starts imports this package without wanting either.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("netprof")
        except PackageNotFoundError:  # running from a source tree that was never installed
            found = "0+unknown"
    elif name == "__source__":  # the commit the package was built from (CMakeLists.txt writes _build.py)
        import importlib

        try:
            found = importlib.import_module("netprof._build").SOURCE
        except ImportError:  # a source tree that was never installed
            found = "unknown"
    else:
        raise AttributeError(f"module 'netprof' has no attribute {name!r}")
    globals()[name] = found
    return found
