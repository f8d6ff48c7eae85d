"""`netprof run --flamegraph` and `netprof flamegraph diff` on a real backend under load."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

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


def test_flamegraph_command_names_each_svg(tmp_path):
    """`netprof flamegraph` writes no report (no throughput rows): its last lines name every SVG by path, and say why
    a view is missing. Built from bench/reports/http's committed flamegraphs (three cells, no mixed view)."""
    from netprof.profiler.report import report

    out = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parent.parent / "bench" / "reports" / "http" / "flamegraphs",
                    out / "flamegraphs")
    lines = report.flamegraph_lines(out)
    svgs = [Path(line.split()[-1]) for line in lines if line.endswith(".svg")]
    assert len(svgs) == 9 and all(p.is_file() and p.is_relative_to(out) for p in svgs), lines
    assert "http_asyncio-cpython-3.11.2-c100-p1:" in lines
    assert sum(line.startswith("  note: no mixed Python+kernel view") for line in lines) == 3, lines
    shutil.rmtree(out / "flamegraphs" / "granian_rsgi-cpython-3.11.2-c100-p1")
    assert "granian_rsgi-cpython-3.11.2-c100-p1:" not in report.flamegraph_lines(out)
    shutil.rmtree(out / "flamegraphs")
    (out / "flamegraphs").mkdir()
    assert report.flamegraph_lines(out) == [f"no flamegraph was written in {out}/flamegraphs/ (index.json says why)"]
