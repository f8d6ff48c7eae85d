// Request/response protocols other than echo (PROTOCOL.md, "Protocols"): one message is one exchange,
// a fixed request and one reply. The engine sends the run's request bytes (built once per run) once
// per exchange and holds one ReplyParser per connection that finds where each reply ends. Echo keeps
// its own byte-verifying path in the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace netprof {

// Why a reply could not be read (each is an error kind in the stats); the connection is then closed
// and reopened.
enum class ReplyError : uint8_t {
  None,
  Malformed,  // not a reply of the protocol: bad status line or header, bad chunk, head or line too long
  Unframed,   // an HTTP body delimited only by the server closing the connection ("read until close")
};

inline const char* reply_error_kind(ReplyError e) {
  switch (e) {
    case ReplyError::Malformed: return "malformed";
    case ReplyError::Unframed: return "unframed";
    default: return "none";
  }
}

struct Reply {
  int status = 0;      // HTTP status code; 0 for a protocol without one (line)
  bool close = false;  // the server closes the connection after this reply (Connection: close, HTTP/1.0)
};

class ReplyParser {
 public:
  enum Result : uint8_t { NeedMore, Complete, Error };
  virtual ~ReplyParser() = default;

  // Consumes bytes from [*p, end), at most up to the end of one reply. Complete: *reply describes it
  // and *p points just after it (more replies may follow). NeedMore: every byte was consumed and the
  // reply is not complete yet. Error: error() and detail() say why; the connection is unusable.
  // An HTTP interim reply (1xx) comes back as Complete with its status: the final reply follows.
  virtual Result feed(const uint8_t** p, const uint8_t* end, Reply* reply) = 0;

  // True between replies: nothing of the next reply received yet.
  virtual bool idle() const = 0;

  // Forgets a partial reply and any error (the connection was reopened).
  virtual void reset() = 0;

  ReplyError error() const { return error_; }
  const std::string& detail() const { return detail_; }

 protected:
  Result fail(ReplyError e, std::string detail) {
    error_ = e;
    detail_ = std::move(detail);
    return Error;
  }
  void clear_error() {
    error_ = ReplyError::None;
    detail_.clear();
  }
  ReplyError error_ = ReplyError::None;
  std::string detail_;
};

// A short, printable excerpt of bytes received, for error details: quoted, non-printable bytes as \xNN.
inline std::string excerpt(const char* data, size_t len, size_t max = 60) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < len && i < max; i++) {
    unsigned char c = static_cast<unsigned char>(data[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += char(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += len > max ? "'..." : "'";
  return out;
}

}  // namespace netprof
