// Request parsing in tests: ok() parses a request line that must be accepted, why_of() one that must be
// refused and returns why (shared by the protocol and open-loop tests).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "protocol.hpp"

namespace netprof {

inline std::string why_of(const std::string& line) {
  Request r;
  std::string why;
  EXPECT_FALSE(parse_request(line, &r, &why)) << line;
  return why;
}

inline Request ok(const std::string& line) {
  Request r;
  std::string why;
  EXPECT_TRUE(parse_request(line, &r, &why)) << line << ": " << why;
  return r;
}

}  // namespace netprof
