"""What keeps a run and a report quick (bench/startup.py measures it): scipy and matplotlib imported only
when needed, the report's plots drawn in forked children and reused by content, and the probes'
self-cost measured once per boot and cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sps
from test_report import build_results

from netprof.probes import selfcost
from netprof.profiler import cache, plotset, report, stats


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """netprof's cache in a directory of this test's (the real one is /var/cache/netprof)."""
    root = tmp_path / "cache"
    monkeypatch.setattr(cache, "ROOT", str(root))
    return root


def test_cli_and_report_import_neither_scipy_nor_matplotlib():
    code = ("import sys, netprof.profiler.cli, netprof.profiler.report, netprof.profiler.runner; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("q,dof", [(0.975, 1), (0.975, 2), (0.975, 4), (0.995, 9), (0.95, 3.7), (0.975, 28.25)])
def test_t_quantile_is_scipy_stats_exactly(q, dof):
    assert stats._t_quantile(q, dof) == float(sps.t.ppf(q, dof))


def test_summarize_interval_unchanged():
    s = stats.summarize([1.0, 2.0, 3.0])
    assert s["ci"] == float(sps.t.ppf(0.975, 2) * 1.0 / np.sqrt(3))  # what scipy.stats gave before, bit for bit
    assert s["ci"] == pytest.approx(2.4841377, abs=1e-7)
    assert np.isnan(stats.summarize([5.0])["ci"])  # one round: no interval, and no scipy needed


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


def _df(tmp_path):
    from netprof.profiler import results

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
