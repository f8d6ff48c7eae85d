"""What an instrument adds beyond its row is found from its name too (issue 53): its rule (rules.py), its report
section (report.py and report.{md,html}.j2) and its judged figure (metrics.py), in its folder, with no line in the
rules package, report.py, compare or stats.

The throw-away getpid instrument (tests/instruments/getpid/; its row field and a real run are
tests/test_instrument.py's) carries all three. Each command runs in a fresh netprof process, as a user's would:
once with the one registration line (the folder findable under netprof.probes, its name in registry.NAMES) and
once without it. Results directories written here (no BPF, no run): three rounds of one cell, getpid() once per
message in BASE and twice in NEW, with NEW slower.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from netprof.profiler.model import results

FOLDERS = Path(__file__).resolve().parent / "instruments"

# A fresh netprof, optionally with the registration line of the getpid instrument, running argv.
LAUNCH = textwrap.dedent("""
    import sys
    import netprof.probes
    from netprof.probes import registry
    if sys.argv[1] == "registered":
        netprof.probes.__path__.append(sys.argv[2])  # where its folder is (in a checkout: probes/getpid/)
        registry.NAMES = (*registry.NAMES, "getpid")  # the one registration line
    if sys.argv[3] == "rules":
        from netprof.profiler.analysis import rules
        print(" ".join(f"{fn.__module__}:{id}" for id, fn in rules.RULES.items()))
    else:
        from netprof.profiler.entry import main
        sys.argv = ["netprof", *sys.argv[3:]]
        main()
""")


def netprof(registered: bool, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LAUNCH, "registered" if registered else "plain", str(FOLDERS),
                           *args], capture_output=True, text=True, timeout=120)


def row(rnd: int, mps: float, getpid_per_msg: float) -> dict:
    messages = int(mps * 2.0)
    return {
        "backend": "selector", "family": "selectors", "interpreter": "cpython-3.11.2", "framing": "message",
        "protocol": "echo", "connections": 10, "pipeline": 1, "round": rnd, "msize": 64, "work": "none",
        "think": "none", "pinned": True, "status": "ok", "error": None, "messages": messages, "duration_s": 2.0,
        "msgs_per_sec": mps, "connected": 10, "setup_s": 0.1,
        "lat_us": {"p50": 100.0, "p90": 150.0, "p95": 180.0, "p99": 300.0, "p999": 600.0, "max": 900.0,
                   "mean": 110.0},
        "per_conn": {"min": 990, "p5": 995, "p50": 1000, "p95": 1005, "max": 1010, "jain": 0.999,
                     "active_share": 0.95, "idle": 0},
        "errors": {"connect": 0, "reset": 0, "timeout": 0, "mismatch": 0},
        "loader_cpu": {"user_s": 0.4, "sys_s": 0.6, "cpu_frac": 0.5},
        "probes": ["counting", "getpid"],
        "cpu": {"user_s": 0.99, "sys_s": 0.81, "user_frac": 0.55, "busy_frac": 0.9},
        "syscalls": {"sendto": messages, "recvfrom": messages, "getpid": int(messages * getpid_per_msg)},
        "syscalls_per_msg": {"sendto": 1.0, "recvfrom": 1.0, "getpid": getpid_per_msg},
        "ctx_switches_per_msg": 0.01, "probe_cost": 0.01, "probed": {"share": 0.3},
        "sockwait": {"attached": False}, "breakdown": {"attached": False},
        "getpid": {"attached": True, "calls": int(messages * getpid_per_msg), "per_msg": getpid_per_msg},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    made = []
    for name, mps, per_msg in (("base", 50_000.0, 1.0), ("new", 35_000.0, 2.0)):
        store = results.ResultsStore(tmp_path_factory.mktemp(name))
        store.write_meta({})
        for rnd, jitter in ((1, 0.99), (2, 1.0), (3, 1.01)):
            store.add(row(rnd, mps * jitter, per_msg * jitter))
        made.append(store.dir)
    return made[0], made[1]


def test_its_rules_are_listed_where_it_says(runs):
    res = netprof(True, "rules")
    assert res.returncode == 0, res.stderr
    order = res.stdout.split()
    mine = order.index("netprof.probes.getpid.rules:getpid_per_message")
    # LISTED_AFTER = "syscalls": right after the syscall topic's rules
    assert order[mine - 1].startswith("netprof.profiler.analysis.rules.syscalls:"), order
    assert not order[mine + 1].startswith("netprof.profiler.analysis.rules.syscalls:"), order
    assert not any("getpid" in r for r in netprof(False, "rules").stdout.split())


def test_its_rule_and_section_reach_the_report(runs, tmp_path):
    base, _ = runs
    for registered in (True, False):
        out = tmp_path / ("with" if registered else "without")
        res = netprof(registered, "report", str(base), "--out", str(out))
        assert res.returncode == 0, res.stderr
        md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
        summary = json.loads((out / "summary.json").read_text())
        found = [a for a in summary["anomalies"] if a["id"] == "getpid_per_message"]
        judged = summary["cells"][0]["metrics"]
        if not registered:  # the control: nothing of it without the registration line
            assert "getpid calls" not in md and 'id="getpid"' not in page and not found
            assert "getpid.per_msg" not in judged
            continue
        assert "## getpid calls" in md and "| selector cpython-3.11.2 message framing c=10 | 1.00 |" in md, md
        assert '<a href="#getpid">getpid</a>' in page and '<h2 id="getpid">getpid calls</h2>' in page
        assert "The getpid probe was attached for the whole of each cell." in md  # its probe_note
        assert len(found) == 1 and found[0]["evidence"] == {"getpid per message": 1.0}, summary["anomalies"]
        assert "getpid calls" in page.split("getpid() on every message", 1)[1]  # the card links to its section
        # its judged figure in summary.json's per-cell aggregates, averaged over the rounds
        assert judged["getpid.per_msg"]["mean"] == pytest.approx(1.0) and judged["getpid.per_msg"]["n"] == 3


def test_its_figure_is_judged_and_explains_in_compare(runs):
    base, new = runs
    for registered in (True, False):
        res = netprof(registered, "compare", str(base), str(new), "--json")
        assert res.returncode == 0, res.stderr
        (cell,) = json.loads(res.stdout)["comparisons"][0]["cells"]
        if not registered:
            assert "getpid.per_msg" not in cell["metrics"] and "getpid()" not in cell["why"]
            continue
        m = cell["metrics"]["getpid.per_msg"]
        assert m["label"] == "getpid() per message" and m["verdict"] == "higher", m
        assert m["ratio"] == pytest.approx(2.0, rel=0.01)
        assert "getpid() per message 1.00 → 2.00" in cell["why"], cell["why"]
