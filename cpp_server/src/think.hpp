// Think time: the pause between an echo's arrival and the next ping it releases.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>

namespace netprof {

struct Think {
  enum Kind { None, Fixed, Uniform, Poisson } kind = None;
  double a_us = 0, b_us = 0;  // fixed: a; uniform: [a, b]; poisson: mean a

  static constexpr double kMaxUs = 60e6;  // a pause longer than a minute is surely a typo

  // "none" | "fixed:US" | "uniform:MIN-MAX" | "poisson:MEAN"; nullopt (with *why) when invalid.
  static std::optional<Think> parse(const std::string& spec, std::string* why) {
    auto num = [](const std::string& s, double* out) {
      if (s.empty()) return false;
      size_t used = 0;
      try {
        *out = std::stod(s, &used);
      } catch (...) {
        return false;
      }
      return used == s.size() && *out >= 0 && *out <= kMaxUs;
    };
    Think t;
    auto colon = spec.find(':');
    std::string kind = spec.substr(0, colon), arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
    bool ok = false;
    if (spec == "none") {
      ok = true;
    } else if (kind == "fixed") {
      t.kind = Fixed;
      ok = num(arg, &t.a_us);
    } else if (kind == "poisson") {
      t.kind = Poisson;
      ok = num(arg, &t.a_us);
    } else if (kind == "uniform") {
      t.kind = Uniform;
      auto dash = arg.find('-');
      ok = dash != std::string::npos && num(arg.substr(0, dash), &t.a_us) && num(arg.substr(dash + 1), &t.b_us) &&
           t.a_us <= t.b_us;
    }
    if (!ok) {
      if (why)
        *why =
            "think must be none, fixed:US, uniform:MIN-MAX (MIN<=MAX) or poisson:MEAN with microseconds in 0..6e7, got "
            "'" +
            spec + "'";
      return std::nullopt;
    }
    return t;
  }

  bool active() const { return kind != None && !(kind != Uniform && a_us == 0) && !(kind == Uniform && b_us == 0); }

  // One pause in nanoseconds. Poisson means Poisson arrivals: exponential gaps with the given mean.
  template <class Rng>
  uint64_t sample_ns(Rng& rng) const {
    double us = 0;
    switch (kind) {
      case None: us = 0; break;
      case Fixed: us = a_us; break;
      case Uniform: us = std::uniform_real_distribution<double>(a_us, b_us)(rng); break;
      case Poisson: us = a_us > 0 ? std::exponential_distribution<double>(1.0 / a_us)(rng) : 0; break;
    }
    return uint64_t(us * 1000.0);
  }
};

}  // namespace netprof
