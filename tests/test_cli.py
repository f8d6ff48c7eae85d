"""Bad input: one line naming the fix, exit 2, nothing started."""

from __future__ import annotations

import pytest

from helpers import run_netprof, wait_no_children

BAD = [
    (["run", "no_such_backend", "--no-probes"], "unknown backend 'no_such_backend'"),
    (["run", "selector", "-c", "30000", "--no-probes"], "ulimit -n"),
    (["run", "selector", "-c", "0", "--no-probes"], "at least 1"),
    (["run", "selector", "-c", "10,abc", "--no-probes"], "comma list"),
    (["run", "selector", "-d", "0", "--no-probes"], "--duration 0.0 is out of range"),
    (["run", "selector", "-r", "0", "--no-probes"], "--rounds 0 is out of range"),
    (["run", "selector", "--pipeline", "5000", "--no-probes"], "--pipeline 5000 is out of range"),
    (["run", "selector", "--work", "nap:5", "--no-probes"], "bad --work 'nap:5'"),
    (["run", "selector", "--think", "poisson", "--no-probes"], "--think 'poisson' is not understood"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a[:3]) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(args, expected, tmp_path):
    res = run_netprof(*args, "--out", str(tmp_path / "out"), timeout=60)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert expected in lines[0]
    assert not (tmp_path / "out").exists(), "nothing may start on bad input"
    assert not wait_no_children(timeout=2)


def test_unknown_backend_lists_known_ones():
    res = run_netprof("run", "nope", "--no-probes")
    assert "selector" in res.stderr and "uvloop_sock" in res.stderr


def test_version_and_help():
    assert run_netprof("--version").stdout.startswith("netprof ")
    helptext = run_netprof("--help").stdout
    assert "Examples" in helptext and "netprof run uvloop_sock" in helptext


def test_list_shows_seed_backends():
    out = run_netprof("list").stdout
    for name in ("asyncio", "asyncio_proto", "asyncio_sock", "uvloop", "uvloop_proto", "uvloop_sock",
                 "gevent", "selector", "thread", "cpp_epoll", "cpp_poll", "cpp_th"):
        assert name in out
    assert "unfair" not in out  # test-only backends are hidden by default
