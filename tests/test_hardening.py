"""netprof runs as root: nothing a local user plants (modules in the cwd, links in /tmp, an out
directory, environment variables) may make it run code or write through a link; two runs do not
collide; a killed run's leftovers are removed (issue 16, items 1, 3-8, 13)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from helpers import netprof_cmd, require, require_bpf, require_tool, run_netprof, wait_no_children, wait_until_empty
from netprof.flamegraphs import jitdump, oncpu
from netprof.flamegraphs import session as flame_session
from netprof.profiler.core import atomic, paths, procs, runlock
from netprof.profiler.core.errors import InputError
from netprof.profiler.model.results import ResultsStore
from netprof.profiler.run import interpreters

NOBODY = 65534
PLANTED = ("random", "socket", "selectors", "argparse")


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert text and "\n" not in text, repr(text)
    return text


def _plant_modules(where: Path, marker: Path) -> None:
    """Modules that, if imported, leave `marker` behind (and then break the importer)."""
    for name in PLANTED:
        (where / f"{name}.py").write_text(
            f"import os\nopen({str(marker)!r}, 'a').write('{name} as uid %d ' % os.getuid())\n"
            "raise SystemExit('planted module imported')\n")


def _nobody(path: Path) -> Path:
    os.chown(path, NOBODY, NOBODY)
    return path


@pytest.fixture
def root_only():
    require(os.geteuid() == 0, "root (the checks are about files of other users)")


# ------------------------------------------------------------------------------------------------
# Item 1: every child runs in a fixed cwd, with no cwd or PYTHONPATH on its sys.path


@pytest.mark.concurrent  # what the run imports, refuses or ignores; no probes, the run passes --wait
def test_planted_modules_in_cwd_are_not_imported_by_a_run(tmp_path):
    """A real run started from a directory holding random.py/socket.py/selectors.py (the modules a
    backend imports first): none of them runs, and the run succeeds."""
    planted, marker = tmp_path / "cwd", tmp_path / "imported"
    planted.mkdir()
    _plant_modules(planted, marker)
    res = subprocess.run(netprof_cmd("run", "selector", "-c", "2", "-d", "0.5", "-r", "1", "--warmup", "0",
                                     "--no-probes", "--wait", "--out", str(tmp_path / "out")),
                         cwd=planted, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not marker.exists(), f"a planted module ran: {marker.read_text()}"
    assert len(pd.read_parquet(tmp_path / "out" / "results.parquet")) == 1
    assert not wait_no_children()


def test_python_children_ignore_cwd_and_pythonpath(tmp_path, monkeypatch):
    """`python -c` and `python -m` (the TUN forwarder's form) children of spawn(): neither the caller's
    cwd nor PYTHONPATH/PYTHONSTARTUP reach their sys.path."""
    planted, marker = tmp_path / "cwd", tmp_path / "imported"
    planted.mkdir()
    _plant_modules(planted, marker)
    monkeypatch.chdir(planted)
    monkeypatch.setenv("PYTHONPATH", str(planted))
    monkeypatch.setenv("PYTHONSTARTUP", str(planted / "random.py"))
    probe = "import json, os, random, sys; print(json.dumps([os.getcwd(), sys.path]))"
    with procs.ProcessGroup() as group:
        child = group.spawn("probe", [sys.executable, "-c", probe])
        cwd, path = json.loads(child.readline(30))
        forwarder = group.spawn("netem-forwarder",
                                [sys.executable, "-m", "netprof.profiler.run.link.netns", "forward", "--help"])
        assert forwarder.readline(30) is not None
        assert forwarder.popen.wait(30) == 0, forwarder.stderr_tail()
    assert cwd == procs.SAFE_CWD
    assert str(planted) not in path and "" not in path, path
    assert not marker.exists(), marker.read_text()


def test_run_helper_uses_the_same_rules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    out = procs.run([sys.executable, "-c", "import os, sys; print(os.getcwd(), os.environ.get('PYTHONPATH'))"],
                    timeout=30)
    assert out.stdout.split() == [procs.SAFE_CWD, "None"]


# ------------------------------------------------------------------------------------------------
# Item 3: /tmp/perf-PID.map, /tmp/jit-PID.dump, jitted-*.so


FAKE_PID = 3_999_999  # above any pid in use here; the functions take the pid as a name only


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim"
    path.write_text("precious\n")
    yield path
    for template in (jitdump.PERF_MAP, jitdump.JIT_DUMP):
        Path(template.format(pid=FAKE_PID)).unlink(missing_ok=True)


@pytest.mark.parametrize("template", [jitdump.PERF_MAP, jitdump.JIT_DUMP])
def test_reserving_a_perf_file_refuses_a_planted_link(victim, template):
    """Called directly with a fake pid (a real mixed flamegraph is too heavy to race a link into):
    what procs.spawn does for a `-X perf`/`-X perf_jit` child between fork and exec."""
    planted = Path(template.format(pid=FAKE_PID))
    planted.symlink_to(victim)
    with pytest.raises(jitdump.UnsafeFileError) as e:
        jitdump.reserve(str(planted))
    assert "symlink" in _one_line(e.value) and str(planted) in str(e.value)
    assert victim.read_text() == "precious\n"
    jitdump.remove_reserved(FAKE_PID)  # leaves what it did not create alone
    assert planted.is_symlink()


def test_reserving_refuses_another_users_file_and_reuses_our_own(victim, root_only):
    planted = Path(jitdump.PERF_MAP.format(pid=FAKE_PID))
    planted.write_text("someone else's\n")
    _nobody(planted)
    with pytest.raises(jitdump.UnsafeFileError) as e:
        jitdump.reserve(str(planted))
    assert f"uid {NOBODY}" in _one_line(e.value)
    os.chown(planted, 0, 0)  # a leftover of ours (a killed run): truncated and reused
    jitdump.reserve(str(planted))
    assert planted.read_text() == "" and planted.stat().st_mode & 0o077 == 0


def test_spawn_refuses_to_start_a_perf_child_over_a_planted_link(victim, tmp_path, monkeypatch):
    """spawn() itself: the child is not started and the reason is one line (the template is moved to
    a fixed name so the link can be planted before the pid is known)."""
    planted = tmp_path / "perf-child.map"
    planted.symlink_to(victim)
    monkeypatch.setattr(jitdump, "perf_files", lambda argv, env: (str(planted),))
    with pytest.raises(procs.ProcessError) as e:
        procs.spawn("backend-x", [sys.executable, "-X", "perf", "-c", "pass"])
    assert "symlink" in _one_line(e.value) and "backend-x" in str(e.value)
    assert victim.read_text() == "precious\n"


def test_spawn_creates_the_perf_files_of_a_perf_child():
    assert jitdump.perf_files(["python3.13", "-X", "perf_jit", "-m", "x"], {}) == (jitdump.PERF_MAP, jitdump.JIT_DUMP)
    assert jitdump.perf_files(["python3", "-m", "x"], {"PYTHONPERFSUPPORT": "1"})
    assert jitdump.perf_files(["python3", "-m", "x"], {}) == ()
    proc = procs.spawn("perf-child", [sys.executable, "-X", "perf", "-c", "import time; time.sleep(0.5)"])
    try:
        made = [Path(t.format(pid=proc.pid)) for t in (jitdump.PERF_MAP, jitdump.JIT_DUMP)]
        for path in made:
            st = path.lstat()
            assert path.is_file() and not path.is_symlink() and st.st_uid == os.geteuid(), path
    finally:
        proc.discard()
        jitdump.remove_reserved(proc.pid)
    assert not any(p.exists() for p in made)


def test_copying_a_jitdump_refuses_a_planted_link(victim):
    planted = Path(jitdump.dump_path(FAKE_PID))
    planted.symlink_to(victim)
    with pytest.raises(jitdump.UnsafeFileError) as e:
        jitdump.copy_dump(FAKE_PID, str(victim.parent))
    _one_line(e.value)
    assert victim.read_text() == "precious\n"


def test_perf_inject_writes_into_a_private_tmp(tmp_path, root_only):
    """`perf inject --jit` writes jitted-PID-N.so beside the jitdump in /tmp: in the namespace it runs
    in, /tmp is the round's private work dir, so nothing lands in (or through a link in) the real /tmp.
    Live processes are not visible there either: perf would otherwise open a live backend's jitdump
    through /proc/PID/ns/mnt, i.e. in the real /tmp."""
    private = tmp_path / "work"
    private.mkdir(mode=0o700)
    name = f"jitted-{FAKE_PID}-1.so"
    argv = oncpu.private_tmp_argv(str(private), ["/bin/sh", "-c", f"echo elf > /tmp/{name}; "
                                                 f"test ! -e /proc/{os.getpid()}/ns/mnt"])
    require(argv is not None, "util-linux unshare and mount")
    res = procs.run(argv, timeout=30)
    assert res.returncode == 0, res.stderr
    assert (private / name).read_text() == "elf\n"
    assert not os.path.lexists(f"/tmp/{name}")


# ------------------------------------------------------------------------------------------------
# Item 4: one atomic writer; out directories others control are refused


def test_atomic_write_is_not_redirected_by_links(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    # The old writer's predictable temp name, and the final name itself, both as planted links.
    (out / ".summary.json.tmp").symlink_to(victim)
    (out / "summary.json").symlink_to(victim)
    atomic.write_text(out / "summary.json", '{"ok": 1}')
    assert victim.read_text() == "precious\n"
    assert not (out / "summary.json").is_symlink() and (out / "summary.json").read_text() == '{"ok": 1}'
    assert (out / "summary.json").stat().st_mode & 0o777 == 0o600  # results are private (issue 31, item 3)
    assert sorted(p.name for p in out.iterdir()) == [".summary.json.tmp", "summary.json"]


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    target = tmp_path / "results.csv"
    atomic.write_text(target, "old\n")
    with pytest.raises(RuntimeError):
        with atomic.open_atomic(target) as f:
            f.write("half")
            raise RuntimeError("writer died")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


@pytest.mark.parametrize("make, expect", [
    (lambda d: Path("/proc/nope"), "/proc"),
    (lambda d: (d / "file").write_text("x") and d / "file", "existing file"),
    (lambda d: _nobody(_mkdir(d / "theirs")), f"owned by uid {NOBODY}"),
    (lambda d: _nobody(_mkdir(d / "theirs")) / "run", f"owned by uid {NOBODY}"),
    (lambda d: _chmod(_mkdir(d / "open"), 0o777), "writable by group or others"),
    (lambda d: _chmod(_mkdir(d / "shared"), 0o1777), "writable by group or others"),
    (lambda d: _link(d / "link", _mkdir(d / "mine")), f"symlink owned by uid {NOBODY}"),
])
def test_out_dir_checker_refuses_with_one_line(tmp_path, root_only, make, expect):
    with pytest.raises(InputError) as e:
        atomic.check_out_dir(make(tmp_path))
    assert expect in _one_line(e.value) and str(e.value).startswith("--out ")


def test_out_dir_checker_accepts_own_dirs_and_new_ones_under_tmp(tmp_path):
    atomic.check_out_dir(tmp_path)
    atomic.check_out_dir(tmp_path / "new" / "run")
    atomic.check_out_dir(Path("/tmp") / f"netprof-test-{os.getpid()}-not-created")  # sticky /tmp above it
    assert atomic.ensure_out_dir(tmp_path / "a" / "b").is_dir()


def test_results_store_refuses_a_dir_of_another_user(tmp_path, root_only):
    theirs = _nobody(_mkdir(tmp_path / "theirs"))
    with pytest.raises(InputError):
        ResultsStore(theirs)
    assert not list(theirs.iterdir())


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _chmod(path: Path, mode: int) -> Path:
    path.chmod(mode)
    return path


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    return link


# ------------------------------------------------------------------------------------------------
# Item 5: environment variables that redirect what root executes


@pytest.fixture
def loader_copy(tmp_path):
    src = paths.loader_binary()
    d = _mkdir(tmp_path / "bin")
    copy = d / "netprof-loader"
    copy.write_bytes(Path(src).read_bytes())
    copy.chmod(0o755)
    return copy


def test_netprof_loader_must_be_trusted(loader_copy, monkeypatch, root_only):
    monkeypatch.setenv("NETPROF_LOADER", str(loader_copy))
    assert paths.loader_binary() == str(loader_copy)
    _nobody(loader_copy)
    with pytest.raises(paths.UntrustedPathError) as e:
        paths.loader_binary()
    assert f"owned by uid {NOBODY}" in _one_line(e.value) and "NETPROF_LOADER" in str(e.value)
    os.chown(loader_copy, 0, 0)
    _nobody(loader_copy.parent)  # root's file in someone else's directory can be swapped
    with pytest.raises(paths.UntrustedPathError):
        paths.loader_binary()
    os.chown(loader_copy.parent, 0, 0)
    loader_copy.chmod(0o777)
    with pytest.raises(paths.UntrustedPathError) as e:
        paths.loader_binary()
    assert "writable by group or others" in str(e.value)


def test_netprof_cache_and_pyenv_root_must_be_trusted(tmp_path, monkeypatch, root_only):
    theirs = _nobody(_mkdir(tmp_path / "theirs"))
    monkeypatch.setenv("NETPROF_CACHE", str(theirs))
    with pytest.raises(interpreters.InterpreterError) as e:
        interpreters.cache_root()
    assert "NETPROF_CACHE" in _one_line(e.value)
    monkeypatch.setenv("PYENV_ROOT", str(theirs))
    with pytest.raises(interpreters.InterpreterError) as e:
        interpreters.pyenv_versions()
    assert "PYENV_ROOT" in _one_line(e.value)
    assert interpreters.available(), "netprof's own interpreter is still offered"


@pytest.mark.concurrent  # what the run imports, refuses or ignores; no probes, the run passes --wait
def test_bad_netprof_loader_is_one_line_exit_2(loader_copy, tmp_path, root_only):
    _nobody(loader_copy)
    res = run_netprof("run", "selector", "-c", "2", "-d", "0.5", "-r", "1", "--warmup", "0", "--no-probes",
                      "--wait", "--out", str(tmp_path / "out"),
                      env=os.environ | {"NETPROF_LOADER": str(loader_copy)}, timeout=300)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "NETPROF_LOADER" in lines[0], res.stderr


# ------------------------------------------------------------------------------------------------
# Item 6: interpreter environments from a hashed lock


def test_interpreter_lock_pins_and_hashes_everything():
    from importlib.metadata import version

    reqs = interpreters.locked_requirements()
    names = {name for name, _, _ in reqs}
    assert {"uvloop", "gevent", "greenlet", "zope.event", "zope.interface", "pyzmq", "aiozmq", "msgpack"} <= names
    for name, pinned, hashes in reqs:
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), (name, hashes)  # sha256 hex
        assert pinned == version(name), f"{name}: lock has {pinned}, netprof's own env {version(name)}"


# ------------------------------------------------------------------------------------------------
# Item 8: two runs at once


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from netprof.profiler.core.runlock import run_lock
    with run_lock(wait=False, path=sys.argv[1]):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def test_run_lock_refuses_or_waits(tmp_path):
    lock = str(tmp_path / "run" / "run.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, lock, "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()  # the holder lets go 1.5 s after this
        with pytest.raises(runlock.RunLockError) as e:
            with runlock.run_lock(wait=False, path=lock):
                pass
        assert f"pid {holder.pid}" in _one_line(e.value) and "another netprof run" in str(e.value)
        with runlock.run_lock(wait=True, path=lock):
            waited = time.monotonic() - locked_at
            assert waited > 1.4, f"took the lock after {waited:.2f} s, while its holder still held it"
            assert Path(lock).read_text().strip() == str(os.getpid())
    finally:
        holder.wait(timeout=10)
    with runlock.run_lock(wait=False, path=lock):  # released: free again
        pass


def test_run_lock_file_is_not_followed(tmp_path, victim):
    lock = tmp_path / "run" / "run.lock"
    lock.parent.mkdir(mode=0o700)
    lock.symlink_to(victim)
    with pytest.raises(runlock.RunLockError) as e:
        with runlock.run_lock(wait=False, path=str(lock)):
            pass
    assert "symlink" in _one_line(e.value)
    assert victim.read_text() == "precious\n"


MAKE_DIRS = textwrap.dedent("""
    import sys
    from netprof.profiler.core.runlock import unique_out_dir
    print("\\n".join(str(unique_out_dir(sys.argv[1])) for _ in range(20)))
""")


def test_unique_out_dirs_of_runs_started_together_differ(tmp_path):
    base = tmp_path / "runs"
    procs_ = [subprocess.Popen([sys.executable, "-c", MAKE_DIRS, str(base)], stdout=subprocess.PIPE, text=True)
              for _ in range(2)]
    made = [line for p in procs_ for line in p.communicate(timeout=60)[0].split()]
    assert len(made) == 40 and len(set(made)) == 40
    assert all(Path(m).is_dir() and Path(m).parent == base for m in made)


BUILD_ENV = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from netprof.profiler.run import interpreters

    def fake_build(base, info, env):  # the real one takes minutes; the locking around it is the point
        (env / "bin").mkdir(parents=True)
        (env / "bin" / "python").symlink_to(base)
        time.sleep(1.0)
        with open(sys.argv[1], "a") as f:
            f.write(f"{os.getpid()}\\n")
        (env / ".ready").write_text("{}")

    interpreters._build = fake_build
    print(interpreters.prepare(sys.argv[2]).python)
""")


