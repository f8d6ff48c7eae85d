"""Open-loop load for real (issue 34's acceptance; issue 51's with the connection cap lowered to -c): selector
with a blocking 1 ms handler over 10 connections serves about 1,000 msgs/s. Asked for 500/s it keeps up, each
request waiting only for its own handler; asked for 2,000/s it falls behind, and the latency from each
request's intended send time grows with the queue in the loader, which the latency from the actual send does
not show.

The queue at 2,000/s: requests come due at 2,000/s and leave at ~1,000/s, so the one due at t seconds
after the load began is answered at ~2t, its latency from its intended time ~t (the schedule runs
through the 1 s warm-up). A request answered in the 3 s window (1 … 4 s) was due at 0.5 … 2 s: the
window's p50 is above 1 s and its p99 near 2 s, so `-d 3` holds the 0.5 s of the acceptance with room
(any window from 1 s on would: even a schedule that began with the window gives a p99 near d/2).
"""

from __future__ import annotations

import json
import math

import pandas as pd

from helpers import run_netprof, wait_no_children


def test_open_loop_under_and_over_capacity(tmp_path):
    out = tmp_path / "run"
    # --max-connections 10: the loader keeps its 10 connections (it would open more as requests need them, up
    # to 1,000: the queue would then wait in the server's sockets instead of the loader, and `behind` count only
    # once the cap is reached; tests/test_loader.py's connections-as-needed test shows that).
    res = run_netprof("run", "selector", "--work", "sleep:1000", "-c", "10", "--rate", "500,2000", "-d", "2",
                      "--max-connections", "10",
                      "-r", "1", "--no-probes", "--wait", "--json", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    rows = {r["rate"]: r for r in summary["runs"]}
    assert sorted(rows) == [500, 2000] and all(r["status"] == "ok" for r in rows.values()), summary["runs"]
    assert all(r["arrivals"] == "constant" and r["max_connections"] == 10 for r in rows.values())
    assert all(r["open_loop"]["conns_max"] == 10 and r["open_loop"]["conns_opened"] == 0 for r in rows.values())

    under, over = rows[500], rows[2000]
    # 500/s: achieved within ±2%, p50 from the intended time = the 1 ms handler and little else: at most 2.5 of the
    # handler's time on this hour (its service time, 1 / the rate the same run served at 2,000/s: ~1 ms when a 1-ms
    # sleep wakes on time), and more by the queueing that the utilization implies once it is over one half (a host
    # whose wake-ups are late serves fewer a second: fresh-clone run of 2026-12-02, p50 9.9 ms on an hour of 22-33%
    # steal). 2.5 ms on an hour that serves 1,000/s.
    assert abs(under["msgs_per_sec"] - 500) <= 10, under["msgs_per_sec"]
    service_us = 1e6 / over["msgs_per_sec"]
    load = 500 * service_us / 1e6
    bound = 2.5 * service_us * max(1.0, 0.5 / max(1 - load, 0.05))
    assert 1_000 <= under["lat_us"]["p50"] <= bound, (under["lat_us"], over["msgs_per_sec"], bound)
    # kept up: a request waits for a connection only when all 10 are busy, i.e. when the one due 10 intervals (20 ms)
    # before it is still unanswered: no more waited than the run's own latencies say took over 20 ms (the smallest
    # of its quantiles' tail shares under which they stay), 1% on an hour whose p99 is under it (the overloaded
    # rule's). A host that stalls the server now and then makes a few wait: 6 of 1,000 beside bench/bystander.py
    # (p99 22 ms); 30 of 990 on an hour of 10-16% steal that served 730/s (p99 31 ms), 2026-12-02.
    lat = under["lat_us"]
    slow_share = min([s for q, s in (("p90", 0.1), ("p95", 0.05), ("p99", 0.01)) if lat[q] <= 20_000], default=1)
    assert under["open_loop"]["achieved_share"] > 0.98, under["open_loop"]
    assert under["open_loop"]["behind_share"] <= max(0.01, slow_share), (under["open_loop"], lat)
    # never sent by the window's end: none but those due within the loader's latest wake-up before its end (a slow
    # hour's timer: fresh187 of 2026-12-06 left 1 of 1,000 unsent with its schedule lateness up to 3.3 ms)
    late_s = (under["open_loop"].get("schedule_late_us.max") or 0) / 1e6
    assert under["open_loop"]["queued_at_end"] <= math.ceil(500 * late_s), under["open_loop"]

    # 2,000/s: the server's ~1,000/s, requests behind, seconds of latency from the intended time ...
    assert over["msgs_per_sec"] <= 1_150, over["msgs_per_sec"]
    assert over["lat_us"]["p99"] >= 500_000, over["lat_us"]
    # behind: sent late; queued_at_end: never sent. A host that served the backlog slowly enough spends the whole
    # window sending the warm-up's queue, so none of the window's own requests goes out and `behind` is 0 while
    # all 4,000 wait (fresh-clone run of 2026-12-02 at 25-47% steal: sent 0, queued at the end 4,103)
    ol = over["open_loop"]
    assert ol["behind"] + ol["queued_at_end"] > 0.1 * ol["intended"], ol
    # ... and only the queue of 10 connections × 1 ms from the actual send
    assert over["lat_sent_us"]["p99"] < over["lat_us"]["p99"] / 10, over["lat_sent_us"]

    # Latency through the window: flat when the server keeps up; under overload the queue grows for the whole
    # window, so the last slice's requests waited ~(2000 − 1000)/1000 × 2 s longer than the first's.
    # Flat: tens of milliseconds at worst, an order below the overload's growth of a second over the same window
    # (55 ms once, fresh clone beside the bystander on a slow hour, 2026-12-02: the host's stalls, not a queue)
    assert under["open_loop"]["p99_last_slice_us"] < 100_000, under["open_loop"]
    assert over["open_loop"]["p99_growth"] > 2, over["open_loop"]
    assert over["open_loop"]["p99_last_slice_us"] - over["open_loop"]["p99_first_slice_us"] > 1e6, over["open_loop"]
    timeline = pd.read_parquet(out / "timeline.parquet")
    assert sorted(timeline["rate"].unique()) == [500, 2000] and set(timeline["slice"]) == set(range(20))
    for rate, row in rows.items():  # every answered message of the window falls in one slice
        assert timeline[timeline["rate"] == rate]["messages"].sum() == row["messages"], rate

    found = [a for a in summary["anomalies"] if a["id"] == "overloaded"]
    assert len(found) == 1 and found[0]["evidence"]["asked (requests/s)"] == 2000, summary["anomalies"]
    ev = found[0]["evidence"]
    assert ev["p99 in the window's last slice (µs)"] > ev["p99 in the window's first slice (µs)"], ev
    # (No assertion on loader_late: on a busy 2-CPU host a few sends at 500/s come later than 1 ms.)
    assert any(p.endswith("latency_load.svg") for p in summary["artifacts"]["plots"])
    assert any(p.endswith("latency_time.svg") for p in summary["artifacts"]["plots"])
    md = (out / "report.md").read_text()
    assert "at 2,000/s" in md
    # every cell at a set rate: beside the headline table, latency against load (throughput bars would draw the rates)
    assert "(plots/latency_load.svg)" in md.split("## What ran")[0] and "(plots/throughput.svg)" not in \
        md.split("## What ran")[0], md[:3000]
    assert not wait_no_children()
