"""`netprof run --flamegraph` and `netprof flamegraph diff` on a real backend under load."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from helpers import require_tool, run_netprof


@pytest.fixture
def flame_run(flame_run):
    """conftest's shared `netprof run selector --flamegraph` (on CPython 3.13 where pyenv has it: the views here are
    the same on any interpreter, and tests/test_interpreters.py reads its mixed view): (directory, its entry)."""
    require_tool("inferno-flamegraph")
    out, entry, _ = flame_run
    return out, entry


def test_every_view_is_there_and_parses(flame_run):
    out, entry = flame_run
    for view in ("oncpu", "python", "offcpu"):
        assert entry[f"{view}_folded"] and (out / entry[f"{view}_folded"]).stat().st_size > 0, entry["notes"]
        ET.parse(out / entry[f"{view}_svg"])  # raises if not XML


def test_oncpu_shows_kernel_receive_path(flame_run):
    out, entry = flame_run
    folded = (out / entry["oncpu_folded"]).read_text()
    assert "__x64_sys_recvfrom" in folded or "tcp_recvmsg" in folded


def test_python_view_shows_the_backend(flame_run):
    out, entry = flame_run
    assert "selector_family.py" in (out / entry["python_folded"]).read_text()


def test_report_links_the_flamegraphs(flame_run):
    out, entry = flame_run
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    for view in ("oncpu", "python", "offcpu"):
        assert entry[f"{view}_svg"] in html and entry[f"{view}_svg"] in md


def test_cli_diff_of_two_real_profiles(flame_run, tmp_path):
    out, entry = flame_run
    target = tmp_path / "diff.svg"
    res = run_netprof("flamegraph", "diff", str(out / entry["oncpu_folded"]), str(out / entry["offcpu_folded"]),
                      "-o", str(target))
    assert res.returncode == 0, res.stderr
    ET.parse(target)
