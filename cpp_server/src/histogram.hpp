// Latency histogram: HdrHistogram-style log-linear buckets over nanoseconds.
//
// Why our own and not a library: Debian 12 has no C++ HdrHistogram package (`apt-cache search
// hdrhistogram` lists only the Go and Java ports), and the part we need is ~80 lines.
//
// Values below 2^kSubBits ns are stored exactly; above, each power-of-two range is split into
// 2^kSubBits equal buckets, so a bucket is at most 1/128 of its lower bound wide. Reporting the bucket
// midpoint bounds the relative error by 1/256 (0.4%), well inside the 1% the protocol promises.
// Tracked range: 1 ns .. 60 s (larger values are clamped into the top bucket; max stays exact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace netprof {

class Histogram {
 public:
  static constexpr int kSubBits = 7;                            // 128 sub-buckets per octave
  static constexpr uint64_t kMaxTrackable = 60'000'000'000ULL;  // 60 s in ns

  Histogram();

  void record(uint64_t ns);
  void merge(const Histogram& other);

  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }  // exact, ns
  uint64_t min() const { return count_ ? min_ : 0; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0.0; }
  uint64_t sum() const { return sum_; }                              // ns
  const std::vector<uint64_t>& buckets() const { return buckets_; }  // by index_of (PROTOCOL.md, "Histograms")
  // Value (ns) at quantile q in [0, 1]: exact min/max for the first/last rank, otherwise the midpoint of the bucket
  // holding the ceil(q * count)-th smallest value (clamped to min/max). 0 when empty.
  double quantile(double q) const;

  // Bucket arithmetic, public for the unit tests.
  static size_t index_of(uint64_t ns);
  static uint64_t lower_of(size_t index);
  static uint64_t width_of(size_t index);

 private:
  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0, sum_ = 0, max_ = 0, min_ = UINT64_MAX;
};

}  // namespace netprof
