// CLOCK_MONOTONIC: the same clock as Python's time.monotonic(), so event times line up with probes.
#pragma once

#include <time.h>

#include <cstdint>

namespace netprof {

inline int64_t now_ns() {
  timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);  // cannot fail: CLOCK_MONOTONIC always exists, &ts is valid
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
inline double ns_to_s(int64_t ns) { return double(ns) / 1e9; }
inline int64_t s_to_ns(double s) { return int64_t(s * 1e9); }
inline timespec ns_to_timespec(int64_t ns) {
  if (ns < 0) ns = 0;
  return timespec{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
}

}  // namespace netprof
