"""pytest hooks and fixtures. Shared helpers live in tests/helpers.py (import them from there).

Tests that need BPF/perf use the `bpf` fixture (or call `helpers.require_bpf()`): they skip with a
reason when the machine cannot do it, and fail instead when NETPROF_REQUIRE_BPF=1 (as in CI), so the
probes really run there. Every test that uses the fixture carries the `bpf` marker, so
`-m "not bpf"` leaves them out.
"""

from __future__ import annotations

import inspect
import os

import pytest

from helpers import require_bpf
from netprof.profiler.loader_client import Loader
from netprof.profiler.procs import ProcessGroup

# Every process this test session starts inherits this tag, so leftover checks see only our own
# processes (not those of another session running on the same machine).
TEST_TAG = f"pytest-{os.getpid()}"
os.environ["NETPROF_TEST_TAG"] = TEST_TAG


@pytest.fixture
def bpf():
    require_bpf()


@pytest.fixture
def group():
    """A ProcessGroup that stops whatever a test started in it."""
    with ProcessGroup() as g:
        yield g


@pytest.fixture
def loader(group):
    """A started netprof-loader; afterwards checks it was stopped and reaped: nothing left behind."""
    ldr = Loader.start(group)
    yield ldr
    pid = ldr.pid
    group.stop_all()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _needs_bpf(item) -> bool:
    """Uses the `bpf` fixture, or calls require_bpf() in its own body."""
    if "bpf" in getattr(item, "fixturenames", ()):
        return True
    try:
        return "require_bpf(" in inspect.getsource(item.function)
    except (OSError, TypeError, AttributeError):
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _needs_bpf(item):
            item.add_marker(pytest.mark.bpf)
