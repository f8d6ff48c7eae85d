"""The run-dimension path, end to end, through its first user-facing dimension: `--tag` (issue 32).

A dimension declared in profiler/model/schema.py plus a CLI option must reach every row, per-connection
file, table label, file name and `compare` with no other change; these tests run netprof for real and
read what it wrote.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from helpers import run_netprof, wait_no_children
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import schema
from netprof.profiler.run.plan import parse_tags

pytestmark = pytest.mark.concurrent  # the --tag dimension's rows, labels and refusals; runs pass --wait

SHORT = ("selector", "-c", "2", "-d", "0.3", "-r", "1", "--warmup", "0", "--no-probes", "--wait")


def _run(out, *args: str) -> dict:
    res = run_netprof("run", *SHORT, *args, "--json", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_tags_split_a_run_into_cells_everywhere(tmp_path):
    """`--tag a,b`: every cell runs once per tag; each row, per-connection count, cell summary and
    label carries its tag; the report names both."""
    out = tmp_path / "ab"
    summary = _run(out, "--tag", "a,b")
    assert sorted(r["tag"] for r in summary["runs"]) == ["a", "b"]
    assert all(r["status"] == "ok" and r["messages"] > 0 for r in summary["runs"])
    assert sorted(c["tag"] for c in summary["cells"]) == ["a", "b"]
    per_conn = pd.read_parquet(out / "per_conn.parquet")
    assert sorted(per_conn["tag"].unique()) == ["a", "b"]
    assert per_conn.groupby("tag")["conn"].nunique().to_dict() == {"a": 2, "b": 2}
    report = (out / "report.md").read_text()
    assert "(tag a)" in report and "(tag b)" in report, "the tables' series labels do not name the tags"
    slugs = {schema.cell_slug(r) for r in summary["runs"]}
    assert len(slugs) == 2 and all(s.endswith(("tag-a", "tag-b")) for s in slugs), slugs
    assert not wait_no_children()


def test_compare_names_the_tag_two_runs_differ_in(tmp_path):
    """Two runs tagged old and new (one run-wide value each): compare matches their cells and says
    the tag is what is being compared."""
    _run(tmp_path / "old", "--tag", "old", "--no-report")  # compare reads the results, not the pages
    _run(tmp_path / "new", "--tag", "new", "--no-report")
    res = run_netprof("compare", str(tmp_path / "old"), str(tmp_path / "new"), "--json", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    (comp,) = json.loads(res.stdout)["comparisons"]
    assert comp["compared_across"] == {"tag": ["old", "new"]}
    assert len(comp["cells"]) == 1 and "tag" not in comp["matched_on"]


def test_an_untagged_run_has_no_tag_in_its_labels(tmp_path):
    """Older result files and runs without --tag read as tag "" (schema.normalize), which labels omit."""
    row = {"backend": "selector", "connections": 10, "pipeline": 1, "framing": "message"}
    assert "tag" not in schema.cell_label(row)
    assert schema.key_of(row)[schema.CELL_KEYS.index("tag")] == ""
    assert schema.cell_label(row | {"tag": "x"}).endswith("tag x")


@pytest.mark.parametrize("text", ["a,a", "../x", "a b", "x" * 33, "-x"])
def test_bad_tags_are_one_line(text):
    with pytest.raises(InputError) as e:
        parse_tags(text)
    assert "--tag" in str(e.value) and "\n" not in str(e.value)
    res = run_netprof("run", *SHORT, "--tag", text, timeout=60)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "--tag" in lines[0], res.stderr
