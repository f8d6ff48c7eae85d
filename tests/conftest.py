"""pytest hooks and fixtures. Shared helpers live in tests/helpers.py (import them from there).

Tests that need BPF/perf use the `bpf` fixture (or call `helpers.require_bpf()`): they skip with a
reason when the machine cannot do it, and fail instead when NETPROF_REQUIRE_BPF=1 (as in CI), so the
probes really run there. Every test that uses the fixture carries the `bpf` marker, so
`-m "not bpf"` leaves them out.

Tests that only read the results of an ordinary short run share one (`standard_run`, once a session):
each `netprof run` costs the suite seconds of start-up, and the suite has a 20-minute limit.
"""

from __future__ import annotations

import inspect
import json
import os

import pytest

from helpers import _missing_bpf, require_bpf, run_netprof, wait_no_children
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


@pytest.fixture(scope="session")
def standard_run(tmp_path_factory) -> tuple:
    """One ordinary `netprof run` for the tests that only read what it wrote: selector and asyncio_sock
    at 10 and 100 connections, 2 rounds of 1 s cells, the counting probes where BPF is. Shared because
    each such run costs the suite ~20 s: read its files, never change them (copy the directory first).
    (directory, JSON summary, netprof processes still alive after it)"""
    out = tmp_path_factory.mktemp("standard") / "run"
    probes = [] if _missing_bpf() is None else ["--no-probes"]
    res = run_netprof("run", "selector", "asyncio_sock", "-c", "10,100", "-d", "1", "-r", "2", "--warmup", "0.3",
                      "--wait", "--json", *probes, "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return out, json.loads(res.stdout), wait_no_children()


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


@pytest.fixture
def local_user():
    """A second local user, created for the test and removed after it (helpers.LocalUser)."""
    from helpers import LocalUser

    user = LocalUser()
    try:
        yield user
    finally:
        user.remove()
