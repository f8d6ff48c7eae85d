"""units: the one formatter every report uses — the unit a person reads, never 'nan', never 1e5."""

from __future__ import annotations

import math

import pytest

from netprof.profiler.core import units


@pytest.mark.parametrize(
    "us,text",
    [
        (2_113_929, "2.1 s"),  # the example
        (434_460, "434 ms"),
        (69_546, "69.5 ms"),
        (1_000, "1 ms"),
        (412, "412 µs"),
        (21.24, "21.2 µs"),
        (9.13, "9.1 µs"),
        (0.975, "975 ns"),
        (0.0412, "41.2 ns"),
        (0, "0 µs"),
    ],
)
def test_durations_pick_their_unit(us, text):
    assert units.duration_us(us) == text


@pytest.mark.parametrize(
    "v,text", [(92_345, "92.3k"), (120_000, "120k"), (1_210_000, "1.21M"), (850, "850"), (46_600.4, "46.6k")]
)
def test_rates_read_like_network_ping_test(v, text):
    assert units.rate(v) == text


def test_missing_values_are_a_dash():
    for fn in (units.duration_us, units.rate, units.count, units.per_message, units.number, units.share, units.seconds):
        assert fn(None) == "–" and fn(math.nan) == "–"


def test_interval_says_why_there_is_none():
    assert units.interval(3.2, 3) == "±3%"
    assert units.interval(math.nan, 1) == "1 round: no interval"
    assert units.interval(None, 1) == "1 round: no interval"


def test_plural_and_per_message():
    assert units.plural(1, "cell") == "1 cell" and units.plural(2, "cell") == "2 cells"
    assert units.plural(2, "anomaly", "anomalies") == "2 anomalies"
    assert units.per_message(9.0213) == "9.02" and units.per_message(0.00912) == "0.0091"
    assert units.seconds(5400) == "1.5 h" and units.seconds(120) == "2 min" and units.seconds(0.5) == "500 ms"


def test_evidence_values_carry_their_unit():
    assert units.value("latency p999 (µs)", 434_460.0) == ("latency p999", "434 ms")
    assert units.value("messages", 13_887.0) == ("messages", "13,887")
    assert units.value("Jain index (1 = fair)", 0.4) == ("Jain index (1 = fair)", "0.4")
    assert units.value("pinned", True) == ("pinned", "True")
    assert units.value("counts", [1, 2]) == ("counts", "1, 2")


def test_an_http_cell_speaks_in_requests_every_other_in_messages():
    """Issue 51: the words of one exchange have one owner; HTTP rows count requests (docs/results-format.md)."""
    assert (units.rate_unit("http"), units.per_unit("http"), units.per_abbrev("http")) == \
        ("req/s", "per request", "/req")
    assert (units.exchange("http"), units.exchanges("http")) == ("request", "requests")
    for other in ("echo", "line", None, math.nan):  # ZeroMQ rows are "echo"; None/NaN: a row older than the column
        assert (units.rate_unit(other), units.per_unit(other), units.per_abbrev(other)) == \
            ("msgs/s", "per message", "/msg")
        assert (units.exchange(other), units.exchanges(other)) == ("message", "messages")


def test_the_words_of_several_cells():
    """A frame's protocols: all HTTP → requests; none → messages; a mix names both (the rows say which is which)."""
    import pandas as pd

    assert units.rate_unit(pd.Series(["http", "http"])) == "req/s"
    assert units.rate_unit(pd.Series(["echo", None])) == units.rate_unit([]) == "msgs/s"
    assert units.rate_unit({"http", "echo"}) == "msgs/s (req/s for HTTP)"
    assert units.per_unit(["http", math.nan]) == "per message (per request for HTTP)"
    assert units.exchange_kind(["http"]) == "request" and units.exchange_kind(("echo", "line")) == "message"


def test_evidence_keys_read_in_the_cells_words():
    """summary.json keeps an evidence key as the rule wrote it; the page says it in requests for HTTP."""
    assert units.reword("epoll_ctl per message", "http") == "epoll_ctl per request"
    assert units.reword("msgs/s per round", "http") == "req/s per round"
    assert units.reword("connections serving 95% of messages", ["http"]) == "connections serving 95% of requests"
    assert units.reword("epoll_ctl per message", "echo") == "epoll_ctl per message"
    assert units.reword("msgs/s per round", ["http", "echo"]) == "msgs/s per round"  # mixed: as written
    assert units.value("futex per message", 2.0, ["http"]) == ("futex per request", "2")
    assert units.value("futex per message", 2.0) == ("futex per message", "2")


def test_calls_and_ring_leaves_out_a_ring_figure_that_rounds_to_nothing():
    """watch's table cells: syscalls, and the io_uring operations beside them when there are any to say."""
    assert units.calls_and_ring(3.06, 1.0) == "3.1 + 1.0 io_uring"
    assert units.calls_and_ring(3.8, 0.02) == units.calls_and_ring(3.8, 0) == units.calls_and_ring(3.8, None) == "3.8"
    assert units.calls_and_ring(None, 1.0) == units.DASH
