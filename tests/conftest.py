"""pytest hooks and fixtures. Shared helpers live in tests/helpers.py (import them from there).

Tests that need BPF/perf use the `bpf` fixture (or call `helpers.require_bpf()`): they skip with a
reason when the machine cannot do it, and fail instead when NETPROF_REQUIRE_BPF=1 (as in CI), so the
probes really run there. Every test that uses the fixture carries the `bpf` marker, so
`-m "not bpf"` leaves them out.

Tests that only read the results of a run share it (once a session, read-only: copy the directory to
change it): `standard_run` (an ordinary short run), `message_run` (asyncio_sock and uvloop_sock, 8
in flight, message and stream framing), `probed_run` (four servers counted over whole 1-s windows) and
`flame_run` (selector's flamegraphs, on CPython 3.13 where pyenv has it).
Each `netprof run` costs the suite seconds of start-up, and the whole suite (`make test`) must stay under
10 minutes on a 2-core machine.

The fast tier, `make test-fast` (`-m "not bpf and not e2e"`, under 2 minutes): every test not marked
`bpf` or `e2e`. A test is marked `e2e` here when it starts a netprof run, a backend server or the
loader, decided from what it uses: the fixtures in E2E_FIXTURES (the shared runs, `loader`, `group`,
`local_user`), or the names in E2E_NAMES (`run_netprof`, `netprof_cmd`, `helpers.Backend`, `Loader`,
`ProcessGroup`) used by the test, by a fixture it uses, or by a function of its own module that either
calls (followed transitively). A CLI call that starts nothing (help, list, refused input: exit 2) goes
through `helpers.netprof_cli`, which is not in E2E_NAMES: those tests stay in the fast tier. Other
subprocesses (a child `python -c`, `ip netns`) do not count: they take milliseconds.

`make test` runs the suite in two passes. Tests marked `serial` measure something — they start a netprof
run or the loader (SERIAL_NAMES, SERIAL_FIXTURES, found the same way as e2e), attach BPF, or add a local
user — and run last, one at a time, with the machine to themselves. Every other test (the fast tier, and
e2e tests that start only backend servers and check what they answer) runs first, four at a time
(pytest-xdist): they mostly wait for processes to start. A test beside another must not assume the CPUs
are its own: a floor on throughput there is a floor for a shared machine.
"""

from __future__ import annotations

import inspect
import json
import os
import time
import types

import pytest

from helpers import _missing_bpf, bpf_prog_ids, require_bpf, run_netprof, wait_no_children
from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run.loader_client import Loader

# Every process this test session starts inherits this tag, so leftover checks see only our own
# processes (not those of another session running on the same machine).
TEST_TAG = f"pytest-{os.getpid()}"
os.environ["NETPROF_TEST_TAG"] = TEST_TAG


@pytest.fixture(scope="session")  # session: the shared runs that need BPF depend on it too
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


