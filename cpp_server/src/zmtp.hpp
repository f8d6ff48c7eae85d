// ZMTP 3.0 (rfc.zeromq.org/spec/23), the client side the loader needs to be a DEALER without libzmq
// (`"transport": "zmtp"`, PROTOCOL.md "ZMTP mode"): the greeting, the NULL mechanism's READY handshake
// and the header of a one-frame message. After the handshake a message and its echo are the same
// bytes (a ROUTER sends the frame back with the same flags and size), so the TCP engine's echo path
// carries them, the header a fixed prefix of every message.
//
// Hand-written rather than libzmq on purpose: this mode exists to have no library I/O thread between
// the socket and the thread that times the answer, and the client's part of the protocol is small (a
// 64-byte greeting and one command each way, then frames).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace netprof::zmtp {

constexpr size_t kGreetingSize = 64;
constexpr size_t kMaxCommandBody = 64 * 1024;  // a peer's handshake command beyond it is refused
constexpr size_t kMaxShortFrame = 255;         // bodies up to this size take a 1-byte size

// Bytes of the header of a final message frame of `body` bytes: flags + 1-byte size, or + 8-byte size.
constexpr size_t frame_header_size(size_t body) { return body <= kMaxShortFrame ? 2 : 9; }

// The header of a final (no MORE) message frame of `body` bytes.
std::vector<uint8_t> frame_header(size_t body);

// What the client sends as soon as TCP is up: its greeting (version 3.0, mechanism NULL, as-server 0)
// and its READY command (Socket-Type DEALER). 3.0: the client needs nothing of 3.1 (heartbeats,
// subscription commands).
std::vector<uint8_t> client_hello();

// Reads the peer's side of the handshake: its greeting, then its READY (or ERROR) command. Bytes may
// arrive split anywhere.
class Handshake {
 public:
  enum Result : uint8_t { NeedMore, Done, Error };
  // Consumes bytes from [*p, end), at most up to the end of the peer's READY. Done: *p points just
  // after it. Error: detail() says why in one line (the connection is unusable).
  Result feed(const uint8_t** p, const uint8_t* end);
  const std::string& detail() const { return detail_; }
  const std::string& peer_type() const { return peer_type_; }  // after Done: "ROUTER" or "DEALER"

 private:
  Result check_greeting();
  Result command(const uint8_t* body, size_t len);
  Result fail(std::string why);

  std::vector<uint8_t> buf_;     // what arrived of the greeting and the command so far
  size_t need_ = kGreetingSize;  // bytes buf_ must hold for the next step
  bool greeted_ = false, sized_ = false;
  size_t body_at_ = 0;  // where the command's body starts in buf_ once sized_
  std::string detail_, peer_type_;
};

}  // namespace netprof::zmtp
