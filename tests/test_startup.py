"""What keeps a run and a report quick (bench/startup.py measures it): scipy and matplotlib imported only
when needed, the report's plots drawn in forked children and reused by content, a run's drawing process
started (and its import done) before the run, and the probes' self-cost measured once per boot and cached."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest
from test_report import build_results

from netprof.probes import selfcost
from netprof.profiler import cli
from netprof.profiler.core import cache, procs
from netprof.profiler.model import stats
from netprof.profiler.report import plotset, report


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """netprof's cache in a directory of this test's (the real one is /var/cache/netprof)."""
    root = tmp_path / "cache"
    monkeypatch.setattr(cache, "ROOT", str(root))
    return root


def test_a_backend_imports_no_package_metadata_and_the_version_is_still_there():
    """Every cell starts a backend that imports the netprof package: its version is looked up (importlib.metadata,
    ~30 ms) only when asked for."""
    code = ("import sys, netprof.backends.selector_family; print('importlib.metadata' in sys.modules); "
            "import netprof, importlib.metadata as m; print(netprof.__version__ == m.version('netprof'))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.split() == ["False", "True"], out


def test_cli_report_and_their_statistics_import_neither_scipy_nor_matplotlib():
    """Not at import, and not when an interval, a paired estimate or a comparison's t-test is computed (tdist)."""
    code = ("import sys, netprof.profiler.cli, netprof.profiler.report.report, netprof.profiler.run.runner; "
            "from netprof.profiler.model import paired, stats; "
            "stats.summarize([1.0, 2.0, 4.0]); stats.compare_samples([1.0, 2.0, 3.0], [2.0, 3.5, 4.0], log=True); "
            "stats.compare_samples([1.0, 2.0, 3.0], [2.0, 3.5, 4.0]); "
            "paired.estimate([0.1, 0.2, 0.15, 0.3]).p(); paired.estimate([0.1, 0.2, 0.15]).half(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("argv, says", [
    (["ab", "selector", "asyncio_sock", "--fail-if", "slowr:5%"], "--fail-if 'slowr:5%' is not understood"),
    (["ab", "selector", "no_such_backend"], "unknown backend 'no_such_backend'"),
    (["ab", "selector", "asyncio_sock", "--window", "0.01"], "--window 0.01 is out of range"),
    (["knee", "selector", "--slo", "p99<5ms", "--steps", "99"], "--steps 99 is out of range"),
    (["run", "selector", "--msize", "0"], "--msize 0 is out of range"),
    (["flamegraph", "no_such_backend"], "unknown backend 'no_such_backend'"),
    (["report", "/nonexistent"], "/nonexistent: no such directory"),
    (["compare", "/", "/nonexistent"], "/nonexistent: no such file or directory"),
    (["compare", "/", "/", "--fail-if", "slowr:5%"], "--fail-if 'slowr:5%' is not understood"),
])
def test_refused_input_is_answered_before_pandas_is_imported(argv, says):
    """A command refused for its input says why without importing pandas (~0.35 s of CPU here): ab's plan, knee's,
    run's, compare's inputs and the rules of --fail-if are light (model/metrics.py names the judged figures without
    computing them).
    Checked by the interpreter's own import log, nothing begun ahead (NETPROF_NO_PREFETCH)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "netprof.profiler", *argv], capture_output=True,
                         text=True, cwd="/", timeout=60, env={**os.environ, "NETPROF_NO_PREFETCH": "1"})
    log = [ln for ln in out.stderr.splitlines() if ln.startswith("import time:")]
    said = [ln for ln in out.stderr.splitlines() if not ln.startswith("import time:")]
    assert out.returncode == 2 and len(said) == 1 and says in said[0], out.stderr[-2000:]
    assert any(ln.rstrip().endswith("| netprof.profiler.cli") for ln in log), "the import log shows no CLI"
    assert not [ln for ln in log if ln.split("|")[-1].strip().split(".")[0] == "pandas"]


def _fake_svg(name, cells, per_conn):
    return f"<svg>{name} {os.getpid()} {len(cells)}</svg>".encode()


def test_plots_drawn_in_children_and_reused_by_content(tmp_path, cache_root):
    cells = stats.aggregate(_df(tmp_path))
    first = plotset.start(cells, None, tmp_path, _fake_svg)
    with first:
        assert len(first.children) == plotset.CHILDREN
        forked = [pid for pid, _ in first.children]
        made = first.result()
    assert [p.name for p in made] == [n for n, _, _ in plotset.PLOTS]
    pids = {(tmp_path / p.path).read_text().split()[1] for p in made}
    assert str(os.getpid()) not in pids and len(pids) == plotset.CHILDREN  # drawn in the children, not here
    for pid in forked:  # every child reaped (this process may have others: the watchdog of earlier tests)
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

    def refuse(*a):
        raise AssertionError("drawn again: the cache was not used")

    again = plotset.start(cells, None, tmp_path / "other", refuse)
    assert again.children == []
    (tmp_path / "other").mkdir()
    assert [(p.name, p.data_uri) for p in again.result()] == [(p.name, p.data_uri) for p in made]

    changed = cells.copy()
    col = "mps_mean"
    changed.loc[changed.index[0], col] = np.nextafter(changed[col].iloc[0], np.inf)  # one value, one ulp
    assert plotset.key(changed, None) != plotset.key(cells, None)


def test_plots_a_child_could_not_draw_are_drawn_here(tmp_path, cache_root):
    parent = os.getpid()

    def only_here(name, cells, per_conn):
        if os.getpid() != parent:
            raise RuntimeError("a child fails")
        return _fake_svg(name, cells, per_conn)

    cells = stats.aggregate(_df(tmp_path))
    with plotset.start(cells, None, tmp_path, only_here) as pending:
        made = pending.result()
    assert len(made) == len(plotset.PLOTS)
    assert all((tmp_path / p.path).read_text().split()[1] == str(parent) for p in made)


def test_report_twice_same_plots_second_from_cache(tmp_path, cache_root, monkeypatch):
    d = build_results(tmp_path / "run")
    report.finish(d)
    svgs = {p.name: p.read_bytes() for p in (d / "plots").glob("*.svg")}
    assert len(list((cache_root / "plots").glob("*.json"))) == 1

    def refuse(*a):
        raise AssertionError("drawn again")

    monkeypatch.setattr(report, "_draw", refuse)
    report.finish(d)
    assert {p.name: p.read_bytes() for p in (d / "plots").glob("*.svg")} == svgs


def _gone(pid: int) -> bool:
    """`pid` was reaped by this process (or never was its child)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_warm_process_imports_first_then_draws_the_report_with_a_sibling(tmp_path, cache_root):
    cells = stats.aggregate(_df(tmp_path))
    with plotset.warm(_fake_svg, preload=["json"]) as warm:
        pid = warm.pid
        assert pid is not None and warm.ready(timeout=30)
        with plotset.start(cells, None, tmp_path, _fake_svg) as pending:
            assert [c for c, _ in pending.children] == [pid]  # no new child: the warm one took the job
            made = pending.result()
        assert _gone(pid)
    assert [p.name for p in made] == [n for n, _, _ in plotset.PLOTS]
    drawn_by = {p.name: (tmp_path / p.path).read_text().split()[1] for p in made}
    shares = plotset._shares([n for n, _, _ in plotset.PLOTS], plotset.WARM_SHARES)
    assert {drawn_by[n] for n in shares[0]} == {str(pid)}  # its own share
    helper = {drawn_by[n] for n in shares[1]}
    assert len(helper) == 1 and helper != {str(pid)} and str(os.getpid()) not in helper  # a sibling's
    assert plotset._warm is None


