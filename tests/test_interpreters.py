"""Backends on other CPythons: rows per interpreter, side-by-side report, mixed Python+kernel stacks,
and the locked environment that runs every backend there (HTTP servers included)."""

from __future__ import annotations

import http.client
import importlib.metadata
import json
import os
import select
import signal
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers import REQUIRE_TOOLS, netprof_cli, require_bpf, run_netprof, wait_no_children
from netprof.backends import registry
from netprof.profiler.model import schema
from netprof.profiler.run import interpreters


def _need(version: str) -> None:
    try:
        interpreters.resolve(version)
    except interpreters.InterpreterError as e:
        if REQUIRE_TOOLS:  # this machine kind has pyenv's 3.11 and 3.13: their absence is a failure
            pytest.fail(f"CI=true but {e}")
        pytest.skip(str(e))


def test_mixed_stack_support_by_version():
    def it(version, trampoline, fp=False):
        return interpreters.Interpreter("x", "x", "x", version, "cpython", fp, trampoline, "")

    assert it("3.13.0", True).mixed_stack_flag()[0] == "perf_jit"
    assert it("3.12.1", True, fp=True).mixed_stack_flag()[0] == "perf"
    flag, why = it("3.12.1", True).mixed_stack_flag()
    assert flag is None and "frame pointers" in why
    assert it("3.11.7", False).mixed_stack_flag()[0] is None


