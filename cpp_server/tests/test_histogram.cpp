#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "histogram.hpp"

using netprof::Histogram;

// Every value from 1 µs to 60 s (log-spaced, plus awkward points) is reported within 1%.
TEST(Histogram, SingleValueRelativeErrorBelowOnePercentFrom1usTo60s) {
  double worst = 0;
  for (double v = 1000; v <= 60e9; v *= 1.0137) {
    for (uint64_t x : {uint64_t(v), uint64_t(v) + 1, uint64_t(v) - 1}) {
      Histogram h;
      h.record(x);
      // min/max clamping would hide bucket error for a single value: check the bucket itself too.
      size_t i = Histogram::index_of(x);
      ASSERT_GE(x, Histogram::lower_of(i));
      ASSERT_LT(x, Histogram::lower_of(i) + Histogram::width_of(i));
      double mid = double(Histogram::lower_of(i)) + double(Histogram::width_of(i) - 1) / 2;
      worst = std::max(worst, std::abs(mid - double(x)) / double(x));
      EXPECT_DOUBLE_EQ(h.quantile(0.5), double(x));
    }
  }
  EXPECT_LE(worst, 0.01);
  EXPECT_LE(worst, 1.0 / 256 + 1e-9);  // the design bound: half a bucket of 1/128
}

TEST(Histogram, BucketsAreContiguousAndOrdered) {
  for (size_t i = 1; i <= Histogram::index_of(Histogram::kMaxTrackable); i++)
    ASSERT_EQ(Histogram::lower_of(i), Histogram::lower_of(i - 1) + Histogram::width_of(i - 1)) << i;
  for (uint64_t v = 0; v < 100000; v++)
    ASSERT_EQ(Histogram::index_of(Histogram::lower_of(Histogram::index_of(v))), Histogram::index_of(v));
}

TEST(Histogram, PercentilesMatchExactOnesWithinOnePercent) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(std::log(80e3), 1.2);  // ~80 µs median, long tail
  Histogram h;
  std::vector<uint64_t> xs;
  for (int i = 0; i < 200000; i++) {
    uint64_t v = std::clamp<uint64_t>(uint64_t(dist(rng)), 1000, 60'000'000'000ULL);
    xs.push_back(v);
    h.record(v);
  }
  std::sort(xs.begin(), xs.end());
  for (double q : {0.5, 0.9, 0.95, 0.99, 0.999}) {
    double exact = double(xs[size_t(std::ceil(q * double(xs.size()))) - 1]);
    EXPECT_NEAR(h.quantile(q), exact, exact * 0.01) << "q=" << q;
  }
  EXPECT_EQ(h.max(), xs.back());
  EXPECT_EQ(h.quantile(1.0), double(xs.back()));
  EXPECT_EQ(h.count(), xs.size());
  double sum = 0;
  for (auto x : xs) sum += double(x);
  EXPECT_NEAR(h.mean(), sum / double(xs.size()), 1e-6 * sum / double(xs.size()));
}

TEST(Histogram, SmallCountsAndUniformDistribution) {
  Histogram h;
  for (uint64_t us = 1; us <= 100; us++) h.record(us * 1000);  // 1..100 µs
  EXPECT_NEAR(h.quantile(0.5), 50e3, 50e3 * 0.01);
  EXPECT_NEAR(h.quantile(0.9), 90e3, 90e3 * 0.01);
  EXPECT_NEAR(h.quantile(0.99), 99e3, 99e3 * 0.01);
  EXPECT_EQ(h.quantile(0.0), 1000.0);  // rank 1 = the minimum
  EXPECT_DOUBLE_EQ(h.mean(), 50.5e3);
}

TEST(Histogram, EmptyAndMergeAndClamp) {
  Histogram a, b;
  EXPECT_EQ(a.quantile(0.99), 0.0);
  EXPECT_EQ(a.mean(), 0.0);
  a.record(1000);
  b.record(3000);
  b.record(120'000'000'000ULL);  // 120 s: beyond the range, clamped into the top bucket
  a.merge(b);
  EXPECT_EQ(a.count(), 3u);
  EXPECT_EQ(a.max(), 120'000'000'000ULL);  // max stays exact
  EXPECT_EQ(a.quantile(1.0), 120e9);
  EXPECT_NEAR(a.quantile(0.5), 3000, 30);
}
