"""netprof runs as root, often with the caller's environment (`sudo -E`, `env_keep+=HOME`): nothing the
caller's HOME, PATH or TMPDIR point at — a pyenv, an interpreter cache, user site-packages, ~/.cargo/bin,
a matplotlibrc, a temp directory — may make root run code, read a file for the caller or write into
the caller's home (issue 31, item 1). Every attack is planted by a real second local user (`local_user`)
and netprof runs as root with the environment `sudo -E` would leave."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from helpers import backend_of, netprof_cmd, require, run_netprof, wait_no_watchdog_reaping, wait_until_empty
from netprof.profiler.core import procs
from netprof.profiler.run import interpreters

# The variables that would point root elsewhere than the caller's HOME (the machine's own, which
# `sudo -E` from a user would not carry): removed so the caller's HOME is what is tested.
_ROOTS_OWN = ("PYENV_ROOT", "NETPROF_CACHE", "TMPDIR", "MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
pytestmark = pytest.mark.concurrent  # what root runs, reads and writes; no probes, runs pass --wait
SMALL_RUN = ("selector", "-c", "2", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes", "--wait")


def _sudo_env(user, **extra: str) -> dict[str, str]:
    """root's environment after `sudo -E` by `user`: the caller's HOME and SUDO_*, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in _ROOTS_OWN}
    return env | user.sudo_env() | extra


def _plant(user, path: str, text: str, mode: int = 0o755) -> str:
    """`user` writes `path` (and the directories to it) in its home, as that user."""
    res = user.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"', "sh", path,
                    f"{mode:o}"], input=text)
    assert res.returncode == 0, res.stderr
    return path


def _marker_script(marker: Path) -> str:
    """A program that, if anyone runs it, appends its uid to `marker` (only root can write there)."""
    return f'#!/bin/sh\necho "ran as uid $(id -u): $0" >> {marker}\nexit 1\n'


