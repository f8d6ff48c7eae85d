"""One block of turns (netprof ab's default method): the variants' warm servers served one at a time by one
loader run, in turns of a tenth of a second (PROTOCOL.md, "Turns": A B, B A, …). What a block gives:

- its rounds: per round of turns (one turn per variant, in the order served) each variant's messages over
  its turn, the throughput figure compared round by round (neighbouring turns see the host at the same
  speed, which cells a second apart do not: bench/ab_turns.py);
- per variant, a row as a cell's (cell.measure_row) from its share of the block: the messages, latency and
  per-connection counts the loader kept for its target, its server's /proc CPU over the whole window (the
  server works only in its own turns and on the replies still in flight after them, so CPU per message is
  exact), its messages per second over its own turns.

The last turn of the window is not in any round: the replies to what it sent may still be on the way when
the window ends. The rounds kept are an even number, so each order of the variants comes as often as its
reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from netprof.profiler.run.interpreters import Interpreter
from netprof.profiler.run.loader_client import Loader, LoaderError, RunRequest
from netprof.profiler.run.plan import RunConfig

TURN_S = 0.1  # 2 turns per 0.2 s: well inside the host's speed regimes (0.3-3 s), long enough for ~1,000 messages


@dataclass
class Round:
    order: tuple[int, ...]  # the variants in the order their turns came
    messages: list[int]  # per variant (index), messages sent in its turn and answered in the window
    latency_mean_us: list[float]  # per variant, their mean latency (0: none)


@dataclass
class Block:
    rounds: list[Round] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # per variant: its row (cell.measure_row's figures)
    per_conn: list[list[int]] = field(default_factory=list)  # per variant: its connections' messages
    t_start: float = 0.0  # the window (monotonic, the loader's clock)
    t_stop: float = 0.0
    error: str | None = None  # the loader failed: why (rows and rounds then empty)


def whole_turns(window: float, turn: float = TURN_S) -> int:
    """How many turns a window holds: 0 when it is not a whole number of them."""
    n = round(window / turn)
    return n if n > 0 and abs(n * turn - window) <= 1e-6 * window else 0


def rounds_of(turns: dict, variants: int) -> list[Round]:
    """The complete rounds of the loader's `turns` stats before the window's last turn, an even number of them
    (when there are two or more): every order of the variants then comes as often as its reverse, so a variant
    served first in a round (just after its own turn) is not favoured."""
    served, msgs, lat = turns["served"], turns["messages"], turns["latency_mean_us"]
    n = (len(served) - 1) // variants
    out = []
    for r in range(n - n % 2 if n >= 2 else n):
        ks = range(r * variants, (r + 1) * variants)
        m, mean = [0] * variants, [0.0] * variants
        for k in ks:
            m[served[k]], mean[served[k]] = int(msgs[k]), float(lat[k])
        out.append(Round(tuple(served[k] for k in ks), m, mean))
    return out


def unpermute(block: Block, perm: list[int]) -> Block:
    """A block run with the variants in the order `perm` (position j held variant perm[j]), back in the
    variants' own order."""
    back = [perm.index(i) for i in range(len(perm))]
    rounds = [Round(tuple(perm[j] for j in r.order), [r.messages[j] for j in back],
                    [r.latency_mean_us[j] for j in back]) for r in block.rounds]
    return Block(rounds, [block.rows[j] for j in back], [block.per_conn[j] for j in back], block.t_start,
                 block.t_stop, block.error)


def variant_stats(stats: dict, i: int, variants: int) -> dict:
    """Variant i's share of a block's stats, in the shape of one target's stats (what measure_row reads): its
    target's messages and latency, its connections (every `variants`-th), its turns' share of the window."""
    target = stats["turns"]["by_target"][i]
    duration = stats["duration_s"] / variants
    per_conn = stats.get("per_conn_messages", [])[i::variants]
    return {"messages": target["messages"], "duration_s": duration,
            "msgs_per_sec": target["messages"] / duration if duration else 0.0,
            "latency_us": target["latency_us"], "per_conn_messages": per_conn,
            "connected": (stats.get("connected") or 0) // variants, "setup_s": stats.get("setup_s"),
            "errors": stats.get("errors", {}), "loader_cpu": stats.get("loader_cpu", {}),
            "unanswered": {}}  # the loader counts those over all targets: not one variant's


def request(cfgs: list[RunConfig], window: float, warmup: float, turn: float = TURN_S) -> RunRequest:
    """The block's loader request: every variant's server (cfg.own[0], attached) in turns, each with the
    cell's connections; the load's shape (size, pipeline, protocol, transport) is the first variant's, as every
    variant's is the same (ab.choose_method keeps variants the loader drives differently out of turns)."""
    cfg = cfgs[0]
    cell = next(cfg.combinations(0))
    targets = [c.own[0].target for c in cfgs]
    return RunRequest(target=targets[0], alternate=targets[1:], turn=turn, connections=cell.connections * len(cfgs),
                      msize=cfg.msize, duration=window, warmup=warmup, pipeline=cell.pipeline, think=cfg.think,
                      sources=list(cfg.sources), transport=cfg.loader_transport(cell.backend),
                      **cfg.protocol_fields())


def run_block(cfgs: list[RunConfig], interps: list[Interpreter], loader: Loader, round_no: int, window: float,
              warmup: float, turn: float = TURN_S) -> Block:
    """One loader run over the variants' servers in turns; each variant's row is tagged as its cells are
    (cfg.extra_dims) and numbered `round_no`."""
    # Here, not at the top: cell imports pandas, and ab's plan reads TURN_S and whole_turns before it has checked
    # its input (a refused `netprof ab` leaves without loading what measures).
    from netprof.profiler.run import cell as cell_mod

    marks = [cell_mod.Marks(c.own[0].pid) for c in cfgs]

    def on_event(evt: dict) -> None:
        for m in marks:
            m(evt)

    block = Block()
    try:
        stats = loader.run(request(cfgs, window, warmup, turn), on_event=on_event)
    except LoaderError as e:
        block.error = f"loader: {e.kind}: {e.message}"
        return block
    finally:
        for m in marks:
            m.close()
    if not stats or "turns" not in stats:
        block.error = "the loader returned no turns (an older netprof-loader?)"
        return block
    n = len(cfgs)
    block.t_start, block.t_stop = stats.get("t_start", 0.0), stats.get("t_stop", 0.0)
    block.rounds = rounds_of(stats["turns"], n)
    for i, (cfg, interp, m) in enumerate(zip(cfgs, interps, marks)):
        cell = next(cfg.combinations(round_no))
        row = cell_mod.base_row(cell, cfg, interp)
        share = variant_stats(stats, i, n)
        cell_mod.measure_row(row, share, m, ())
        row["status"], row["error"] = ("ok", None) if share["messages"] else ("failed", "stalled: no message "
                                                                             "completed in its turns")
        block.rows.append(row)
        block.per_conn.append(list(share["per_conn_messages"]))
    return block