def test_warm_process_unused_or_other_draw_is_reaped_and_report_forks_its_own(tmp_path, cache_root):
    cells = stats.aggregate(_df(tmp_path))

    def other(name, c, p):
        return _fake_svg(name, c, p)

    with plotset.warm(_fake_svg, preload=[]) as warm:
        pid = warm.pid
        with plotset.start(cells, None, tmp_path, other) as pending:  # not the draw it was started for
            assert pid not in [c for c, _ in pending.children] and len(pending.children) == plotset.CHILDREN
            pending.result()
    assert pid is not None and _gone(pid)  # never given a job: ended at the block's end
    with pytest.raises(RuntimeError):
        with plotset.warm(_fake_svg, preload=[]) as warm:
            pid = warm.pid
            raise RuntimeError("the run failed")
    assert pid is not None and _gone(pid)


def test_warm_process_that_cannot_import_is_not_used(tmp_path, cache_root):
    cells = stats.aggregate(_df(tmp_path))
    with plotset.warm(_fake_svg, preload=["netprof_no_such_module"]) as warm:
        pid = warm.pid
        assert not warm.ready(timeout=30) and warm.pid is None and _gone(pid)
        with plotset.start(cells, None, tmp_path, _fake_svg) as pending:
            assert pid not in [c for c, _ in pending.children]
            assert len(pending.result()) == len(plotset.PLOTS)


