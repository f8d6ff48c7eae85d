// Protocol `line` (PROTOCOL.md, "Protocol line"): a fixed request line, one newline-terminated reply
// of any content per exchange (memcached/redis-inline style protocols).
#pragma once

#include <cstddef>
#include <string>

#include "exchange.hpp"

namespace netprof {

constexpr size_t kMaxLineReply = 64 * 1024;  // reply bytes before the newline; beyond: `malformed`

// The request bytes: the line and "\n". False with a reason when the line holds a newline.
bool build_line_request(const std::string& line, std::string* out, std::string* why);

class LineParser final : public ReplyParser {
 public:
  Result feed(const uint8_t** p, const uint8_t* end, Reply* reply) override;
  bool idle() const override { return have_ == 0; }
  void reset() override {
    have_ = 0;
    clear_error();
  }

 private:
  size_t have_ = 0;  // bytes of the current reply received so far
};

}  // namespace netprof
