"""profiler/run/turns.py on the loader's `turns` stats (PROTOCOL.md, "Turns"), made here in its shape: rounds,
their balance, the variants' order, each variant's share of a block. The loader's own tests run it for real
(cpp_server/tests/test_turns.cpp, tests/test_loader.py, tests/test_ab.py)."""

from __future__ import annotations

import pytest

from netprof.profiler.run import turns


def served(n: int, variants: int) -> list[int]:
    """The loader's order (turn_target): rounds in order, then reversed."""
    out = []
    for k in range(n):
        r, j = divmod(k, variants)
        out.append(j if r % 2 == 0 else variants - 1 - j)
    return out


def stats(n: int, variants: int = 2) -> dict:
    s = served(n, variants)
    return {"duration_s": n * 0.1, "connected": 4 * variants, "per_conn_messages": list(range(4 * variants)),
            "turns": {"served": s, "messages": [100 * (v + 1) + k for k, v in enumerate(s)],
                      "latency_mean_us": [10.0 * (v + 1) for v in s],
                      "by_target": [{"messages": 1000 * (v + 1), "latency_us": {"p50": 1.0 + v}}
                                    for v in range(variants)]}}


def test_rounds_are_complete_even_and_before_the_last_turn():
    rounds = turns.rounds_of(stats(20)["turns"], 2)
    assert len(rounds) == 8  # 19 turns before the last: 9 complete rounds, 8 kept (an even number)
    assert [r.order for r in rounds[:3]] == [(0, 1), (1, 0), (0, 1)]
    assert sum(r.order == (0, 1) for r in rounds) == sum(r.order == (1, 0) for r in rounds)
    assert rounds[1].messages == [100 + 3, 200 + 2] and rounds[1].latency_mean_us == [10.0, 20.0]
    assert len(turns.rounds_of(stats(3)["turns"], 2)) == 1  # one round is all there is: kept
    three = turns.rounds_of(stats(13, 3)["turns"], 3)
    assert [r.order for r in three] == [(0, 1, 2), (2, 1, 0), (0, 1, 2), (2, 1, 0)]


def test_unpermute_puts_each_variant_back_in_its_place():
    rows = [{"tag": "B"}, {"tag": "A"}]  # run with B as the loader's target
    block = turns.Block([turns.Round((0, 1), [7, 5], [1.0, 2.0]), turns.Round((1, 0), [8, 6], [3.0, 4.0])], rows,
                        [[1], [2]], 1.0, 3.0)
    back = turns.unpermute(block, [1, 0])
    assert [r["tag"] for r in back.rows] == ["A", "B"] and back.per_conn == [[2], [1]]
    assert back.rounds[0].order == (1, 0) and back.rounds[0].messages == [5, 7]  # B served first, A got 5
    assert back.rounds[1].latency_mean_us == [4.0, 3.0]
    assert turns.unpermute(block, [0, 1]).rounds[0].messages == [7, 5]


def test_a_variants_share_of_a_block():
    s = turns.variant_stats(stats(20), 1, 2)
    assert s["messages"] == 2000 and s["duration_s"] == pytest.approx(1.0) and s["msgs_per_sec"] == 2000
    assert s["per_conn_messages"] == [1, 3, 5, 7] and s["connected"] == 4 and s["latency_us"] == {"p50": 2.0}


def test_whole_turns():
    assert turns.whole_turns(2.0) == 20 and turns.whole_turns(0.5) == 5
    assert turns.whole_turns(0.25) == 0 and turns.whole_turns(0.05) == 0