def test_warm_process_still_importing_when_the_run_starts_is_killed(tmp_path, monkeypatch):
    (tmp_path / "netprof_slow_import.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t0 = time.monotonic()
    with plotset.warm(_fake_svg, preload=["netprof_slow_import"]) as warm:
        pid = warm.pid
        assert not warm.ready(timeout=0.3)  # never works on into the load: killed and reaped
        assert _gone(pid)
    assert time.monotonic() - t0 < 10


def test_warm_process_dies_with_a_killed_netprof(tmp_path):
    """SIGKILL runs no cleanup: the kernel ends the warm process (and a drawing sibling) itself."""
    code = textwrap.dedent("""
        import os, sys, time
        from netprof.profiler.report import plotset
        def draw(name, cells, per_conn):
            return b"<svg/>"
        with plotset.warm(draw, preload=[]) as warm:
            assert warm.ready(timeout=30)
            print(warm.pid, flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        warm_pid = int(proc.stdout.readline())
        assert procs.pid_alive(warm_pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while procs.pid_alive(warm_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not procs.pid_alive(warm_pid)
    finally:
        proc.kill()
        proc.wait()


def test_run_command_starts_the_warm_process_for_its_report(monkeypatch, tmp_path):
    """`netprof run` wraps the checks, the run and the report in plotset.warm with the report's draw; the
    flamegraph command and `run --no-report` (no report) start none."""
    seen = []

    def fake_execute(cfg, as_json, quiet=False, verbose=False, render_report=True):
        w = plotset._warm
        seen.append(None if w is None else (w.draw is report._draw, w.pid is not None, render_report))

    monkeypatch.setattr(cli, "_execute", fake_execute)
    from typer.testing import CliRunner

    runner = CliRunner()
    got = runner.invoke(cli.app, ["run", "selector", "-c", "10", "-d", "1", "-r", "1", "-o", str(tmp_path / "r")])
    assert got.exit_code == 0, got.output
    got = runner.invoke(cli.app, ["flamegraph", "selector", "-c", "10", "-d", "1", "-o", str(tmp_path / "f")])
    assert got.exit_code == 0, got.output
    got = runner.invoke(cli.app, ["run", "selector", "--no-report", "-c", "10", "-d", "1", "-r", "1",
                                  "-o", str(tmp_path / "n")])
    assert got.exit_code == 0, got.output
    assert seen == [(True, True, True), None, None] and plotset._warm is None


def _df(tmp_path):
    from netprof.profiler.model import results

    d = build_results(tmp_path / "rows")
    return results.load(d)[0]


class _Idle:
    """A probe set that attaches nothing: measure() still runs its real child processes."""
    syscall_time = False
    track_children = True

    def attach(self): pass
    def detach(self): pass
    def target(self, pid): pass


def test_selfcost_measured_once_per_boot(cache_root, monkeypatch):
    first = selfcost.cached(_Idle())
    assert first["source"] == "measured" and first["bare_ns"] > 10 and first["age_s"] == 0.0
    stored = cache_root / "probe-cost.json"
    assert stored.stat().st_uid == os.geteuid() and stored.stat().st_mode & 0o077 == 0

    calls = []
    monkeypatch.setattr(selfcost, "measure", lambda p: calls.append(p) or {"bare_ns": 1.0, "added_target_ns": 2.0,
                                                                           "added_bystander_ns": 3.0})
    again = selfcost.cached(_Idle())
    assert calls == [] and again["source"] == "cache" and again["bare_ns"] == first["bare_ns"]
    assert again["age_s"] >= 0 and again["measured_at"] == first["measured_at"]

    doc = json.loads(stored.read_text())  # another boot: measured again
    doc["key"]["boot_id"] = "0" * 32
    stored.write_text(json.dumps(doc))
    assert selfcost.cached(_Idle())["source"] == "measured" and len(calls) == 1
    assert selfcost.cached(_Idle(), refresh=True)["bare_ns"] == 1.0 and len(calls) == 2  # doctor
    assert selfcost.cached(_Idle())["source"] == "cache" and len(calls) == 2


def test_socket_wait_cost_measured_once_per_boot_and_a_failed_one_not_kept(cache_root, monkeypatch):
    """The socket-wait set's figure (~3 s: nine echo children) is kept per boot like the counting set's; the
    breakdown's is its own entry (other programs); a figure that failed is tried again by the next run."""
    from netprof.probes.sockwait import sockwait

    calls: list[str] = []
    results = iter([{"error": "OSError: boom"}, {"bare_ns": 5.0}, {"bare_ns": 6.0}])
    monkeypatch.setattr(sockwait, "measure_cost", lambda sw: calls.append("m") or next(results))
    sw = _Idle()
    assert sockwait.cached_cost(sw, "sockwait") == {"error": "OSError: boom", "source": "measured",
                                                    "measured_at": pytest.approx(time.time(), abs=60), "age_s": 0.0}
    assert not (cache_root / "sockwait-cost.json").exists()
    assert sockwait.cached_cost(sw, "sockwait")["source"] == "measured" and len(calls) == 2
    kept = sockwait.cached_cost(sw, "sockwait")
    assert kept["source"] == "cache" and kept["bare_ns"] == 5.0 and len(calls) == 2
    assert sockwait.cached_cost(sw, "breakdown")["bare_ns"] == 6.0 and len(calls) == 3
    doc = json.loads((cache_root / "breakdown-cost.json").read_text())
    assert doc["key"]["set"] == "breakdown" and doc["key"]["programs"] == selfcost.cache_key(sw)["programs"]


@pytest.mark.parametrize("program", ["counting/counting.bpf.c", "sockwait/sockwait.bpf.c",
                                     "breakdown/breakdown.bpf.h", "tree_filter.bpf.h"])
def test_a_changed_program_in_any_instrument_folder_changes_the_key(program, monkeypatch):
    """A cached cost holds for the programs that made it: a change to any probe's BPF source, in its own
    folder or shared, is a new key (a glob of the top folder alone once missed the counting set's)."""
    from pathlib import Path

    before = selfcost._programs()
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes",
                        lambda self: real(self) + (b"/* changed */" if self.as_posix().endswith(program) else b""))
    assert selfcost._programs() != before


def test_selfcost_cache_refused_when_writable_by_others(cache_root):
    cache_root.mkdir(mode=0o700)
    stored = cache_root / "probe-cost.json"
    key = selfcost.cache_key(_Idle())
    stored.write_text(json.dumps({"key": key, "measured_at": 1.0, "cost": {"bare_ns": 7.0}}))
    os.chmod(stored, 0o622)
    assert cache.read_bytes(str(stored)) is None
    os.chmod(stored, 0o600)
    assert json.loads(cache.read_bytes(str(stored)) or b"")["cost"]["bare_ns"] == 7.0


def test_no_cache_when_asked(cache_root, monkeypatch):
    monkeypatch.setenv("NETPROF_NO_CACHE", "1")
    assert cache.directory("plots") is None and not cache_root.exists()
    monkeypatch.delenv("NETPROF_NO_CACHE")
    assert cache.directory("plots") == str(cache_root / "plots")


def test_selfcost_of_the_real_counting_set_is_kept_for_the_next_run(bpf, cache_root):
    from netprof.probes import CountingProbes

    with CountingProbes(attached=False) as probes:
        fresh = selfcost.cached(probes, refresh=True)  # what `netprof doctor` does
        kept = selfcost.cached(probes)  # what the next probed run does
    assert fresh["source"] == "measured" and fresh["bare_ns"] > 10
    assert np.isfinite(fresh["added_target_ns"]) and np.isfinite(fresh["added_bystander_ns"])
    assert kept["source"] == "cache"
    assert {k: kept[k] for k in ("bare_ns", "added_target_ns", "added_bystander_ns")} == \
        {k: fresh[k] for k in ("bare_ns", "added_target_ns", "added_bystander_ns")}


# --- the `netprof` entry: slow starts begun before the CLI's imports (profiler/entry.py) -------------------

@pytest.mark.parametrize("args,compile_,draw,probe_set", [
    (["run", "selector"], True, True, None),
    (["run", "selector", "--no-probes"], False, True, None),
    (["run", "selector", "--no-report"], True, False, None),
    (["run", "selector", "-h"], False, False, None),
    (["run", "selector", "--breakdown"], True, True, "breakdown"),
    (["run", "selector", "--sockwait", "--no-report"], True, False, "sockwait"),
    (["run", "selector", "--sockwait", "--breakdown"], True, True, "breakdown"),
    (["run", "selector", "--breakdown", "--no-probes"], False, True, None),
    (["run", "selector", "--breakdown", "--server-host", "h"], False, False, None),
    (["watch", "--pid", "1"], False, False, "watch"),
    (["watch", "--help"], False, False, None),
    (["ab", "selector", "selector"], True, False, None),
    (["knee", "selector", "--slo", "p99<5ms"], True, False, None),
    (["report", "/tmp/x"], False, False, None),
    (["list"], False, False, None),
    ([], False, False, None),
])
def test_entry_guesses_what_the_command_will_need(args, compile_, draw, probe_set, monkeypatch):
    from netprof.profiler import entry

    monkeypatch.delenv(entry.NO_PREFETCH_ENV, raising=False)  # `make test`'s first pass sets it
    assert entry.counting_wanted(args) is compile_
    assert entry.report_wanted(args) is draw
    assert entry.probe_set_wanted(args) == probe_set
    monkeypatch.setenv(entry.NO_PREFETCH_ENV, "1")  # nothing begun ahead, whatever the command
    assert not entry.counting_wanted(args) and not entry.report_wanted(args) and entry.probe_set_wanted(args) is None


def test_entry_guesses_watchs_routes_as_the_cli_reads_them():
    """The watch set compiled ahead is the one watch loads: --routes as typed, else the CLI's default, which is
    the probe set's (a compile with other flags would be work nobody takes)."""
    import typer.main

    from netprof.probes.watch import watch
    from netprof.profiler import cli, entry

    command = typer.main.get_command(cli.app).commands["watch"]  # type: ignore[attr-defined]
    default = next(p.default for p in command.params if p.name == "routes")
    assert default == watch.ROUTES
    assert entry._routes(["watch", "--pid", "1"]) is None
    assert entry._routes(["watch", "--routes", "128", "--pid", "1"]) == 128
    assert entry._routes(["watch", "--routes=16"]) == 16
    assert entry._routes(["watch", "--routes", "x"]) is None and entry._routes(["watch", "--routes"]) is None


def _with_prefetch() -> dict[str, str]:
    """The environment of a child that must begin the slow starts ahead (`make test`'s first pass turns
    them off for every command it runs: profiler/entry.py NO_PREFETCH_ENV)."""
    from netprof.profiler import entry

    return {k: v for k, v in os.environ.items() if k != entry.NO_PREFETCH_ENV}


def test_entry_begins_the_compile_and_the_drawing_process_before_importing_the_cli():
    """Run as `netprof run` with a bad backend (exit 2 after parsing): both were begun, the CLI not yet
    imported, the compile with the run's own flag."""
    code = textwrap.dedent("""
        import sys
        from netprof.profiler import entry
        from netprof.profiler.report import plotset
        from netprof.probes.counting import counting
        def seen(*what):  # printed at once: a refused command leaves with os._exit (entry._leave_refused)
            print(repr(what), flush=True)
        counting.prefetch = lambda syscall_time=False: seen("compile", syscall_time,
                                                            "netprof.profiler.cli" in sys.modules)
        plotset.begin = lambda draw, preload: seen("draw", draw.__name__, tuple(preload),
                                                   "netprof.profiler.cli" in sys.modules)
        sys.argv = ["netprof", "run", "no_such_backend", "--syscall-time"]
        entry.main()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60,
                         env=_with_prefetch())
    seen = [eval(line) for line in out.stdout.strip().splitlines()]
    assert seen == [("compile", True, False), ("draw", "_draw", report.DRAW_PRELOAD, False)], out.stderr
    assert out.returncode == 2


def test_refused_input_waits_for_nothing_begun_ahead_and_leaves_nothing(tmp_path):
    """The real entry, the compile and the drawing process begun: a refused `run` still says why in one
    line, exits 2 without waiting for the compile (~0.35 s of a CPU; seconds on a busy host), and leaves no
    drawing process and no private temp directory (its exit handler does not run: removed by hand)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "netprof"), "run", "no_such_backend"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
                            env={**_with_prefetch(), "TMPDIR": str(tmp)})
    kids: set[int] = set()
    while proc.poll() is None:  # the drawing process, while it lives (forked at once)
        with contextlib.suppress(psutil.Error):
            kids |= {k.pid for k in psutil.Process(proc.pid).children()}
        time.sleep(0.005)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.count("\n") == 1 and "unknown backend 'no_such_backend'" in err, err
    assert kids, "no drawing process was begun: the test saw nothing of what it checks"
    assert not [p for p in kids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert list(tmp.iterdir()) == []


def test_a_drawing_process_begun_early_is_adopted_by_the_run_block(tmp_path, cache_root):
    cells = stats.aggregate(_df(tmp_path))
    plotset.begin(_fake_svg, ["json"])
    early = plotset._warm
    assert early is not None and early.pid is not None
    early_pid = early.pid
    try:
        with plotset.warm(_fake_svg, preload=["json"]) as warm:
            assert warm is early  # no second fork
            assert warm.ready(timeout=30)
            with plotset.start(cells, None, tmp_path, _fake_svg) as pending:
                assert [c for c, _ in pending.children] == [early_pid]
                assert len(pending.result()) == len(plotset.PLOTS)
        assert plotset._warm is None
        plotset.begin(_fake_svg, ["json"])  # begun for another preload: ended, and the block forks its own
        other = plotset._warm
        pid = other.pid
        with plotset.warm(_fake_svg, preload=[]) as warm:
            assert warm is not other and _gone(pid)
    finally:
        if plotset._warm is not None:
            plotset._warm.close()
            plotset._warm = None


def test_probes_close_in_a_thread_after_every_cost_is_read():
    """runner.cost_and_close_meanwhile: costs in `meta` at once, the list emptied, the closing done by
    another thread that the caller joins."""
    import threading

    from netprof.profiler.run import runner

    closed_by = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def cost(self):
            return {f"{self.name}_cost": 1.0}

        def close(self):
            detached.wait(10)  # a detach waits for the kernel: here until the test says
            closed_by.append((self.name, threading.current_thread().name))

    # Returned before any close ended: those wait for `detached`, set only after the return (not a bound on the
    # clock: four tests at a time on a busy 2-CPU host may pause this one for longer than a close takes).
    detached = threading.Event()
    insts = [Fake("a"), Fake("b")]
    meta: dict = {}
    closing = runner.cost_and_close_meanwhile(insts, meta)
    assert closed_by == [] and meta == {"a_cost": 1.0, "b_cost": 1.0} and insts == []
    detached.set()
    closing.join(timeout=10)
    assert closed_by == [("a", "netprof-close-probes"), ("b", "netprof-close-probes")]
