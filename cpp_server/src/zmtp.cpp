#include "zmtp.hpp"

#include <strings.h>

#include <algorithm>
#include <cstring>

#include "exchange.hpp"  // excerpt()

namespace netprof::zmtp {
namespace {

constexpr uint8_t kMore = 0x01, kLong = 0x02, kCommand = 0x04;  // frame flags
constexpr size_t kVersionAt = 10, kMechanismAt = 12, kMechanismSize = 20;

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

uint64_t get_be(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v = (v << 8) | p[i];
  return v;
}

void put_property(std::vector<uint8_t>& out, const std::string& name, const std::string& value) {
  out.push_back(uint8_t(name.size()));
  out.insert(out.end(), name.begin(), name.end());
  const uint32_t n = uint32_t(value.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(n >> shift));
  out.insert(out.end(), value.begin(), value.end());
}

std::string shown(const uint8_t* p, size_t n) { return excerpt(reinterpret_cast<const char*>(p), n); }

}  // namespace

std::vector<uint8_t> frame_header(size_t body) {
  std::vector<uint8_t> h;
  if (body <= kMaxShortFrame) {
    h = {0, uint8_t(body)};
  } else {
    h = {kLong};
    put_u64(h, body);
  }
  return h;
}

std::vector<uint8_t> client_hello() {
  std::vector<uint8_t> out(kGreetingSize, 0);
  out[0] = 0xff;  // signature: 0xFF, 8 bytes of padding, 0x7F
  out[9] = 0x7f;
  out[kVersionAt] = 3;  // version 3.0
  out[kVersionAt + 1] = 0;
  memcpy(&out[kMechanismAt], "NULL", 4);  // as-server (byte 32) and the filler stay 0
  std::vector<uint8_t> body = {5, 'R', 'E', 'A', 'D', 'Y'};
  put_property(body, "Socket-Type", "DEALER");
  out.push_back(kCommand);  // short command frame: the body is well under 256 bytes
  out.push_back(uint8_t(body.size()));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Handshake::Result Handshake::fail(std::string why) {
  detail_ = std::move(why);
  return Error;
}

// What can be judged of the greeting from the bytes so far: the signature's first and last byte, the
// major version, then (all 64 there) the mechanism.
Handshake::Result Handshake::check_greeting() {
  const size_t n = buf_.size();
  if (buf_[0] != 0xff || (n >= 10 && !(buf_[9] & 0x01)))
    return fail("not a ZMTP peer: its first bytes are " + shown(buf_.data(), n));
  if (n > kVersionAt && buf_[kVersionAt] < 3)
    return fail("the peer speaks ZMTP " + std::to_string(buf_[kVersionAt]) +
                ".x (libzmq before 4.0): the native client needs ZMTP 3");
  if (n < kGreetingSize) return NeedMore;
  const uint8_t* mech = &buf_[kMechanismAt];
  const size_t len = size_t(std::find(mech, mech + kMechanismSize, 0) - mech);
  if (std::string(reinterpret_cast<const char*>(mech), len) != "NULL")
    return fail("the peer asks for security mechanism " + shown(mech, len) +
                "; the native client speaks only NULL (no security)");
  return Done;
}

Handshake::Result Handshake::feed(const uint8_t** p, const uint8_t* end) {
  while (*p < end) {
    const size_t take = std::min(need_ - buf_.size(), size_t(end - *p));
    buf_.insert(buf_.end(), *p, *p + take);
    *p += take;
    if (!greeted_) {
      Result r = check_greeting();
      if (r != Done) return r;  // Error, or NeedMore with every byte taken
      greeted_ = true;
      need_ = kGreetingSize + 2;  // the command's flags and the first byte of its size
      continue;
    }
    if (buf_.size() < need_) return NeedMore;
    if (!sized_) {
      const uint8_t flags = buf_[kGreetingSize];
      if (!(flags & kCommand) || (flags & kMore))
        return fail("the peer sent a message frame (flags " + std::to_string(flags) +
                    ") where its READY command belongs");
      const size_t size_bytes = (flags & kLong) ? 8 : 1;
      if (buf_.size() < kGreetingSize + 1 + size_bytes) {
        need_ = kGreetingSize + 1 + size_bytes;
        continue;
      }
      const uint64_t size = get_be(&buf_[kGreetingSize + 1], int(size_bytes));
      if (size > kMaxCommandBody)
        return fail("the peer's handshake command is " + std::to_string(size) + " bytes (at most " +
                    std::to_string(kMaxCommandBody) + " taken)");
      sized_ = true;
      body_at_ = kGreetingSize + 1 + size_bytes;
      need_ = body_at_ + size_t(size);
      if (buf_.size() < need_) continue;
    }
    return command(buf_.data() + body_at_, buf_.size() - body_at_);
  }
  return NeedMore;
}

// READY: its Socket-Type must be one a DEALER talks to; ERROR: the peer's reason.
Handshake::Result Handshake::command(const uint8_t* body, size_t len) {
  if (len == 0 || size_t(body[0]) + 1 > len) return fail("the peer's handshake command is malformed");
  const std::string name(reinterpret_cast<const char*>(body + 1), body[0]);
  size_t at = 1 + body[0];
  if (name == "ERROR") {
    const size_t n = at < len ? std::min<size_t>(body[at], len - at - 1) : 0;
    return fail("the peer refused the handshake: " + shown(body + at + 1, n));
  }
  if (name != "READY") return fail("the peer sent command " + shown(body + 1, name.size()) + " instead of READY");
  while (at < len) {  // properties: name (1-byte size) and value (4-byte size)
    const size_t nlen = body[at];
    if (at + 1 + nlen + 4 > len) return fail("the peer's READY has a malformed property");
    const std::string prop(reinterpret_cast<const char*>(body + at + 1), nlen);
    const uint64_t vlen = get_be(body + at + 1 + nlen, 4);
    at += 1 + nlen + 4;
    if (vlen > len - at) return fail("the peer's READY has a malformed property");
    if (strcasecmp(prop.c_str(), "Socket-Type") == 0)  // property names are case-insensitive
      peer_type_.assign(reinterpret_cast<const char*>(body + at), size_t(vlen));
    at += size_t(vlen);
  }
  if (peer_type_ != "ROUTER" && peer_type_ != "DEALER")
    return fail(peer_type_.empty()
                    ? std::string("the peer's READY names no Socket-Type")
                    : "the peer is a " + shown(reinterpret_cast<const uint8_t*>(peer_type_.data()), peer_type_.size()) +
                          " socket; a DEALER talks to a ROUTER or a DEALER");
  return Done;
}

}  // namespace netprof::zmtp
