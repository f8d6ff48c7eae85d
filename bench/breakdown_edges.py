"""The breakdown's window edges against the wire. A server that starves connections answers its oldest
requests in bursts, and one burst follows each of netprof's marks (its reads there are ms of CPU on a
two-core host: the busy connections go quiet and the starved are served), so a mean over the window's
requests moves with where an edge falls by a millisecond. Each run: tcpdump on loopback beside
`netprof run BACKEND -c 100 --breakdown`; from the capture every request paired with its answer; then

- the loader's window placed on the wire (the offset, within ±5 ms of its nominal place after the first
  SYN, whose count and mean are nearest the loader's own);
- the parts' mean (the kernel) against the loader's mean and the wire's in that window;
- the window on the wire whose count and mean are nearest the kernel's: how late its edges were read;
- the old answers (waited over 50 ms) answered in the 10 ms after each mark, against 10 ms elsewhere.

    sudo .venv/bin/python bench/breakdown_edges.py -r 4 --share 0.5 -d 2 [--write]
    sudo .venv/bin/python bench/breakdown_edges.py --analyze RUN.json CAPTURE.pcap ... --commit HASH
    .venv/bin/python bench/breakdown_edges.py --from bench/data/breakdown_edges/FILE.json [--write]

`--analyze` reads runs made before (`netprof run ... --json` output and the capture beside it, settings
from the row and the command line): how the first figures were measured by hand, at the commit given.
"""

from __future__ import annotations

import bisect
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lib
from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.profiler.run.cell import probe_guard

DATA = lib.ROOT / "bench" / "data" / "breakdown_edges"
SECTION = "The breakdown's window edges against the wire (bench/breakdown_edges.py)"
NETPROF = lib.ROOT / ".venv" / "bin" / "netprof"
OLD_S = 0.05     # an answer this old was starved
BURST_S = 0.010  # the span after a mark where its burst is counted
SEARCH_MS = 12   # how far after the loader's marks the kernel's edges are looked for


def main() -> int:
    ap = lib.cli(__doc__, rounds=4)
    ap.add_argument("--backend", default="gunicorn_gevent")
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("-d", "--duration", type=float, default=2.0)
    ap.add_argument("--share", type=float, default=0.5, help="--probe-share of the runs")
    ap.add_argument("--warmup", type=float, default=0.2)
    ap.add_argument("--analyze", nargs="+", type=Path, metavar="RUN.json CAPTURE.pcap",
                    help="pairs of a run's --json output and its capture, made before: nothing runs")
    ap.add_argument("--commit", help="with --analyze: the commit the runs were made at")
    args = ap.parse_args()
    doc = lib.earlier(args)
    if doc is None:
        settings = {"backend": args.backend, "connections": args.connections, "duration": args.duration,
                    "share": args.share, "warmup": args.warmup}
        if args.analyze:
            if len(args.analyze) % 2 or not args.commit:
                ap.error("--analyze takes pairs RUN.json CAPTURE.pcap, and --commit the commit they were made at")
            runs = [analyze(json.loads(r.read_text())["runs"][0], packets(p), settings)
                    for r, p in zip(args.analyze[::2], args.analyze[1::2])]
        else:
            runs = [measure(settings) for _ in range(args.rounds)]
        at = {"commit": args.commit} if args.analyze else {}  # runs made before: the commit they were made at
        doc = lib.keep("breakdown_edges", DATA, suffix=f"-{args.backend}-share{args.share:g}",
                       command=" ".join(sys.argv), settings=settings, runs=runs, **at)
    s = doc["settings"]
    intro = (f"`{doc['command']}` — commit {doc['commit']}, {doc['date']}; table by {command()}. "
             f"`netprof run {s['backend']} -c {s['connections']} -d {s['duration']:g} -r 1 --warmup {s['warmup']:g} "
             f"--probe-share {s['share']:g} --breakdown`, tcpdump -i lo beside it. "
             "Raw data: bench/data/breakdown_edges/.")
    publish(SECTION, intro, table(doc["runs"]), args.write)
    return 0


