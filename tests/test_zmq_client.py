"""`--zmq-client libzmq|native` without a run: what drives the ZeroMQ backends (the loader's RunRequest
transport, RunConfig.loader_transport), the refusals that hold only under libzmq, the row and run setting that
record it, and what compare, the report and `netprof ab` make of it. The loader's own side of "zmtp" is
cpp_server's (its PROTOCOL.md and tests)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from helpers import netprof_cli, wait_no_children
from netprof.backends import registry
from netprof.profiler import ab, knee_plan
from netprof.profiler.analysis import compare
from netprof.profiler.core.errors import InputError
from netprof.profiler.model import schema
from netprof.profiler.report import report
from netprof.profiler.run import cell, servers, turns
from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.loader_client import RunRequest
from netprof.profiler.run.plan import RunConfig, validate

ZMQ = [n for n in registry.names() if registry.get(n).transport == "zmq"]
TCP = [n for n in registry.names() if registry.get(n).transport == "tcp"]

REFUSED = [
    (["run", "zmq_raw", "-c", "10", "--zmq-client", "zmq"], "--zmq-client 'zmq' is not known; use libzmq"),
    (["run", "selector", "-c", "10", "--zmq-client", "native"], "none is in this run: drop it"),
    (["run", "zmq_raw", "-c", "10", "--rate", "1k", "--zmq-client", "libzmq"], "under --zmq-client libzmq"),
    (["knee", "selector", "--slo", "p99<5ms", "--zmq-client", "native"], "none is in this run: drop it"),
    (["ab", "selector", "asyncio_sock", "--zmq-client", "native"], "none is in this run: drop it"),
    (["ab", "zmq_raw", "zmq_poller", "--zmq-client", "bogus"], "--zmq-client 'bogus' is not known"),
    (["ab", "zmq_raw", "zmq_poller", "--method", "turns"], "add --zmq-client native for turns"),
]


@pytest.mark.parametrize("args,expected", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_through_the_cli_in_one_line_exit_2(args, expected, tmp_path):
    res = netprof_cli(*args, "--no-probes", "--out", str(tmp_path / "out"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert expected in lines[0] and "Traceback" not in res.stderr, lines[0]
    assert not (tmp_path / "out").exists(), "nothing may start on bad input"
    assert not wait_no_children(timeout=2)


def test_the_refusal_names_every_zeromq_backend():
    with pytest.raises(InputError) as e:
        validate(RunConfig(backends=["selector"], connections=[10], zmq_client="native"))
    assert all(n in str(e.value) for n in ZMQ) and "\n" not in str(e.value)


@pytest.mark.parametrize("client,zmq_transport", [("libzmq", "zmq"), ("native", "zmtp")])
def test_the_loader_transport_of_each_kind_of_server(client, zmq_transport):
    cfg = validate(RunConfig(backends=[*ZMQ, *TCP[:3]], connections=[10], zmq_client=client))
    assert {b: cfg.loader_transport(b) for b in cfg.backends} == {
        **{b: zmq_transport for b in ZMQ}, **{b: "tcp" for b in TCP[:3]}}
    assert cfg.zmq_servers() == ZMQ
    # your own server is TCP whatever the client; a warm server (warm.py: attached, its kind kept) as it was built
    own = servers.ServerSpec("mine", "cmd", "cmd", "own", template="x --port {port}")
    warm = servers.ServerSpec("zmq_raw", "attach", "attach", "own", transport="zmq", target="127.0.0.1:1", pid=1)
    assert dataclasses.replace(cfg, own=[own]).loader_transport("mine") == "tcp"
    assert dataclasses.replace(cfg, own=[warm]).loader_transport("zmq_raw") == zmq_transport


def test_native_takes_a_rate_and_the_request_carries_zmtp_with_it():
    cfg = validate(RunConfig(backends=["zmq_raw"], connections=[10], rounds=1, extra_dims={"rate": [500]},
                             zmq_client="native"))
    (c,) = cfg.cells()
    assert cfg.arrivals == "constant"
    sent = RunRequest(target="127.0.0.1:9", connections=10, transport=cfg.loader_transport(c.backend),
                      **cell.open_loop_fields(c, cfg)).to_json()
    assert (sent["transport"], sent["rate"], sent["timeline"]) == ("zmtp", 500, cell.TIMELINE_SLICES)
    # knee's own refusal holds under libzmq only
    slo = knee_plan.parse_slo("p99<5ms")
    native = validate(RunConfig(backends=["zmq_raw"], connections=[10], zmq_client="native"))
    knee_plan.check(knee_plan.KneePlan(native, "zmq_raw", slo))
    with pytest.raises(InputError, match="add --zmq-client native"):
        knee_plan.check(knee_plan.KneePlan(validate(RunConfig(backends=["zmq_raw"], connections=[10])), "zmq_raw", slo))


def test_every_row_records_the_client_and_it_is_a_run_setting():
    interp = Interpreter("", "python", "python", "3.11.2", "cpython", True, False, "")
    for client, backends in (("native", ["zmq_raw", "selector"]), ("libzmq", ["selector"])):
        cfg = validate(RunConfig(backends=backends, connections=[10], rounds=1, zmq_client=client))
        assert [cell.base_row(c, cfg, interp)["zmq_client"] for c in cfg.cells()] == [client] * len(backends)
    assert schema.RUN_SETTINGS["zmq_client"] == "libzmq"  # rows written before the column: libzmq drove them


def _run(name: str, rows: list[dict]) -> compare.Run:
    return compare.Run(name, Path(name), name, schema.normalize(pd.DataFrame(rows)), {})


def test_compare_matches_on_it_and_fills_older_runs_with_libzmq():
    row = {"backend": "zmq_raw", "connections": 10, "pipeline": 1, "framing": "message", "msize": 64}
    old = _run("old", [row])  # before --zmq-client: no column
    new = _run("new", [row | {"zmq_client": "native"}])
    m = compare.match(old, new)
    assert m.across == {"zmq_client": ("libzmq", "native")} and len(m.pairs) == 1
    assert old.filled == ["zmq_client"]
    same = compare.match(_run("a", [row | {"zmq_client": "native"}]), _run("b", [row | {"zmq_client": "native"}]))
    assert not same.across and "zmq_client" in same.keys


def test_the_report_says_which_client_drove_the_zeromq_rows():
    tcp = {"backend": "selector", "reads": "exact"}
    zmq = {"backend": "zmq_raw", "reads": "frames"}
    assert report._zmq_client_words(pd.DataFrame([tcp | {"zmq_client": "libzmq"}])) == ""
    assert report._zmq_client_words(pd.DataFrame([zmq])) == report.ZMQ_CLIENT_WORDS["libzmq"]  # an older run
    native = report._zmq_client_words(pd.DataFrame([tcp | {"zmq_client": "native"}, zmq | {"zmq_client": "native"}]))
    assert native == report.ZMQ_CLIENT_WORDS["native"] and "ZMTP 3.0" in native


def test_ab_serves_zeromq_variants_in_turns_under_native_only():
    def plan(names: list[str], client: str) -> ab.AbPlan:
        return ab.plan(RunConfig(backends=[], connections=[10], zmq_client=client), names, [])

    assert plan(["zmq_raw", "zmq_poller"], "libzmq").method == "cells"
    native = plan(["zmq_raw", "zmq_poller"], "native")
    assert native.method == "turns"
    # the block's one request drives every variant as a warm server (warm.py) is driven: zmtp
    warm = [dataclasses.replace(v.cfg, own=[servers.ServerSpec(v.server, "attach", "attach", "own", transport="zmq",
                                                               target=f"127.0.0.1:{9000 + i}", pid=1)])
            for i, v in enumerate(native.variants)]
    assert turns.request(warm, 0.5, 0.1).to_json()["transport"] == "zmtp"
    assert plan(["zmq_raw", "selector"], "native").method == "cells"  # one loader run drives one transport
    with pytest.raises(InputError, match="TCP and ZeroMQ variants together"):
        ab.plan(RunConfig(backends=[], connections=[10], zmq_client="native"), ["zmq_raw", "selector"], [],
                method="turns")