def _as_root(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`code` in netprof's interpreter as root with `env` (not through the CLI, which resets HOME:
    the library's own checks are what is tested)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env, cwd="/")


def _pyenv_313() -> str:
    """A real CPython 3.13 of root's pyenv (the interpreters a user would plant a twin of)."""
    try:
        return interpreters.resolve("3.13")
    except interpreters.InterpreterError as e:
        require(False, f"pyenv's CPython 3.13 ({e})")
        raise


def _root_files(home: str) -> list[str]:
    """Entries under `home` owned by root (home itself aside)."""
    found = []
    for d, dirs, files in os.walk(home):
        for name in dirs + files:
            path = os.path.join(d, name)
            if os.lstat(path).st_uid == 0:
                found.append(path)
    return found


# ------------------------------------------------------------------------------------------------
# pyenv, the interpreter cache and user site-packages under the caller's HOME


def test_a_python_planted_in_the_callers_pyenv_is_never_run(tmp_path, local_user):
    """HOME=/home/u, no PYENV_ROOT: pyenv's fallback ~/.pyenv was the caller's, and `--python 3.13.9`
    ran the python3 planted there as root."""
    marker = tmp_path / "ran"
    planted = _plant(local_user, f"{local_user.home}/.pyenv/versions/3.13.9/bin/python3", _marker_script(marker))
    env = _sudo_env(local_user)

    found = _as_root("""
        from netprof.profiler.run import interpreters
        print(interpreters.pyenv_versions())
        try:
            print(interpreters.resolve("3.13.9"))
        except interpreters.InterpreterError as e:
            print("refused:", e)
        """, env)
    assert found.returncode == 0, found.stderr
    assert planted not in found.stdout and local_user.home not in found.stdout, found.stdout

    res = run_netprof("run", *SMALL_RUN, "--python", "3.13.9", "--out", str(tmp_path / "out"), env=env)
    assert not marker.exists(), f"the planted python ran: {marker.read_text()}"
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "--python 3.13.9" in lines[0], res.stderr


def test_an_environment_planted_in_the_callers_cache_is_never_run(tmp_path, local_user):
    """HOME=/home/u, no NETPROF_CACHE: ~/.cache/netprof/interpreters/<name>/.ready of the caller was
    taken as a prepared environment, and its bin/python ran the backends as root. The name is what
    prepare() computes for pyenv's 3.13 (anyone can: interpreter, netprof version, lock, sources)."""
    base = _pyenv_313()
    info = interpreters.inspect(base)
    name = f"{info['implementation']}-{info['version']}-{interpreters._fingerprint(info)}"
    env_dir = f"{local_user.home}/.cache/netprof/interpreters/{name}"
    marker = tmp_path / "ran"
    _plant(local_user, f"{env_dir}/bin/python", _marker_script(marker))
    _plant(local_user, f"{env_dir}/.ready", json.dumps(info | {"executable": base}), 0o644)

    res = _as_root("""
        from netprof.profiler.core import procs
        from netprof.profiler.run import interpreters
        try:
            it = interpreters.prepare("3.13")
        except interpreters.InterpreterError as e:
            print("refused:", e)
        else:
            print("using", it.python)
            procs.run([it.python, "-c", "pass"], timeout=30)  # what a run does next: start a backend with it
        """, _sudo_env(local_user, PYENV_ROOT=str(Path(base).parents[3])))
    assert res.returncode == 0, res.stderr
    assert not marker.exists(), f"the planted environment's python ran: {marker.read_text()}"
    assert res.stdout.startswith("refused: interpreter cache") and local_user.home in res.stdout, res.stdout
    assert not _root_files(local_user.home), "root wrote into the caller's cache"


def test_a_pth_in_the_callers_user_site_does_not_run_when_inspecting(tmp_path, local_user):
    """inspect() (run, doctor) started the interpreter with the caller's HOME and without -I: a .pth in
    ~/.local/lib/python3.X/site-packages ran as root."""
    base = _pyenv_313()
    version = interpreters.inspect(base)["version"].rsplit(".", 1)[0]
    marker = tmp_path / "ran"
    _plant(local_user, f"{local_user.home}/.local/lib/python{version}/site-packages/zz-netprof.pth",
           f"import os; open({str(marker)!r}, 'a').write('pth ran as uid %d' % os.getuid())\n", 0o644)
    env = _sudo_env(local_user)
    env.pop("PYTHONUSERBASE", None)

    res = _as_root("from netprof.profiler.run import interpreters; "
                   f"print(interpreters.inspect({base!r})['version'])", env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == interpreters.inspect(base)["version"]
    assert not marker.exists(), marker.read_text()


# ------------------------------------------------------------------------------------------------
# inferno from the caller's ~/.cargo/bin or PATH


def test_inferno_is_not_taken_from_the_callers_cargo_or_path(tmp_path, local_user):
    """inferno_binary() fell back to ~/.cargo/bin of the caller's HOME, and took the first PATH hit
    (sudo -E keeps the caller's PATH): `flamegraph diff` ran the caller's inferno-diff-folded as root."""
    marker = tmp_path / "ran"
    # The real inferno is also in /usr/local/bin here, which the fallback checks before ~/.cargo/bin: a
    # name only ~/.cargo/bin has exercises that fallback, as on a machine with inferno from cargo alone.
    only_cargo = "inferno-netprof-test"
    _plant(local_user, f"{local_user.home}/.cargo/bin/{only_cargo}", _marker_script(marker))
    res = _as_root(f"from netprof.flamegraphs import render; print(render.inferno_binary({only_cargo!r}))",
                   _sudo_env(local_user, PATH="/usr/bin:/bin"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "None", res.stdout

    # PATH: the caller's ~/bin first, then the machine's (where the real inferno is).
    require(shutil.which("inferno-diff-folded") is not None, "inferno (make setup)")
    for name in ("inferno-diff-folded", "inferno-flamegraph"):
        _plant(local_user, f"{local_user.home}/bin/{name}", _marker_script(marker))
    # The inputs are the caller's: netprof reads them as root for them (results.read_named_file).
    a = _plant(local_user, f"{local_user.home}/a.folded", "main;work 10\nmain;idle 5\n", 0o644)
    b = _plant(local_user, f"{local_user.home}/b.folded", "main;work 20\nmain;idle 5\n", 0o644)
    env = _sudo_env(local_user, PATH=f"{local_user.home}/bin:{os.environ['PATH']}")
    res = run_netprof("flamegraph", "diff", str(a), str(b), "-o", str(tmp_path / "diff.svg"), env=env, timeout=120)
    assert not marker.exists(), f"the caller's inferno ran: {marker.read_text()}"
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "diff.svg").read_text().lstrip().startswith("<?xml")


# ------------------------------------------------------------------------------------------------
# matplotlib's config and caches


@pytest.fixture(scope="module")
def small_results(tmp_path_factory) -> Path:
    """One small real run's results directory (read-only: copy it first)."""
    out = tmp_path_factory.mktemp("envrun") / "run"
    res = run_netprof(*("run", *SMALL_RUN, "--out", str(out)), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def test_report_reads_no_matplotlibrc_and_writes_nothing_in_the_callers_home(tmp_path, local_user, small_results):
    """matplotlib took its config and cache directories from the caller's HOME: root read the
    caller's ~/.config/matplotlib/matplotlibrc (here a link to a root-only file, whose lines came
    back in matplotlib's warnings) and left root-owned caches in ~/.cache/matplotlib. Now it uses
    a persistent root-owned MPLCONFIGDIR, where the font cache stays."""
    secret = tmp_path / "root-only"
    secret.write_text("ROOT-ONLY-SECRET: 1\n")
    secret.chmod(0o600)
    link = local_user.run(["sh", "-c", f"mkdir -p ~/.config/matplotlib && ln -s {secret} ~/.config/matplotlib/"
                                       "matplotlibrc"])
    assert link.returncode == 0, link.stderr
    results = tmp_path / "run"
    shutil.copytree(small_results, results)

    # NETPROF_NO_CACHE: plots drawn now (a cached set would spare matplotlib's import, and the test)
    res = run_netprof("report", str(results), env=_sudo_env(local_user, NETPROF_NO_CACHE="1"), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ROOT-ONLY-SECRET" not in res.stdout + res.stderr
    assert not _root_files(local_user.home), "root wrote into the caller's home"
    assert (results / "plots").is_dir() and any((results / "plots").iterdir())
    from netprof.profiler.core import rootenv

    st = os.stat(rootenv.MATPLOTLIB_DIR)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    assert glob.glob(os.path.join(rootenv.MATPLOTLIB_DIR, "fontlist-*.json")), "no font cache kept"


def test_report_reads_no_matplotlibrc_from_the_working_directory(tmp_path, local_user, small_results):
    """matplotlib reads ./matplotlibrc before anything else, and sudo keeps the working directory:
    a `matplotlibrc` link to a root-only file in the user's directory, where the user runs `sudo
    netprof report`, came back line by line in matplotlib's warnings. Now matplotlib is imported from
    `/` (profiler/kit/mpl.py)."""
    secret = tmp_path / "root-only"
    secret.write_text("ROOT-ONLY-SECRET: 1\n")
    secret.chmod(0o600)
    link = local_user.run(["ln", "-s", str(secret), "matplotlibrc"])  # in the user's home, its cwd
    assert link.returncode == 0, link.stderr
    results = tmp_path / "run"
    shutil.copytree(small_results, results)

    res = run_netprof("report", str(results), env=_sudo_env(local_user, NETPROF_NO_CACHE="1"), cwd=local_user.home,
                      timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ROOT-ONLY-SECRET" not in res.stdout + res.stderr


# ------------------------------------------------------------------------------------------------
# TMPDIR: a private root-owned directory, in /tmp unless TMPDIR is root's or the invoking user's own


def _watch_run(tmp_path: Path, env: dict[str, str], places: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    """A small real run; while it runs, what netprof's pid names in `places` (path → (uid, mode)) and
    the TMPDIR its root children were given."""
    proc = subprocess.Popen(netprof_cmd("run", *SMALL_RUN, "--out", str(tmp_path / "out")), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict = {"entries": {}, "child_tmpdirs": set()}
    while proc.poll() is None:
        for place in places:
            for path in glob.glob(os.path.join(place, f"netprof-{proc.pid}-*")):
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                seen["entries"][path] = (st.st_uid, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode))
        try:
            netprof = psutil.Process(proc.pid)
            for child in netprof.children(recursive=True):
                # Forked but not yet exec'd, a child still shows netprof's own environment; exiting, none.
                environ = child.environ() if child.cmdline() != netprof.cmdline() else {}
                if environ:
                    seen["child_tmpdirs"].add(environ.get("TMPDIR"))
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), seen


@pytest.mark.parametrize("case", ["foreign-owner", "writable-by-others", "callers-own"])
def test_temp_files_go_to_a_private_root_directory(tmp_path, local_user, case):
    """TMPDIR of another user (`su` keeps it), or one others can write: ignored with one warning line,
    the temp directory is root's (0700) in /tmp. The invoking user's own 0700 TMPDIR: used for it.
    Root's children get the private directory as TMPDIR; it is gone when netprof exits."""
    tmpdir = Path(local_user.home) / "tmp"
    mode = "777" if case == "writable-by-others" else "700"
    assert local_user.run(["mkdir", "-m", mode, str(tmpdir)]).returncode == 0
    env = _sudo_env(local_user, TMPDIR=str(tmpdir))
    if case == "foreign-owner":
        for name in ("SUDO_UID", "SUDO_GID", "SUDO_USER"):
            env.pop(name)

    res, seen = _watch_run(tmp_path, env, ["/tmp", str(tmpdir)])
    assert res.returncode == 0, res.stderr[-2000:]
    where = str(tmpdir) if case == "callers-own" else "/tmp"
    private = [p for p, (uid, mode, is_dir) in seen["entries"].items()
               if os.path.dirname(p) == where and is_dir and (uid, mode) == (0, 0o700)]
    assert len(private) == 1, seen
    assert set(seen["entries"]) == set(private), f"netprof's temp entries outside its private dir: {seen}"
    assert seen["child_tmpdirs"] == {private[0]}, seen
    assert not os.path.exists(private[0])
    warned = [ln for ln in res.stderr.splitlines() if "TMPDIR" in ln]
    if case == "callers-own":
        assert not warned, res.stderr
    else:
        assert len(warned) == 1 and f"ignoring TMPDIR={tmpdir}" in warned[0], res.stderr
    assert not os.listdir(tmpdir)


def _serving(pid: int) -> bool:
    return backend_of(pid) is not None


def test_a_sigkilled_runs_private_temp_directory_is_removed(tmp_path):
    """SIGKILL runs no atexit: the watchdog removes the private directory of the dead run."""
    proc = subprocess.Popen(netprof_cmd("run", "selector", "-c", "2", "-d", "5", "-r", "3", "--warmup", "0",
                                        "--no-probes", "--wait", "--out", str(tmp_path / "out")),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, found = time.monotonic() + 120, []  # --wait: another run may hold the run lock
        while proc.poll() is None and time.monotonic() < deadline and not (found and _serving(proc.pid)):
            found = glob.glob(f"/tmp/netprof-{proc.pid}-????????")
            time.sleep(0.05)
        assert found and _serving(proc.pid), f"no private temp directory while netprof served: {found}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert not wait_until_empty(lambda: [p for p in found if os.path.exists(p)], 20), found


# Serial, and after the watchdogs of ended runs are done: each cleans /tmp the same way when its run ends (up
# to WATCHDOG_GRACE_S later), and one that did so between the plant and the call below removed the dead run's
# directory first (`make test` here once: `removed` was empty).
@pytest.mark.serial
def test_the_next_cleanup_removes_a_dead_runs_private_directory_and_nothing_else(local_user):
    """What the watchdog could not remove (it was killed too): the next run and `netprof doctor`
    (procs.cleanup_stale) remove the private directory of a dead pid from /tmp, not one of a live
    netprof nor a look-alike the user made."""
    wait_no_watchdog_reaping()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = Path(f"/tmp/netprof-{dead.pid}-deadrun1"), Path(f"/tmp/netprof-{os.getpid()}-liverun1")
    users = f"/tmp/netprof-{dead.pid}-userdir1"
    try:
        for d in (stale, live):
            d.mkdir(mode=0o700)
            (d / "scratch").write_text("x")
        assert local_user.run(["mkdir", users]).returncode == 0
        removed = procs.cleanup_stale()
        assert str(stale) in removed and not stale.exists()
        assert live.exists() and os.path.exists(users) and users not in removed
    finally:
        for d in (stale, live, Path(users)):
            shutil.rmtree(d, ignore_errors=True)
