"""Every expected failure is a NetprofError carrying its exit code (profiler/core/errors.py), and the CLI
leaves with that code and one line."""

from __future__ import annotations

import importlib
import os

import pytest

from helpers import run_netprof
from netprof.flamegraphs import session
from netprof.probes import ProbeError
from netprof.profiler.core import paths, procs
from netprof.profiler.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, NetprofError
from netprof.profiler.run.loader_client import LoaderError

pytestmark = pytest.mark.concurrent  # one-line errors and exit codes; its run passes --wait


@pytest.mark.parametrize("error, code", [
    (ProbeError("x"), EXIT_INTERNAL),  # after check_available said yes: unexpected, finished cells kept
    (procs.ProcessError("x"), EXIT_INTERNAL),
    (procs.LineTimeout("x"), EXIT_INTERNAL),
    (LoaderError("stall", "x"), EXIT_INTERNAL),
    (paths.LoaderMissingError("x"), EXIT_BAD_INPUT),
    (paths.UntrustedPathError("x"), EXIT_BAD_INPUT),
])
def test_expected_failures_carry_their_exit_code(error, code):
    assert isinstance(error, NetprofError) and error.exit_code == code
    assert isinstance(error, Exception) and not isinstance(error, (SystemExit, KeyboardInterrupt))


def test_the_watchdog_module_reaps_every_kind_of_leftover():
    """procs names the watchdog's module without importing it (procs is the leaf core): it must exist and
    run the reapers of procs, the flamegraph session and netns."""
    reap = importlib.import_module(procs.WATCHDOG_MODULE)
    assert set(reap.REAPERS) == {"temp files", "sampling scratch", "namespaces"}
    assert {procs.cleanup_stale, session.cleanup_stale} <= set(reap.REAPERS.values())


def test_a_non_executable_loader_is_one_line_exit_2(tmp_path):
    """paths.LoaderMissingError is bad input (exit 2), not netprof's own error (3), and the run ends
    before any cell: no 'finished cells kept' line, no traceback."""
    loader = tmp_path / "netprof-loader"
    loader.write_text("#!/bin/sh\nexit 0\n")
    loader.chmod(0o644)
    res = run_netprof("run", "selector", "-c", "2", "-d", "0.5", "-r", "1", "--warmup", "0", "--no-probes",
                      "--wait", "--out", str(tmp_path / "out"), env=os.environ | {"NETPROF_LOADER": str(loader)},
                      timeout=120)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and "NETPROF_LOADER" in lines[0] and "not an executable" in lines[0], res.stderr
    assert "Traceback" not in res.stderr + res.stdout
