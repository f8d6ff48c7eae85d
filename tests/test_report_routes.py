"""The report's table and sentence by route for a watched HTTP server (profiler/report/routes.py), from the routes a
watch writes (watch.json's `routes`, meta.json's `watch_routes`: profiler/watch/figures.py's). Pure functions of
that data: the e2e watch tests (tests/test_watch.py) check the same table in a real watch's report."""

from __future__ import annotations

from netprof.profiler.report import routes


def _route(name: str, requests: int, mean_us: float, syscalls: float | None = 3.0, parts=None) -> dict:
    return {"route": name, "requests": requests, "requests_per_sec": requests / 5,
            "server_time_us": {"mean": mean_us, "p50": mean_us * 0.9, "p99": mean_us * 3, "max": mean_us * 4},
            "syscalls_per_request": syscalls, "ring_ops_per_request": 0.0,
            "breakdown": {"requests": requests, "mean_us": mean_us, "parts_mean_us": parts or {}}}


def test_routes_are_ranked_by_their_whole_server_time_and_the_unsampled_come_last_without_a_share():
    watched = [_route("GET /", 3000, 100.0, parts={"queue_wait": 60.0, "on_cpu": 30.0, "send": 10.0}),
               _route("(unsampled)", 5000, 120.0, syscalls=None),
               _route("GET /report", 100, 9000.0, parts={"off_cpu_io": 8000.0, "on_cpu": 1000.0}),
               _route("(other)", 10, 50.0)]
    t = routes.table(watched)
    assert t is not None
    assert [r[0] for r in t["rows"]] == ["GET /report", "GET /", "(other)", "(unsampled)"]
    share = t["header"].index("share of the server time")
    # 900,000 µs of 1,200,500 followed: 75%; 300,000: 25%; 500: 0%
    assert [r[share] for r in t["rows"]] == ["75%", "25%", "0%", "–"]
    assert t["rows"][0][-1] == "off_cpu_io 8 ms (89%), on_cpu 1 ms (11%)"
    assert t["rows"][-1][-2:] == ["–", "–"]  # counted and timed only: no syscalls, no parts
    calls = t["header"].index("syscalls/req")
    assert [r[calls] for r in t["rows"][:2]] == ["3.0", "3.0"]
    watched[0]["ring_ops_per_request"] = 1.0  # work handed to io_uring (uvloop's epoll_ctl) beside the syscalls
    assert routes.table(watched)["rows"][1][calls] == "3.0 + 1.0 io_uring"
    assert "(unsampled) are the requests answered while the probes were light" in t["note"]
    assert "(other) are the requests of routes first seen after --routes were full" in t["note"]
    # the request lines; the other routes' 0.04% not worth a word
    assert routes.sentence(watched) == ("By route, GET /report took 75% of the server time (100 requests, 9 ms on "
                                        "average) and GET / 25% (3,000, 100 µs).")


def test_routes_past_the_sentences_three_are_its_rest_and_one_request_line_has_no_sentence():
    many = [_route(f"GET /r{i}", 10, 100.0 * (i + 1)) for i in range(5)]
    assert routes.sentence(many).endswith(", GET /r2 20% (10, 300 µs) and 2 other routes 20%."), routes.sentence(many)
    # one left: named, not "1 other route" (a reserved one stays unnamed: the sentence names request lines)
    four = many[1:]
    assert routes.sentence(four).endswith(", GET /r2 21% (10, 300 µs) and GET /r1 14% (10, 200 µs)."), \
        routes.sentence(four)
    assert routes.sentence([*many[2:], _route("(not HTTP)", 10, 100.0)]).endswith(" and 1 other route 8%.")
    one = [_route("GET /plaintext", 500, 80.0), _route("(not HTTP)", 3, 50.0)]
    assert routes.sentence(one) is None
    assert [r[0] for r in routes.table(one)["rows"]] == ["GET /plaintext", "(not HTTP)"]


def test_a_server_that_is_not_http_or_routes_not_told_apart_has_no_table():
    assert routes.table([_route("(not HTTP)", 900, 70.0), _route("(unsampled)", 100, 70.0)]) is None
    assert routes.table([_route("(other)", 900, 70.0)]) is None  # --routes 3
    assert routes.table(None) is None and routes.sentence(None) is None  # a run's meta: no watch_routes
    assert routes.table([_route("GET /", 0, 0.0)]) is None  # no request answered


def test_a_route_is_shown_as_text_whatever_bytes_it_holds():
    """A route is what a client sent (the kernel folds ids, docs/watch.md): control characters do not reach the page."""
    t = routes.table([_route("GET /a\x1b[31mb", 10, 100.0)])
    assert "\x1b" not in t["rows"][0][0]
