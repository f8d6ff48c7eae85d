#include "line.hpp"

#include <cstring>

namespace netprof {

bool build_line_request(const std::string& line, std::string* out, std::string* why) {
  if (line.find('\n') != std::string::npos) {
    *why = "line must not contain a newline (the loader appends one)";
    return false;
  }
  *out = line + "\n";
  return true;
}

ReplyParser::Result LineParser::feed(const uint8_t** p, const uint8_t* end, Reply* reply) {
  if (error_ != ReplyError::None) return Error;
  const size_t avail = size_t(end - *p);
  const auto* nl = static_cast<const uint8_t*>(std::memchr(*p, '\n', avail));
  const size_t n = nl ? size_t(nl - *p) : avail;  // reply bytes before the newline (or all of them)
  if (have_ + n > kMaxLineReply)
    return fail(ReplyError::Malformed, "reply line over " + std::to_string(kMaxLineReply) + " bytes without a newline");
  if (!nl) {
    have_ += n;
    *p = end;
    return NeedMore;
  }
  *p = nl + 1;
  have_ = 0;
  *reply = Reply{};
  return Complete;
}

}  // namespace netprof