def _shared_run(tmp_path_factory, name: str, *args: str) -> tuple:
    out = tmp_path_factory.mktemp(name) / "run"
    res = run_netprof("run", *args, "--wait", "--json", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return out, json.loads(res.stdout), wait_no_children()


@pytest.fixture(scope="session")
def standard_run(tmp_path_factory) -> tuple:
    """One ordinary `netprof run` for the tests that only read what it wrote: selector and asyncio_sock
    at 10 and 100 connections, 2 rounds of 0.6 s cells, the counting probes where BPF is. Shared because
    each such run costs the suite ~20 s: read its files, never change them (copy the directory first).
    (directory, JSON summary, netprof processes still alive after it)"""
    probes = [] if _missing_bpf() is None else ["--no-probes"]
    return _shared_run(tmp_path_factory, "standard", "selector", "asyncio_sock", "-c", "10,100", "-d", "0.6", "-r", "2",
                       "--warmup", "0.3", *probes)


@pytest.fixture(scope="session")
def message_run(bpf, tmp_path_factory) -> tuple:
    """asyncio_sock and uvloop_sock, 100 connections, 8 in flight, message and stream framing, 20 µs of
    handler CPU per message (the condition of sock_recv's starvation: tests/test_report_e2e.py), 5 rounds
    of 0.4 s, counting probes. Shared and read-only, like standard_run. Five short rounds, not three of 0.7 s
    (the same load time): on a busy hour a round's fairness moves with the host (asyncio_sock's stream framing
    gave one connection 5× the median's messages in 2 of 3 rounds once, Jain 0.83 and 0.86), and compare's
    verdict and the report's median round need the rounds more than their length."""
    return _shared_run(tmp_path_factory, "message", "asyncio_sock", "uvloop_sock", "-c", "100", "--pipeline", "8",
                       "--framing", "message,stream", "--work", "spin:20", "-d", "0.4", "-r", "5", "--warmup", "0.2")


@pytest.fixture(scope="session")
def probed_run(bpf, tmp_path_factory) -> tuple:
    """selector, cpp_epoll, fork and prefork at 100 connections, one 1-s round each, the counting probes over the
    whole window (--probe-share 1, no report): the per-message counts of tests/test_probes_e2e.py and the share-1
    row of tests/test_phases.py (each had a run of its own: ~3 s of the serial pass). Shared and read-only, like
    standard_run. (rows by backend, BPF programs still loaded 0.5 s after it that were not before it)"""
    before = bpf_prog_ids()
    out = tmp_path_factory.mktemp("probed") / "run"
    # Its checks of one receive and one send per message (±0.02) count over the whole 1-s window: the counters are
    # read when netprof hears the loader's marks, a few ms late and not equally late at both ends, and over the
    # default 0.3-s probed sub-window that cost cpp_epoll (100k msgs/s) 2.4% twice in CI (0.976 at a 0.18-s
    # sub-window, 1.024 at 0.3 s); over 1 s the same lag is a third of that. tests/test_phases.py covers the
    # sub-window itself.
    res = run_netprof("run", "selector", "cpp_epoll", "fork", "prefork", "-c", "100", "-d", "1", "-r", "1", "--warmup",
                      "0.3", "--probe-share", "1", "--no-report", "--wait", "--json", "--out", str(out), timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {r["backend"]: r for r in json.loads(res.stdout)["runs"]}
    time.sleep(0.5)
    return rows, bpf_prog_ids() - before


@pytest.fixture(scope="session")
def flame_run(bpf, tmp_path_factory) -> tuple:
    """`netprof run selector -c 100 -d 1 -r 1 --flamegraph` on pyenv's CPython 3.13 where it is installed (its perf
    trampoline adds the mixed Python+kernel view to the on-CPU, Python and off-CPU ones), else on netprof's own
    interpreter: tests/test_flamegraph_cli.py reads its views, tests/test_interpreters.py its mixed view (each made
    a run of its own: ~7 s of the serial pass). Shared and read-only, like standard_run.
    (directory, index.json's entry, the --python asked or None)"""
    from netprof.profiler.run import interpreters

    try:
        interpreters.resolve("3.13")
        python: str | None = "3.13"
    except interpreters.InterpreterError:
        python = None
    out = tmp_path_factory.mktemp("flame") / "run"
    res = run_netprof("run", "selector", "-c", "100", "-d", "1", "-r", "1", "--warmup", "0.3", "--flamegraph",
                      *(("--python", python) if python else ()), "--wait", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    entry = json.loads((out / "flamegraphs" / "index.json").read_text())[0]
    return out, entry, python


def _needs_bpf(item) -> bool:
    """Uses the `bpf` fixture, or calls require_bpf() in its own body."""
    if "bpf" in getattr(item, "fixturenames", ()):
        return True
    try:
        return "require_bpf(" in inspect.getsource(item.function)
    except (OSError, TypeError, AttributeError):
        return False


# What makes a test e2e (see the module docstring): these fixtures, or these names used by the test, by a
# fixture it uses, or by a function of the same test module they call (transitively).
E2E_FIXTURES = frozenset({"standard_run", "message_run", "probed_run", "flame_run", "loader", "group", "local_user"})
E2E_NAMES = frozenset({"run_netprof", "netprof_cmd", "Backend", "Loader", "ProcessGroup"})
# What makes a test serial: it measures, so nothing else may run beside it (`make test` runs the rest two
# at a time first, then these one by one): a netprof run or the loader (both load the two CPUs and read
# the time they take), the shared runs or the BPF probes. Found the same way as e2e; a module may also say
# `pytestmark = pytest.mark.serial`. A second local user is no reason (helpers.LocalUser queues useradd).
# A module whose runs and loaders only serve to check what was answered (bytes, exit codes, files, refusals)
# says `pytestmark = pytest.mark.concurrent` (a test, `@pytest.mark.concurrent`): those run four at a time too
# (its netprof runs pass --wait: the run lock queues them behind each other). BPF stays serial there as well.
SERIAL_FIXTURES = frozenset({"standard_run", "message_run", "probed_run", "flame_run", "loader"})
SERIAL_NAMES = frozenset({"run_netprof", "netprof_cmd", "Loader"})


def _code_names(code: types.CodeType, strings: bool = True) -> set[str]:
    """Every global and attribute a function's code (nested code included) names, and with `strings` every
    string constant too (request.getfixturevalue("standard_run"))."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c, strings)
        elif strings and isinstance(c, str):
            names.add(c)
    return names


def _starts_processes(func, seen: set, wanted: frozenset) -> bool:
    code = getattr(func, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    if _code_names(code) & wanted:
        return True
    # Followed by name only, not by string: netprof_cli("run", ...) does not call a module's own run().
    scope = getattr(func, "__globals__", {})
    return any(isinstance(f := scope.get(n), types.FunctionType) and f.__module__ == func.__module__
               and _starts_processes(f, seen, wanted) for n in _code_names(code, strings=False))


def _uses(item, fixtures: frozenset, names: frozenset) -> bool:
    """The test, a fixture it uses, or a function of its own module either calls (transitively) uses one
    of `fixtures` or names one of `names`."""
    if fixtures & set(getattr(item, "fixturenames", ())):
        return True
    seen: set = set()
    if _starts_processes(getattr(item, "function", None), seen, fixtures | names):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(_starts_processes(d.func, seen, fixtures | names) for ds in defs for d in ds)


def pytest_collection_modifyitems(config, items):
    for item in items:
        bpf = _needs_bpf(item)
        if bpf:
            item.add_marker(pytest.mark.bpf)
        if _uses(item, E2E_FIXTURES, E2E_NAMES):
            item.add_marker(pytest.mark.e2e)
        measures = not item.get_closest_marker("concurrent") and _uses(item, SERIAL_FIXTURES, SERIAL_NAMES)
        if bpf or measures or item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def sps():
    """scipy.stats, for the tests that check a figure against it: imported by them only, not by every process that
    collects the suite (~1 s of CPU each: four workers, the second pass, test_tiers)."""
    from scipy import stats

    return stats


@pytest.fixture
def local_user():
    """A second local user, created for the test and removed after it (helpers.LocalUser)."""
    from helpers import LocalUser

    user = LocalUser()
    try:
        yield user
    finally:
        user.remove()