def measure(settings: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        pcap, out = Path(tmp) / "lo.pcap", Path(tmp) / "run"
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", "96", "-B", "32768", "-w", str(pcap), "tcp"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert dump.stderr is not None
            line = dump.stderr.readline()  # "listening on lo ...": capturing from here
            if "listening" not in line:
                sys.exit(f"tcpdump did not start: {line.strip()}")
            res = subprocess.run([str(NETPROF), "run", settings["backend"], "-c", str(settings["connections"]),
                                  "-d", str(settings["duration"]), "-r", "1", "--warmup", str(settings["warmup"]),
                                  "--probe-share", str(settings["share"]), "--breakdown", "--no-report", "--json",
                                  "-o", str(out)], capture_output=True, text=True, timeout=300)
            time.sleep(0.3)  # the last answers and FINs into the capture
        finally:
            dump.terminate()
            dump.wait(10)
        if res.returncode != 0:
            sys.exit(f"netprof run failed: {res.stderr.strip().splitlines()[-1:]}")
        return analyze(json.loads(res.stdout)["runs"][0], packets(pcap), settings)


def packets(pcap: Path) -> list[tuple[float, str, str, int, str]]:
    """(time, source, destination, payload length, flags) of each TCP segment, decoded by tcpdump itself."""
    text = subprocess.run(["tcpdump", "-r", str(pcap), "-n", "-tt"], capture_output=True, text=True,
                          check=True).stdout
    out = []
    for line in text.splitlines():
        # 1796453374.848721 IP 127.0.0.1.53630 > 127.0.0.1.46471: Flags [S], seq ..., length 0
        parts = line.split()
        if len(parts) < 7 or parts[1] != "IP" or "length" not in parts:
            continue
        out.append((float(parts[0]), parts[2], parts[4].rstrip(":"), int(parts[parts.index("length") + 1].rstrip(",")),
                    parts[6]))
    return out


def exchanges(pkts: list) -> tuple[list[tuple[float, float]], float]:
    """Each request on the wire as (its answer's last segment, its round trip), in answer order, and the time of
    the first SYN (the server's address is the one the SYNs go to). A request is a client segment with data; its
    answer, the server's segments with data before the connection's next request (strict ping-pong)."""
    syns = [(t, dst) for t, _, dst, _, flags in pkts if flags == "[S],"]
    server = statistics.mode(dst for _, dst in syns)
    flows: dict[str, list[tuple[str, float]]] = {}
    for t, src, dst, n, _ in pkts:
        if n > 0 and dst == server:
            flows.setdefault(src, []).append(("q", t))
        elif n > 0 and src == server:
            flows.setdefault(dst, []).append(("a", t))
    done = []
    for events in flows.values():
        sent = last = None
        for kind, t in [*events, ("q", 0.0)]:  # a last request closes the one before
            if kind == "a":
                last = t
                continue
            if sent is not None and last is not None:
                done.append((last, last - sent))
            sent, last = t, None
    done.sort()
    return done, min(t for t, _ in syns)


class Wire:
    """The exchanges by answer time, with prefix sums: any window's count and mean in O(log n)."""

    def __init__(self, done: list[tuple[float, float]]) -> None:
        self.t = [a for a, _ in done]
        self.cum = [0.0]
        for _, rtt in done:
            self.cum.append(self.cum[-1] + rtt)
        self.done = done

    def window(self, lo: float, hi: float) -> tuple[int, float | None]:
        i, j = bisect.bisect_left(self.t, lo), bisect.bisect_left(self.t, hi)
        return j - i, ((self.cum[j] - self.cum[i]) / (j - i) * 1e6 if j > i else None)

    def fit(self, lo: float, hi: float, count: int, mean_us: float, starts, stops) -> tuple[float, float, int, float]:
        """The window [lo + a, hi + b) (a in starts, b in stops, s) whose count and mean are nearest these."""
        best = None
        for a in starts:
            for b in stops:
                n, m = self.window(lo + a, hi + b)
                if m is None:
                    continue
                miss = abs(n - count) / count * 20 + abs(m - mean_us) / mean_us  # a request off weighs more
                if best is None or miss < best[0]:
                    best = (miss, a, b, n, m)
        assert best is not None
        return best[1], best[2], best[3], best[4]


def analyze(row: dict, pkts: list, settings: dict) -> dict:
    done, syn = exchanges(pkts)
    wire = Wire(done)
    share, duration, warmup = settings["share"], settings["duration"], settings["warmup"]
    start = syn + warmup + (1 - share) / 2 * duration  # the loader's counted window, nominally
    stop = start + share * duration
    b, counted = row["breakdown"], row["counted"]
    steps = [x / 1e4 for x in range(-50, 51)]  # ±5 ms in 0.1-ms steps
    off = wire.fit(start, stop, counted["loader_messages"], b["rtt_mean_us"], steps, [0.0])[0]
    start, stop = start + off, stop + off
    late = [x / 1e4 for x in range(0, SEARCH_MS * 10 + 1, 2)]
    k_start, k_stop, k_n, k_mean = wire.fit(start, stop, b["requests"], b["parts_mean_us"], late, late)
    n_loader, mean_loader = wire.window(start, stop)
    # the marks of the run on the wire: the window's, and the sub-window's and its guards' when there is one
    marks = [syn + warmup + off, syn + warmup + duration + off]
    if share < 1:
        guard = probe_guard(duration, share)
        marks += [start - guard, start, stop, stop + guard]
    old = sorted(a for a, rtt in done if rtt > OLD_S)
    after = sum(bisect.bisect_left(old, m + BURST_S) - bisect.bisect_left(old, m) for m in marks)
    span = (marks[1] - marks[0]) - len(marks) * BURST_S
    elsewhere = (bisect.bisect_left(old, marks[1]) - bisect.bisect_left(old, marks[0]) - after) / span * BURST_S
    return {"msgs_per_sec": row["msgs_per_sec"], "jain": row["per_conn"]["jain"], "requests": b["requests"],
            "loader_messages": counted["loader_messages"], "parts_mean_us": b["parts_mean_us"],
            "rtt_mean_us": b["rtt_mean_us"], "start_heard_ms": counted["start_heard_ms"],
            "stop_heard_ms": counted["stop_heard_ms"], "wire_loader_window": [n_loader, mean_loader],
            "kernel_edges_late_ms": [round(k_start * 1e3, 1), round(k_stop * 1e3, 1)],
            "wire_kernel_window": [k_n, k_mean], "old_after_mark": after / len(marks),
            "old_per_10ms_elsewhere": elsewhere}


def table(runs: list[dict]) -> str:
    lines = ["| run | msgs/s | Jain | parts ÷ loader's mean | loader's mean ÷ wire's | kernel's edges late (ms) "
             "| old answers in 10 ms after a mark / elsewhere |", "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        parts, wire = r["parts_mean_us"] / r["rtt_mean_us"], r["rtt_mean_us"] / r["wire_loader_window"][1]
        late = ", ".join(f"{x:g}" for x in r["kernel_edges_late_ms"])
        lines.append(f"| {i} | {r['msgs_per_sec']:,.0f} | {r['jain']:.2f} | {parts:.3f} | {wire:.3f} | {late} "
                     f"| {r['old_after_mark']:.1f} / {r['old_per_10ms_elsewhere']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
