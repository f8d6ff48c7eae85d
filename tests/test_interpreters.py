"""Backends on other CPythons: rows per interpreter, side-by-side report, mixed Python+kernel stacks."""

from __future__ import annotations

import json

import pytest

from helpers import REQUIRE_TOOLS, require_bpf, run_netprof, wait_no_children
from netprof.profiler import interpreters, schema


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
    res = run_netprof("run", "selector", "--python", "3.99", "--no-probes", "--out", str(tmp_path / "o"))
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--python 3.99" in lines[0] and "pyenv install" in lines[0], res.stderr
    assert not (tmp_path / "o").exists()


def test_two_interpreters_side_by_side(tmp_path):
    require_bpf()
    _need("3.11")
    _need("3.13")
    out = tmp_path / "run"
    res = run_netprof("run", "asyncio_sock", "uvloop_sock", "-c", "100", "--python", "3.11,3.13", "-d", "2",
                      "-r", "2", "--warmup", "0.5", "--stacks", "--wait", "--json", "--out", str(out), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = json.loads(res.stdout)["runs"]
    assert len(runs) == 8
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


def test_mixed_flamegraph_joins_python_and_kernel(tmp_path):
    require_bpf()
    _need("3.13")
    out = tmp_path / "run"
    res = run_netprof("run", "selector", "-c", "100", "-d", "3", "-r", "1", "--python", "3.13", "--flamegraph",
                      "--warmup", "0.5", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    index = json.loads((out / "flamegraphs" / "index.json").read_text())
    entry = index[0]
    assert entry.get("mixed_svg"), entry
    stacks = (out / entry["mixed_folded"]).read_text().splitlines()
    joined = [s for s in stacks if "selector_family.py" in s and "__x64_sys_recvfrom" in s]
    assert joined, f"no stack runs from the selector backend's Python into recvfrom: {entry['notes']}"
    assert (out / entry["mixed_svg"]).stat().st_size > 1000
