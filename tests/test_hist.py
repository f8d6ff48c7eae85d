"""profiler/model/hist.py against the loader's own histogram (cpp_server/src/histogram.cpp, PROTOCOL.md
"Histograms"), and the merge of several loaders' stats (profiler/run/link/loaderset.py)."""

from __future__ import annotations

import math
import random
import socket
import threading

import pytest

from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.model import hist
from netprof.profiler.run.link import loaderset
from netprof.profiler.run.loader_client import Loader, RunRequest

pytestmark = pytest.mark.concurrent  # histograms and merged counts; both loaders' windows start at one scheduled time


def _exact(values: list[int], q: float) -> int:
    """The ceil(q·n)-th smallest value: the sample the loader's percentile stands for."""
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def test_bucket_arithmetic_round_trips_and_bounds_the_error():
    for ns in [0, 1, 127, 128, 129, 255, 256, 1000, 65_432, 10**6 + 7, 59_999_999_999]:
        i = hist.index_of(ns)
        assert hist.lower_of(i) <= ns < hist.lower_of(i) + hist.width_of(i)
        assert hist.width_of(i) <= max(1, hist.lower_of(i) / 128)


def test_merged_percentiles_are_the_concatenated_samples_to_the_bucket_resolution():
    rng = random.Random(7)
    a = [int(rng.lognormvariate(11, 0.6)) for _ in range(20_000)]  # ~60 µs, a tail to a few ms
    b = [int(rng.lognormvariate(12.5, 0.9)) for _ in range(5_000)]  # another host's, slower
    ha, hb = hist.Hist(), hist.Hist()
    for v in a:
        ha.record(v)
    for v in b:
        hb.record(v)
    merged = ha.merge(hb)
    assert merged.count == len(a) + len(b) and merged.sum_ns == sum(a) + sum(b)
    for _, q in hist.QUANTILES:
        want = _exact(a + b, q)
        assert abs(merged.quantile(q) - want) <= want / 128 + 1, q
    # averaging the two medians would not do: it misses the merged one by far here
    assert abs((ha.quantile(0.5) + hb.quantile(0.5)) / 2 - _exact(a + b, 0.5)) > _exact(a + b, 0.5) / 2


@pytest.fixture
def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)

    def serve(conn):
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                pass

    def accept():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    srv.close()


def test_python_reads_the_loaders_histogram_as_the_loader_does(echo_server):
    """Recomputed here from the loader's buckets, every latency figure equals the loader's own."""
    with ProcessGroup() as group:
        loader = Loader.start(group)
        stats = loader.run(RunRequest(target=echo_server, connections=4, duration=0.4, warmup=0.05,
                                      probe_share=0.3, histograms=True), timeout=30)
    phases = stats["phases"]
    for lat in (stats["latency_us"], phases["unprobed"]["latency_us"], phases["probed"]["latency_us"]):
        mine = hist.Hist.from_latency(lat).latency_us()
        assert {k: mine[k] for k in lat if k != "hist"} == {k: v for k, v in lat.items() if k != "hist"}


def test_two_loaders_merge_into_one_stats_object(echo_server):
    """Two real loaders at once (what two hosts do); the set's merged stats add up and keep the shape (with
    --warmup-after served, its figures too)."""
    with ProcessGroup() as group:
        loaders = [Loader.start(group), Loader.start(group)]
        ls = loaderset.LoaderSet(loaders, [["127.0.0.1"], ["127.0.0.1"]], ["a", "b"], [0.0, 0.0])
        events = []
        merged = ls.run(RunRequest(target=echo_server, connections=5, duration=0.4, warmup=0.05, probe_share=0.3,
                                   warmup_after="served"), on_event=events.append, timeout=30)
    each = merged["loaders"]
    assert each["hosts"] == "a,b" and each["connections"] == "3,2"
    assert merged["connections"] == 5 and len(merged["per_conn_messages"]) == 5
    assert merged["messages"] == sum(merged["per_conn_messages"]) == sum(map(int, each["messages"].split(",")))
    assert merged["msgs_per_sec"] == pytest.approx(sum(map(float, each["msgs_per_sec"].split(","))))
    un, pr = merged["phases"]["unprobed"], merged["phases"]["probed"]
    assert un["messages"] + pr["messages"] == merged["messages"] and len(un["per_conn_messages"]) == 5
    assert un["latency_us"]["count"] == un["messages"] and "hist" not in un["latency_us"]
    assert merged["loaders"]["window_skew_s"] < 0.002  # one start_at for both: their windows begin together
    # every connection answered once before the warm-up, on either loader; the slower loader's time
    assert (merged["served_first"]["served"], merged["served_first"]["unserved"]) == (5, 0), merged["served_first"]
    assert 0 <= merged["served_first"]["s"] <= merged["setup_s"]
    assert [e["event"] for e in events if e["event"] in ("measure_start", "measure_stop")] == ["measure_start",
                                                                                                "measure_stop"]


def test_two_loaders_share_the_rate_and_the_connection_cap(echo_server):
    """Open loop over two loaders: each gets its share of the rate and of --max-connections (the cap's shares add
    up to it), and the merged open-loop figures keep the loader's shape (connect_us: the worse loader's)."""
    with ProcessGroup() as group:
        loaders = [Loader.start(group), Loader.start(group)]
        ls = loaderset.LoaderSet(loaders, [["127.0.0.1"], ["127.0.0.1"]], ["a", "b"], [0.0, 0.0])
        merged = ls.run(RunRequest(target=echo_server, connections=2, duration=0.4, warmup=0.05, rate=1000,
                                   max_connections=9), timeout=30)
    ol = merged["open_loop"]
    assert merged["rate"] == pytest.approx(1000) and ol["max_connections"] == 9, ol
    assert 2 <= ol["conns_max"] <= 9 and set(ol["connect_us"]) == {"p50", "p99", "max"}, ol
    assert sum(merged["per_conn_messages"]) + ol["messages_on_opened"] == merged["messages"]


def test_split_gives_every_host_its_share():
    assert loaderset.split(100, 2) == [50, 50] and loaderset.split(5, 3) == [2, 2, 1]
    assert sum(loaderset.split(7, 4)) == 7
