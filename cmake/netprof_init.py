"""netprof: an eBPF/perf-instrumented syscall profiler for Python network backends."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("netprof")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
