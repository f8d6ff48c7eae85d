"""How tests/conftest.py sorts the suite: `make test-fast`'s tier (no `bpf`, no `e2e`), and `make test`'s two
passes (`serial` alone, the rest four at a time). Asked of pytest itself (`--collect-only`), on tests whose
nature is known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


# One collection, with the marks conftest gave each test, in place of one per -m expression (each costs the
# suite's collection, ~2.5 s of CPU in the first pass). The plugin runs after conftest's
# pytest_collection_modifyitems (collection_finish), so it sees the marks as `-m` would.
DUMP = """
import json, sys, pytest
class Dump:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("MARKS", json.dumps([item.nodeid, sorted({m.name for m in item.iter_markers()})]))
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[1]], plugins=[Dump()]))
"""


def _marks() -> dict[str, set[str]]:
    out = subprocess.run([sys.executable, "-c", DUMP, str(TESTS)], capture_output=True, text=True,
                         cwd=TESTS.parent, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    marks: dict[str, set[str]] = {}
    for line in out.stdout.splitlines():
        if line.startswith("MARKS "):
            nodeid, names = json.loads(line.removeprefix("MARKS "))
            marks.setdefault(nodeid.split("[")[0].removeprefix("tests/"), set()).update(names)
    return marks


def test_what_measures_runs_alone_and_the_rest_four_at_a_time():
    marks = _marks()
    serial = {n for n, m in marks.items() if "serial" in m}
    other = {n for n, m in marks.items() if "serial" not in m}
    fast = {n for n, m in marks.items() if not m & {"bpf", "e2e"}}
    assert serial and other and fast and not serial & other
    assert fast <= other  # the fast tier is a part of the first pass
    # measuring: a netprof run, the loader's timing, BPF, the shared runs, a test marked serial by
    # hand (in a `concurrent` module too)
    for name in ("test_breakdown_run.py::test_parts_add_up_on_a_server_of_every_kind",
                 "test_loader.py::test_think_time_caps_the_rate",
                 "test_probes.py::test_selector_per_message",
                 "test_machine_busy.py::test_real_run_records_each_cells_load",
                 "test_hardening_env.py::test_the_next_cleanup_removes_a_dead_runs_private_directory_and_nothing_else",
                 "test_backends.py::test_thread_per_connection_stops_quickly_after_many_connections"):
        assert name in serial, name
    # checking answers only: backend servers on their own, a `concurrent` module's loader and runs (a second local
    # user among them), unit tests, refusals
    for name in ("test_hardening_env.py::test_a_python_planted_in_the_callers_pyenv_is_never_run",
                 "test_cli_polish.py::test_on_a_terminal_the_bar_shows_phase_and_last_rate",
                 "test_backends.py::test_echo_then_serve_on_until_sigterm",
                 "test_framing.py::test_message_framing_echoes_whole_messages_only",
                 "test_loader_http.py::test_http_pipelining",
                 "test_cli.py::test_bad_input_is_one_line_exit_2",
                 "test_own_server.py::test_bad_own_server_input_is_one_line_exit_2",  # "run" is no call of run()
                 "test_paired.py::test_a_known_ratio_is_recovered_with_a_t_interval",
                 "test_lab.py::test_down_removes_everything_and_twice_is_fine"):  # the one lab: one worker's
        assert name in other, name

