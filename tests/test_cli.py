"""Bad input: one line naming the fix, exit 2, nothing started (the fast tier: no run starts here)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import netprof
from helpers import netprof_cli, wait_no_children
from netprof.profiler.cli import EXAMPLE_LINES

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
    (["run", "selector", "-s", "0", "--no-probes"], "--msize 0 is out of range"),
    (["run", "selector", "--framing", "chunk", "--no-probes"], "--framing 'chunk' is not understood"),
    (["run", "selector", "--warmup-after", "accepted", "--no-probes"], "--warmup-after 'accepted' is not known"),
    (["flamegraph", "selector", "--warmup-after", "ready"], "--warmup-after 'ready' is not known"),
    (["run", "selector", "--io-uring", "maybe", "--no-probes"], "--io-uring 'maybe' is not understood"),
    (["run", "selector", "--warmup", "-1", "--no-probes"], "--warmup -1.0 is out of range"),
    (["run", "selector", "--probe-share", "2"], "is out of range: use 0.0 … 1.0"),
    (["run", "selector", "--pin", "maybe", "--no-probes"], "--pin 'maybe' is not understood"),
    (["run", "selector", "--backend-cpu", "4096", "--no-probes"], "CPU 4096 is not available"),
    (["run", "selector", "--loader-cpus", "x", "--no-probes"], "--loader-cpus 'x' is not a CPU list"),
    (["run", "selector", "--loader-threads", "0", "--no-probes"], "0 is out of range: use 1 … 64"),
    (["run", "prefork", "--workers", "0", "--no-probes"], "--workers 0 is out of range"),
    (["run", "selector", "--remote", "ssh", "--no-probes"], "--remote 'ssh' is not known"),
    (["run", "selector", "--netem", "delay=1", "--no-probes"], "--netem needs --remote netns"),
    (["run", "selector", "--sources", "10.0.0.1", "--no-probes"], "10.0.0.1 is not a loopback address"),
    (["run", "selector", "--protocol", "gopher", "--no-probes"], "--protocol 'gopher' is not known"),
    (["run", "selector", "--protocol", "http", "--no-probes"], "--protocol http needs your own server"),
    (["run", "--cmd", "no-such-server-xyz {port}", "--no-probes"], "'no-such-server-xyz' is not found on the PATH"),
    (["run", "--cmd", "true {port}", "--env", "NOEQUALS", "--no-probes"], "--env 'NOEQUALS' is not NAME=VALUE"),
    (["run", "--attach", "99999999", "--target", "127.0.0.1:1", "--no-probes"], "--attach 99999999: no such process"),
    (["run", "selector", "--target", "127.0.0.1:1", "--no-probes"], "--target is for --attach"),
    (["run", "selector", "--name", "x", "--no-probes"], "more --name than --cmd/--attach"),
    (["run", "selector", "--work", "spin:-3", "--no-probes"], "bad --work 'spin:-3'"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a[:4]) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(args, expected, tmp_path):
    res = netprof_cli(*args, "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert expected in lines[0]
    assert not (tmp_path / "out").exists(), "nothing may start on bad input"
    assert not wait_no_children(timeout=2)


# What the parser refuses (typer's click) is netprof's one line too, not click's usage, hint and error on four.
USAGE = [
    (["run", "selector", "--bogus"], "No such option: --bogus (Possible options: "),
    (["run", "selector", "-c"], "Option '-c' requires an argument; 'netprof run -h' lists what it takes"),
    (["report"], "Missing argument 'DIR'; 'netprof report -h' lists what it takes"),
    (["knee", "selector"], "Missing option '--slo'; 'netprof knee -h'"),
    (["watch", "--pid", "abc"], "Invalid value for '--pid'"),
    (["bogus"], "No such command 'bogus'; 'netprof -h' lists what it takes"),
    (["run", "selector", "--slo", "p99<5ms"], "netprof run has no --slo: netprof knee takes it"),
    (["watch", "--port", "1", "-c", "10"], "netprof watch has no -c: netprof run, flamegraph, ab and knee take it"),
    (["flamegraph", "selector", "--cmd", "x"], "own server's flamegraphs: netprof run --cmd TEMPLATE --flamegraph"),
]


@pytest.mark.parametrize("args,expected", USAGE, ids=[" ".join(a[:3]) for a, _ in USAGE])
def test_what_the_parser_refuses_is_one_line_exit_2(args, expected):
    res = netprof_cli(*args)
    assert (res.returncode, res.stdout, res.stderr.count("\n")) == (2, "", 1), res.stderr
    assert res.stderr.startswith("netprof: ") and expected in res.stderr, res.stderr


def test_netprof_alone_shows_its_help():
    res = netprof_cli()
    assert res.returncode == 2 and "Usage: netprof [OPTIONS] COMMAND" in res.stdout + res.stderr


def test_unknown_backend_lists_known_ones():
    res = netprof_cli("run", "nope", "--no-probes")
    assert "selector" in res.stderr and "uvloop_sock" in res.stderr


def test_version_and_help():
    name, version, source = netprof_cli("--version").stdout.split()
    assert (name, version, source) == ("netprof", netprof.__version__, f"({netprof.__source__})")
    # The commit the installed build came from (CMakeLists.txt, `git describe --always --dirty`), checked against
    # git itself where the tree is CI's clean clone, built by `make setup` at its HEAD: elsewhere the tree may have
    # moved on since the install.
    assert re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", netprof.__source__), netprof.__source__
    if os.environ.get("CI"):
        tree = Path(__file__).resolve().parents[1]
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        assert head.startswith(netprof.__source__), (head, netprof.__source__)
    helptext = netprof_cli("--help").stdout
    assert "Examples" in helptext and "netprof run uvloop_sock" in helptext


def test_help_examples_stay_whole_at_80_columns():
    """Issue 51: at 80 columns no example's comment is cut in two: each is a line of its own, above its
    command, and every line of the help fits."""
    helptext = netprof_cli("--help", env={**os.environ, "COLUMNS": "80"}).stdout
    lines = helptext.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    for what, cmd in EXAMPLE_LINES:
        at = lines.index(f"    # {what}")
        assert lines[at + 1] == f"    {cmd}", lines[at:at + 2]


def test_list_shows_seed_backends():
    out = netprof_cli("list").stdout
    for name in ("asyncio", "asyncio_proto", "asyncio_sock", "uvloop", "uvloop_proto", "uvloop_sock",
                 "gevent", "selector", "thread", "cpp_epoll", "cpp_poll", "cpp_th", "cpp_uring"):
        assert name in out
    assert "unfair" not in out  # test-only backends are hidden by default


OTHER_COMMANDS = [
    (["report", "/nonexistent_netprof_dir"], "no such directory; give a results directory"),
    (["compare", "/nonexistent_netprof_a", "/nonexistent_netprof_b"], "no such file or directory"),
    (["flamegraph", "diff", "/nonexistent_a.folded", "/nonexistent_b.folded"], "no such folded-stacks file"),
]


@pytest.mark.parametrize("args,expected", OTHER_COMMANDS, ids=[a[0] for a, _ in OTHER_COMMANDS])
def test_other_commands_refuse_a_missing_input_in_one_line(args, expected):
    res = netprof_cli(*args)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], res.stderr


def test_report_of_a_directory_without_results_is_one_line_exit_2(tmp_path):
    res = netprof_cli("report", str(tmp_path))
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().endswith("holds no results.parquet: is it a netprof results directory?"), res.stderr