def test_two_runs_preparing_one_interpreter_build_it_once(tmp_path):
    other = next((p for p in interpreters.pyenv_versions()
                  if os.path.realpath(p) != os.path.realpath(sys.executable)), None)
    require(other is not None, "a pyenv interpreter other than netprof's own")
    cache, builds = _mkdir(tmp_path / "cache"), tmp_path / "builds"
    env = os.environ | {"NETPROF_CACHE": str(cache)}
    runs = [subprocess.Popen([sys.executable, "-c", BUILD_ENV, str(builds), other], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in runs]
    assert all(p.returncode == 0 for p in runs), [err for _, err in results]
    pythons = {out.strip() for out, _ in results}
    assert len(pythons) == 1 and len(builds.read_text().split()) == 1
    entries = sorted(p.name for p in (cache / "interpreters").iterdir())
    assert len(entries) == 2 and entries[0] == ".lock" and not entries[1].startswith("."), entries


# ------------------------------------------------------------------------------------------------
# Item 7 (part): leftovers of a killed run


def test_stale_stderr_files_and_flame_dirs_of_dead_runs_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale_err = tmp_path / f"netprof-{dead.pid}-backend-selector-abc.stderr"
    live_err = tmp_path / f"netprof-{os.getpid()}-loader-def.stderr"
    other = tmp_path / "netprof-backend-old-naming.stderr"
    stale_dir = tmp_path / f"{flame_session.WORK_PREFIX}{dead.pid}-xyz"
    live_dir = tmp_path / f"{flame_session.WORK_PREFIX}{os.getpid()}-uvw"
    for f in (stale_err, live_err, other):
        f.write_text("x")
    for d in (stale_dir, live_dir):
        d.mkdir()
        (d / "oncpu.perf.data").write_text("x")
    assert procs.cleanup_stale(str(tmp_path)) == [str(stale_err)]
    assert flame_session.cleanup_stale(str(tmp_path)) == [str(stale_dir)]
    assert live_err.exists() and other.exists() and live_dir.exists()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (a zombie counts as gone; pid reuse is ruled out by the start time)."""
    left = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.Error:
            pass
    return left


def _bpf_progs_held(pid: int) -> set[int]:
    """Ids of the BPF programs process `pid` holds a descriptor of."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        ids.update(int(line.split()[1]) for line in text.splitlines() if line.startswith("prog_id:"))
    return ids


def _bpf_progs_loaded() -> set[int]:
    out = procs.run(["bpftool", "prog", "show", "--json"], timeout=30)
    return {p["id"] for p in json.loads(out.stdout or "[]")}


def _own_namespaces(pid: int) -> list[str]:
    from netprof.profiler.run.link.netns import list_namespaces

    return [n for n in list_namespaces() if n.startswith(f"netprof-{pid}-")]


def _stale_files(pid: int) -> list[str]:
    tmp = tempfile.gettempdir()
    return [n for n in os.listdir(tmp)
            if n.startswith((f"netprof-{pid}-", f"{flame_session.WORK_PREFIX}{pid}-"))]


def _sigkill_mid_cell(tmp_path: Path, args: tuple[str, ...], ready) -> tuple[int, list[psutil.Process], dict]:
    """Start `netprof run *args`, wait until `ready(pid)` returns what to remember (truthy), SIGKILL
    netprof alone (not its group), reap it; returns (pid, its descendants just before, `ready`'s value)."""
    log = open(tmp_path / "netprof.stderr", "w")
    proc = subprocess.Popen(netprof_cmd("run", *args, "--wait", "--out", str(tmp_path / "run")),
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline, seen = time.monotonic() + 240, None  # --wait: other runs may hold the run lock
        while time.monotonic() < deadline and proc.poll() is None:
            seen = ready(proc.pid)
            if seen:
                break
            time.sleep(0.1)
        assert seen, f"never ready (exit {proc.poll()}): {(tmp_path / 'netprof.stderr').read_text()[-2000:]}"
        kids = _descendants(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        log.close()
    return proc.pid, kids, seen


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # gone, or a zombie
        return ""


def _serving(pid: int) -> bool:
    cmds = [_cmdline(p) for p in _descendants(pid)]
    return any("netprof.backends" in c for c in cmds) and any("netprof-loader" in c for c in cmds)


def test_sigkilled_run_leaves_no_process_bpf_program_or_temp_file(tmp_path):
    """Item 7: netprof SIGKILLed mid-cell with probes on. Its children die with it (PR_SET_PDEATHSIG),
    the kernel frees its BPF programs with its descriptors, and the watchdog removes its stderr files."""
    require_bpf()
    require_tool("bpftool")

    def ready(pid):
        held = _bpf_progs_held(pid) if _serving(pid) else set()
        return held and {"progs": held, "files": _stale_files(pid)}

    pid, kids, seen = _sigkill_mid_cell(tmp_path, ("selector", "-c", "10", "-d", "5", "-r", "3"), ready)
    names = " ".join(p.name() for p in kids)
    assert "netprof-loader" in names and seen["files"], (names, seen)
    left = wait_until_empty(lambda: _running(kids), 5)
    assert not left, [_cmdline(p) for p in left]
    assert not wait_no_children(5)
    assert not wait_until_empty(lambda: seen["progs"] & _bpf_progs_loaded(), 5)
    assert not wait_until_empty(lambda: _stale_files(pid), 5)


def test_sigkilled_netns_run_leaves_no_process_or_namespace(tmp_path):
    """Item 7 with --remote netns and the netem forwarder: the backend, the loader and the forwarder
    inside the namespaces die with netprof, and the watchdog deletes the namespaces."""
    require(os.geteuid() == 0, "root (network namespaces)")

    def ready(pid):
        return _serving(pid) and len(_own_namespaces(pid)) == 2 and _own_namespaces(pid)

    pid, kids, names = _sigkill_mid_cell(
        tmp_path, ("selector", "-c", "10", "-d", "5", "-r", "3", "--no-probes", "--remote", "netns",
                   "--netem", "delay=1ms"), ready)
    assert len(kids) >= 3, [_cmdline(p) for p in kids]  # backend, loader, netem forwarder
    left = wait_until_empty(lambda: _running(kids), 5)
    assert not left, [_cmdline(p) for p in left]
    assert not wait_no_children(5)
    assert not wait_until_empty(lambda: _own_namespaces(pid), 5), names
    assert not wait_until_empty(lambda: _stale_files(pid), 5)


def test_doctor_removes_what_a_dead_run_left(tmp_path):
    """What the watchdog could not remove (it was killed too, or the machine rebooted mid-run): stderr
    files, sampling scratch and namespaces of a dead netprof pid go at the next `netprof doctor`."""
    require(os.geteuid() == 0, "root (network namespaces)")
    dead = subprocess.Popen(["true"])
    dead.wait()
    tmp = Path(tempfile.gettempdir())
    (tmp / f"netprof-{dead.pid}-backend-selector-x.stderr").write_text("x")
    (tmp / f"{flame_session.WORK_PREFIX}{dead.pid}-y").mkdir()
    ns = f"netprof-{dead.pid}-b"
    procs.run(["ip", "netns", "add", ns], timeout=30, check=True)
    try:
        res = run_netprof("doctor", timeout=120)
        assert not _stale_files(dead.pid), res.stdout
        assert not _own_namespaces(dead.pid), res.stdout
        # (the name is in the output unless another cleaner on this machine was quicker: see procs.py)
        assert "netns leftovers" in res.stdout and "stale temp files" in res.stdout
    finally:
        procs.run(["ip", "netns", "delete", ns], timeout=30)
        for name in _stale_files(dead.pid):
            path = tmp / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def test_children_die_with_the_thread_that_spawned_them():
    """PR_SET_PDEATHSIG: a child of spawn() or run() is SIGKILLed when the thread that started it exits
    (here a short-lived thread; for netprof, its main thread: the process)."""
    started = {}

    def spawner():
        started["spawn"] = procs.spawn("sleeper", ["sleep", "60"], capture_stdout=False)

    t = threading.Thread(target=spawner)
    t.start()
    t.join()
    child = started["spawn"]
    try:
        assert child.popen.wait(timeout=5) == -signal.SIGKILL
    finally:
        child.discard()
    # PR_GET_PDEATHSIG (2) in a child of each helper
    code = "import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)"
    assert procs.run([sys.executable, "-c", code], timeout=30).stdout.strip() == str(int(signal.SIGKILL))
    as_user = {"user": NOBODY, "group": NOBODY} if os.geteuid() == 0 else {}  # a uid change clears it
    proc = procs.spawn("pdeathsig", [sys.executable, "-c", code], **as_user)
    try:
        assert proc.readline(30) == str(int(signal.SIGKILL)), proc.stderr_tail()
    finally:
        proc.discard()


def test_a_childs_stderr_leaves_no_file_behind():
    """Issue 31: a child's stderr is a pipe netprof reads (no file anywhere a killed run could leave
    or another user could swap), and what it wrote last is still there after it exited."""
    before = set(os.listdir(tempfile.gettempdir()))
    proc = procs.spawn("named", ["sh", "-c", "echo first >&2; echo last words >&2; exit 3"], capture_stdout=False)
    try:
        assert proc.popen.wait(30) == 3
        assert proc.stderr_tail() == "first | last words"
        # ours only: in `make test`'s first pass another test's run makes its own netprof-PID-* directory meanwhile
        # (once seen: netprof-23934-sr9xxncs); what this process (procs.spawn) made is named by its pid
        mine = f"netprof-{os.getpid()}-"
        assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith(mine)]
    finally:
        proc.discard()


# ------------------------------------------------------------------------------------------------
# Item 13: netprof started with SIGINT ignored (nohup, a background job)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _rows(out: Path) -> int:
    try:
        return len(pd.read_parquet(out / "results.parquet"))
    except (OSError, ValueError):
        return 0


@pytest.mark.concurrent  # what the run imports, refuses or ignores; no probes, the run passes --wait
def test_run_started_with_sigint_ignored_keeps_ignoring_it_and_stops_on_sigterm(tmp_path):
    """Like a job started by `nohup` or from a script's background: Ctrl-C is not meant for it, so it
    neither dies nor loses a child to SIGINT; SIGTERM still stops it cleanly (exit 130)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(netprof_cmd("run", "selector", "-c", "10", "-d", "0.5", "-r", "8", "--warmup", "0.2",
                                        "--no-probes", "--wait", "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint, start_new_session=True)
    try:
        deadline = time.monotonic() + 240  # --wait: other runs may hold the run lock
        while _rows(out) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        while _rows(out) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    df = pd.read_parquet(out / "results.parquet")
    assert 3 <= len(df) < 8 and (df["status"] == "ok").all(), df[["status", "error"]]
    assert not wait_no_children()
