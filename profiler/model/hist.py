"""The loader's latency histogram on the Python side: its buckets read from a stats object, merged, and its
percentiles computed exactly as the loader computes them (cpp_server/src/histogram.cpp; PROTOCOL.md,
"Histograms"). Several loaders' latencies are merged bucket by bucket, never by averaging percentiles.

Log-linear buckets over nanoseconds: values below 2^SUB_BITS are exact; above, each power-of-two range is
split into 2^SUB_BITS buckets. tests/test_hist.py checks this side against the loader's own figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SUB_BITS = 7
SUB = 1 << SUB_BITS
MAX_TRACKABLE_NS = 60_000_000_000
QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))


def index_of(ns: int) -> int:
    if ns < SUB:
        return ns
    shift = ns.bit_length() - 1 - SUB_BITS
    return (shift + 1) * SUB + ((ns >> shift) - SUB)


def lower_of(index: int) -> int:
    if index < SUB:
        return index
    return (index % SUB + SUB) << (index // SUB - 1)


def width_of(index: int) -> int:
    return 1 if index < SUB else 1 << (index // SUB - 1)


def _us(ns: float) -> float:
    """ns → µs as the loader prints it: std::round (half away from zero), then / 1000."""
    return math.floor(ns + 0.5) / 1000.0


@dataclass
class Hist:
    buckets: dict[int, int] = field(default_factory=dict)  # index → count
    count: int = 0
    sum_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0

    @classmethod
    def from_latency(cls, latency: dict) -> Hist:
        """From a stats latency object that carries `hist` (a request with "histograms": true)."""
        h = latency["hist"]
        if h.get("sub_bits") != SUB_BITS:
            raise ValueError(f"histogram with sub_bits {h.get('sub_bits')}, this netprof reads {SUB_BITS}")
        buckets = {int(i): int(n) for i, n in h["buckets"]}
        return cls(buckets, sum(buckets.values()), int(h["sum_ns"]), int(h["min_ns"]), int(h["max_ns"]))

    def record(self, ns: int) -> None:
        i = index_of(min(ns, MAX_TRACKABLE_NS))
        self.buckets[i] = self.buckets.get(i, 0) + 1
        self.min_ns = ns if self.count == 0 else min(self.min_ns, ns)
        self.max_ns = max(self.max_ns, ns)
        self.count += 1
        self.sum_ns += ns

    def merge(self, other: Hist) -> Hist:
        buckets = dict(self.buckets)
        for i, n in other.buckets.items():
            buckets[i] = buckets.get(i, 0) + n
        if not self.count or not other.count:
            lo = self.min_ns if self.count else other.min_ns
        else:
            lo = min(self.min_ns, other.min_ns)
        return Hist(buckets, self.count + other.count, self.sum_ns + other.sum_ns, lo, max(self.max_ns, other.max_ns))

    def quantile(self, q: float) -> float:
        """ns at quantile q, as Histogram::quantile: the exact extremes, else the midpoint of the bucket of
        the ceil(q × count)-th value, clamped to [min, max]."""
        if self.count == 0:
            return 0.0
        q = min(max(q, 0.0), 1.0)
        rank = max(1, math.ceil(q * self.count))
        if rank >= self.count:
            return float(self.max_ns)
        if rank == 1:
            return float(self.min_ns)
        seen = 0
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                mid = float(lower_of(i)) + float(width_of(i) - 1) / 2.0
                return min(max(mid, float(self.min_ns)), float(self.max_ns))
        return float(self.max_ns)

    def latency_us(self) -> dict:
        """The stats' latency object (same keys and rounding as the loader's), with its `hist`."""
        out: dict[str, object] = {k: _us(self.quantile(q)) for k, q in QUANTILES}
        out.update(max=_us(float(self.max_ns)), mean=_us(self.sum_ns / self.count if self.count else 0.0),
                   count=self.count)
        out["hist"] = {"sub_bits": SUB_BITS, "min_ns": self.min_ns if self.count else 0, "max_ns": self.max_ns,
                       "sum_ns": self.sum_ns, "buckets": [[i, self.buckets[i]] for i in sorted(self.buckets)]}
        return out


def merge_latency(objects: list[dict]) -> dict:
    """Several loaders' latency objects (each with `hist`) as one."""
    total = Hist()
    for obj in objects:
        total = total.merge(Hist.from_latency(obj))
    return total.latency_us()
