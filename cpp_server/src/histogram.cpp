#include "histogram.hpp"

#include <algorithm>
#include <cmath>

namespace netprof {

namespace {
constexpr uint64_t kSub = 1ULL << Histogram::kSubBits;
inline int msb(uint64_t v) { return 63 - __builtin_clzll(v); }
}  // namespace

size_t Histogram::index_of(uint64_t ns) {
  if (ns < kSub) return size_t(ns);  // exact region
  int shift = msb(ns) - kSubBits;    // >= 0; bucket width is 2^shift
  uint64_t sub = ns >> shift;        // in [kSub, 2*kSub)
  return size_t((uint64_t(shift) + 1) * kSub + (sub - kSub));
}

uint64_t Histogram::lower_of(size_t index) {
  if (index < kSub) return index;
  uint64_t shift = index / kSub - 1;
  uint64_t sub = index % kSub + kSub;
  return sub << shift;
}

uint64_t Histogram::width_of(size_t index) {
  if (index < kSub) return 1;
  return 1ULL << (index / kSub - 1);
}

Histogram::Histogram() : buckets_(index_of(kMaxTrackable) + 1, 0) {}

void Histogram::record(uint64_t ns) {
  buckets_[index_of(std::min(ns, kMaxTrackable))]++;
  count_++;
  sum_ += ns;
  max_ = std::max(max_, ns);
  min_ = std::min(min_, ns);
}

void Histogram::merge(const Histogram& o) {
  for (size_t i = 0; i < buckets_.size(); i++) buckets_[i] += o.buckets_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  max_ = std::max(max_, o.max_);
  min_ = std::min(min_, o.min_);
}

double Histogram::quantile(double q) const {
  if (count_ == 0) return 0.0;
  q = std::clamp(q, 0.0, 1.0);
  uint64_t rank = std::max<uint64_t>(1, uint64_t(std::ceil(q * double(count_))));
  if (rank >= count_) return double(max_);  // the extremes are known exactly
  if (rank == 1) return double(min_);
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); i++) {
    seen += buckets_[i];
    if (seen >= rank) {
      // Midpoint of [lower, lower + width): halves the worst-case error of reporting the lower edge.
      double mid = double(lower_of(i)) + double(width_of(i) - 1) / 2.0;
      return std::clamp(mid, double(min_), double(max_));
    }
  }
  return double(max_);
}

}  // namespace netprof