def test_missing_interpreter_is_one_line_exit_2(tmp_path):
    res = netprof_cli("run", "selector", "--python", "3.99", "--no-probes", "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--python 3.99" in lines[0] and "pyenv install" in lines[0], res.stderr
    assert not (tmp_path / "o").exists()


def test_two_interpreters_side_by_side(tmp_path):
    require_bpf()
    _need("3.11")
    _need("3.13")
    out = tmp_path / "run"
    res = run_netprof("run", "asyncio_sock", "-c", "100", "--python", "3.11,3.13", "-d", "0.5",
                      "-r", "1", "--warmup", "0.3", "--stacks", "--wait", "--json", "--out", str(out), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = json.loads(res.stdout)["runs"]
    assert len(runs) == 2
    labels = {r["interpreter"] for r in runs}
    assert len(labels) == 2 and all(label.startswith("cpython-3.1") for label in labels), labels
    assert {r["python_version"][:4] for r in runs} == {"3.11", "3.13"}
    assert all(r["status"] == "ok" and r["syscalls_per_msg"] for r in runs)
    meta = json.loads((out / "meta.json").read_text())
    assert [i["version"][:4] for i in meta["interpreters"]] == ["3.11", "3.13"]
    report = (out / "report.md").read_text()
    for label in labels:  # the tables name each interpreter's row
        assert label in report
    # The evidence rounds write stacks/<slug>.json under the slug the rules read (issue 14's bug: the
    # interpreter was in the writer's name but not the reader's, so no rule ever saw the stacks).
    summary = json.loads(res.stdout)
    for r in runs:
        assert (out / "stacks" / f"{schema.cell_slug(r)}.json").exists(), schema.cell_slug(r)
    churn = [a for a in summary["anomalies"] if a["id"] == "readiness_churn"]
    seen = {(a["backend"], a["interpreter"]) for a in churn if a["evidence"].get("stacks")}
    assert {("asyncio_sock", label) for label in labels} <= seen, [(a["backend"], a["interpreter"]) for a in churn]
    assert not wait_no_children()


def test_mixed_flamegraph_joins_python_and_kernel(bpf, flame_run):
    _need("3.13")
    # conftest's shared `netprof run selector -c 100 -d 1 -r 1 --python 3.13 --flamegraph`
    out, entry, python = flame_run
    assert python == "3.13"
    assert entry.get("mixed_svg"), entry
    stacks = (out / entry["mixed_folded"]).read_text().splitlines()
    joined = [s for s in stacks if "selector_family.py" in s and "__x64_sys_recvfrom" in s]
    assert joined, f"no stack runs from the selector backend's Python into recvfrom: {entry['notes']}"
    assert (out / entry["mixed_svg"]).stat().st_size > 1000


HTTP_BACKENDS = {n for n in registry.names() if registry.get(n).protocol == "http"}


@pytest.fixture(scope="module")
def env313() -> interpreters.Interpreter:
    """3.13's prepared environment: built once (then cached on disk, as for the tests above)."""
    _need("3.13")
    return interpreters.prepare("3.13")


def test_each_pyenv_interpreter_gets_an_environment_with_the_backends_deps():
    """prepare() builds (once, then from the cache) a venv per interpreter whose Python imports what the
    backends need. In the first pass (it measures nothing): building one takes ~40 s on a fresh machine, which
    the measured runs of --python below then find ready instead of paying in the serial pass."""
    for spec in ("3.11", "3.13"):
        _need(spec)
        interp = interpreters.prepare(spec)
        assert interp.python != interp.base, interp
        res = subprocess.run([interp.python, "-I", "-c", "import sys, uvloop, gevent, netprof.backends; "
                              "print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and res.stdout.strip() == spec, (spec, res.stderr[-2000:])


def test_lock_holds_every_runtime_dependency():
    # `pip install --no-deps` of the lock would not notice a missing dependency; the backend's import
    # would, in the middle of a run. The metadata read here is netprof's own venv's, which has the
    # lock's versions (test_hardening checks).
    locked = {canonicalize_name(name) for name, _, _ in interpreters.locked_requirements()}
    dists = importlib.metadata.packages_distributions()
    for info in registry.BACKENDS.values():  # what each backend imports comes from a locked package
        for mod in info.requires:
            if mod != registry.CPP_MODULE:
                assert {canonicalize_name(d) for d in dists[mod.partition(".")[0]]} & locked, (info.name, mod)
    missing, checked = [], 0
    for name in locked:
        for line in importlib.metadata.requires(name) or []:
            req = Requirement(line)
            for minor in (11, 12, 13):  # the CPythons the lock is for (interpreters.LOCKED_PYTHONS)
                env = {"python_version": f"3.{minor}", "python_full_version": f"3.{minor}.0", "extra": "",
                       "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                       "platform_python_implementation": "CPython", "implementation_name": "cpython",
                       "platform_machine": "x86_64"}
                if req.marker is None or req.marker.evaluate(env):
                    checked += 1
                    if canonicalize_name(req.name) not in locked:
                        missing.append(f"{name} on 3.{minor} needs {req}")
    assert not missing, missing
    assert checked > 50  # aiohttp, twisted, gevent, ... each require several


# Run in the environment's interpreter: every backend module and what it needs imports there (those
# a run would serve, not just the two loaded below), plus gunicorn's gevent worker, which gunicorn
# imports only in the forked worker.
IMPORT_EVERY_BACKEND = """
import importlib, json
from netprof.backends import registry
failed, checked = {}, []
for info in registry.BACKENDS.values():
    if registry.CPP_MODULE in info.requires or registry.python_requirement(info):
        continue
    checked.append(info.name)
    try:
        why = registry.missing_requirement(info)
        if not why:
            importlib.import_module(info.module)
    except Exception as e:
        why = repr(e)
    if why:
        failed[info.name] = why
try:
    importlib.import_module("gunicorn.workers.ggevent")
except Exception as e:
    failed["gunicorn.workers.ggevent"] = repr(e)
print(json.dumps({"checked": checked, "failed": failed}))
"""


@pytest.mark.slow
@pytest.mark.concurrent  # answers, versions and rows, no figure judged (--wait: behind other runs)
def test_http_backends_serve_on_another_interpreter(tmp_path, env313):
    py = env313.python
    asked = subprocess.run([env313.base, "-V"], capture_output=True, text=True, timeout=60, check=True)
    version = asked.stdout.split()[1]  # "Python 3.13.0": asked of the interpreter itself, not netprof's probe
    assert version.startswith("3.13.") and py != env313.base

    res = subprocess.run([py, "-I", "-c", IMPORT_EVERY_BACKEND], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    imported = json.loads(res.stdout)
    assert not imported["failed"], imported["failed"]
    assert HTTP_BACKENDS and HTTP_BACKENDS <= set(imported["checked"]), imported["checked"]

    # The server itself says what runs it: aiohttp's Server header names Python's and aiohttp's versions.
    err = tmp_path / "aiohttp.stderr"
    with err.open("w") as stderr:
        server = subprocess.Popen([py, "-I", "-m", "netprof.backends", "aiohttp", "--host", "127.0.0.1", "--port", "0"],
                                  stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path,
                                  start_new_session=True)
    try:
        ready, _, _ = select.select([server.stdout], [], [], 30)
        line = server.stdout.readline() if ready else ""
        assert line.startswith("ready "), (line, server.poll(), err.read_text())
        conn = http.client.HTTPConnection("127.0.0.1", int(line.split()[2]), timeout=10)
        conn.request("GET", "/plaintext")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"Hello, World!")
        expected = f"Python/{version.rsplit('.', 1)[0]} aiohttp/{importlib.metadata.version('aiohttp')}"
        assert resp.getheader("Server") == expected, resp.getheaders()
        conn.close()
        os.kill(server.pid, signal.SIGTERM)
        assert server.wait(10) == 0, err.read_text()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)

    # Through netprof: the loader's HTTP parser, a compiled-wheel server and a Rust one with a worker process.
    out = tmp_path / "run"
    res = run_netprof("run", "aiohttp", "granian_asgi", "--python", "3.13", "-c", "10", "-d", "0.5",
                      "-r", "1", "--warmup", "0.2", "--no-probes", "--wait", "--json", "--out", str(out),
                      timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout)["runs"]
    assert sorted(r["backend"] for r in rows) == ["aiohttp", "granian_asgi"], rows
    for r in rows:
        assert (r["status"], r["protocol"]) == ("ok", "http"), r
        assert r["messages"] > 0 and r["msgs_per_sec"] > 0 and not any(r["errors"].values()), r
        assert (r["interpreter"], r["python_version"]) == (f"cpython-{version}", version), r
    assert not wait_no_children()


def _fake_env(root, name: str, executable: str, used: float):
    env = root / name
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "payload").write_bytes(b"x" * 4096)
    (env / ".ready").write_text(json.dumps({"executable": executable}))
    os.utime(env / ".ready", (used, used))
    return env


def test_prune_keeps_the_last_used_and_every_env_a_run_holds(tmp_path):
    # The cache grew by one ~90 MB environment per netprof change (933 MB here after a day). Fake
    # environments stand in for built ones (building four takes minutes); the holds are real flocks
    # of real processes.
    root = tmp_path / "interpreters"
    now = 1_800_000_000.0
    envs = [_fake_env(root, f"cpython-3.13.0-{i}", sys.executable, now - i * 3600) for i in range(4)]
    orphan = _fake_env(root, "cpython-3.9.1-x", str(tmp_path / "uninstalled" / "python"), now)
    foreign = root / "not-an-env"
    foreign.mkdir()
    (root / ".lock").touch()
    # Another run is using the oldest: it holds its .in-use shared, as prepare() does.
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(envs[3] / interpreters.IN_USE)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        os.utime(envs[3] / interpreters.IN_USE, (now - 4 * 3600, now - 4 * 3600))
        removed = interpreters.prune(root)
        assert sorted(removed) == sorted([envs[2].name, orphan.name])
        assert [e.exists() for e in envs] == [True, True, False, True]
        assert not orphan.exists() and foreign.exists()
    finally:
        holder.kill()
        holder.wait(10)
    # Released: it is beyond the two last used, so the next build's prune removes it.
    assert interpreters.prune(root) == [envs[3].name]
    assert sorted(p.name for p in root.iterdir()) == sorted([envs[0].name, envs[1].name, "not-an-env", ".lock"])


def test_an_env_this_process_holds_is_never_pruned(tmp_path):
    root = tmp_path / "interpreters"
    envs = [_fake_env(root, f"cpython-3.11.7-{i}", sys.executable, 1_800_000_000.0 - i) for i in range(3)]
    assert not interpreters._hold_ready(root / "cpython-3.11.7-absent")  # nothing there: build it
    assert interpreters._hold_ready(envs[2])  # what prepare() does before returning an env (marks it used)
    os.utime(envs[2] / interpreters.IN_USE, (1, 1))  # ... and make it the least recently used
    try:
        assert interpreters.prune(root) == []
        assert all(e.exists() for e in envs)
    finally:
        os.close(interpreters._HELD.pop())
    assert interpreters.prune(root) == [envs[2].name]
    # Pruned: the name no longer opens, so a run that looks for it afterwards rebuilds it.
    assert not interpreters._hold_ready(envs[2])


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
fcntl.flock(fd, fcntl.LOCK_SH)
print("held", flush=True)
time.sleep(60)
"""


def test_netprof_own_interpreter_answers_the_probe_in_process_as_a_child_of_it_would(monkeypatch):
    """Every run inspects its interpreter: netprof's own answers in this process (no child on every run's start),
    with what the child answers."""
    child = json.loads(subprocess.run([sys.executable, "-I", "-c", interpreters._PROBE], capture_output=True,
                                      text=True, check=True, timeout=60).stdout)
    monkeypatch.setattr(interpreters.procs, "run", lambda *a, **k: pytest.fail(f"a child was started: {a}"))
    assert interpreters.inspect(sys.executable) == child
