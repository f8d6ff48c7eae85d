// The open-loop schedule (PROTOCOL.md, "Open loop"): the intended send times of each engine thread's
// requests, computed from the schedule alone, never from when things happened, so a slow server cannot
// slow the load down (no coordinated omission). The engine starts a thread's next request at its intended
// time on any of its connections with a free slot (opening a new one when none has, up to max_connections),
// else as soon as a slot frees; latency runs from the intended time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "payload.hpp"
#include "protocol.hpp"

namespace netprof {

struct ScheduleParams {
  int64_t start = 0;      // the load's start (monotonic ns): the warm-up's beginning
  double gap_ns = 0;      // mean gap between two requests of one stream: streams / rate
  double stagger_ns = 0;  // constant: stream i's first request is i × stagger_ns (1 / rate) after start
  bool poisson = false;   // exponential gaps (mean gap_ns) instead of constant ones

  // The rate split evenly over `streams` schedules (the engine's threads, each with its own).
  static ScheduleParams make(const RunRequest& r, int64_t start, int streams) {
    ScheduleParams p;
    p.start = start;
    // At most 1e18 ns (30 years, far beyond any run): a tiny rate gives finite gaps, never inf or NaN.
    p.gap_ns = std::min(double(streams) / r.rate * 1e9, 1e18);
    p.stagger_ns = std::min(1e9 / r.rate, 1e18);
    p.poisson = r.arrivals == Arrivals::Poisson;
    return p;
  }
};

// One stream's place in its schedule: the intended time of its next request (not yet started).
class Arrival {
 public:
  // The schedule of stream `id` (an engine thread's index): its own deterministic generator (seeded
  // from the id), so runs are reproducible.
  void init(const ScheduleParams& p, uint32_t id) {
    n_ = 0;
    rng_ = splitmix64(0x6f70656e6c6f6f70ULL ^ id);  // "openloop" ^ id
    off_ns_ = p.poisson ? exp_gap(p) : double(id) * p.stagger_ns;
    base_ns_ = off_ns_;
  }
  int64_t next(const ScheduleParams& p) const { return at_ns(p, off_ns_); }
  // On to the request after it: previous intended time + gap.
  void advance(const ScheduleParams& p) {
    n_++;
    // Constant gaps from the first one times n: no rounding error piles up over a long run.
    off_ns_ = p.poisson ? off_ns_ + exp_gap(p) : base_ns_ + double(n_) * p.gap_ns;
  }
  // How many requests of the schedule, from this one on, have their intended time before `until`.
  uint64_t count_before(const ScheduleParams& p, int64_t until) const {
    if (p.poisson) {  // exponential gaps: walk a copy (a few ns per request)
      Arrival a = *this;
      uint64_t k = 0;
      for (; a.next(p) < until; a.advance(p)) k++;
      return k;
    }
    if (next(p) >= until) return 0;
    // Constant: the first index m with start + (base + m gap) >= until, estimated then made exact.
    uint64_t m = uint64_t(std::max(0.0, std::ceil((double(until - p.start) - base_ns_) / p.gap_ns)));
    m = std::max(m, n_);
    auto at = [&](uint64_t i) { return at_ns(p, base_ns_ + double(i) * p.gap_ns); };
    while (m > n_ && at(m - 1) >= until) m--;
    while (at(m) < until) m++;
    return m - n_;
  }

 private:
  // start + off, for any off: a tiny rate (gaps of years) lands far beyond any run instead of
  // overflowing int64.
  static int64_t at_ns(const ScheduleParams& p, double off_ns) { return p.start + int64_t(std::min(off_ns, 4e18)); }

  double exp_gap(const ScheduleParams& p) {
    rng_ += 0x9e3779b97f4a7c15ULL;
    const double u = double(splitmix64(rng_) >> 11) * 0x1p-53;  // [0, 1)
    return -std::log1p(-u) * p.gap_ns;
  }

  double off_ns_ = 0, base_ns_ = 0;  // intended time of the next request / of the first, ns after start
  uint64_t n_ = 0;                   // requests before the next one
  uint64_t rng_ = 0;
};

}  // namespace netprof
