// Protocol `http` (PROTOCOL.md, "Protocol http"): HTTP/1.1 keep-alive, one fixed request per exchange,
// replies read by an incremental parser that accepts them split at any byte and several in one read
// (pipelining: replies come in request order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "exchange.hpp"

namespace netprof {

// Limits on what a server may send (beyond them the reply is `malformed`).
constexpr size_t kMaxHttpHead = 64 * 1024;            // status line + headers, and the trailer section
constexpr size_t kMaxChunkLine = 4 * 1024;            // one chunk-size line with its extensions
constexpr uint64_t kMaxHttpBody = uint64_t(1) << 48;  // a Content-Length or chunk size beyond it

// What the run request says about the HTTP request (PROTOCOL.md, fields `request`, `headers`, `body`,
// `host`).
struct HttpRequestSpec {
  std::string request = "GET /";     // "METHOD /path"
  std::vector<std::string> headers;  // "Name: value" each
  std::string body;
  bool has_body = false;  // a body was given (even empty): Content-Length is sent
  std::string host;       // Host header value; empty: the default passed to build_http_request
};

// Builds the bytes of one request: request line, Host (unless `headers` has one), the user's headers,
// Content-Length when there is a body, blank line, body. False with a one-line reason naming the field
// when the spec is unusable. *head: the method is HEAD (replies carry no body).
bool build_http_request(const HttpRequestSpec& spec, const std::string& default_host, std::string* out, bool* head,
                        std::string* why);

// Reads HTTP/1.x replies: status line, headers (Content-Length, Transfer-Encoding: chunked, Connection
// matter, case-insensitively), then the body framed by Content-Length or chunked encoding (chunk
// extensions and trailers skipped). 1xx (but 101), 204 and 304 replies and replies to HEAD have no
// body. A reply with a body but neither framing is Unframed.
class HttpParser final : public ReplyParser {
 public:
  explicit HttpParser(bool head_requests = false) : head_requests_(head_requests) {}
  Result feed(const uint8_t** p, const uint8_t* end, Reply* reply) override;
  bool idle() const override { return state_ == kStatus && part_bytes_ == 0; }
  // Also releases a split-line buffer grown beyond kKeptLineCapacity.
  void reset() override;
  // Bytes reserved for a line split across reads (what a connection's parser keeps between replies).
  size_t line_capacity() const { return line_.capacity(); }
  // What reset() lets a connection keep of that buffer: a usual split line fits, a huge head does not.
  static constexpr size_t kKeptLineCapacity = 4096;

 private:
  enum State : uint8_t { kStatus, kHeaders, kBody, kChunkSize, kChunkData, kChunkEnd, kTrailers };
  enum LineResult : uint8_t { kLine, kPartial, kTooLong };
  LineResult take_line(const uint8_t** p, const uint8_t* end, size_t limit, std::string_view* line);
  Result status_line(std::string_view line);
  Result header(std::string_view line);
  Result end_of_head(Reply* reply);
  Result chunk_size(std::string_view line);
  Result done(Reply* reply);
  void next_part(State s) {
    state_ = s;
    part_bytes_ = 0;
  }

  bool head_requests_;
  State state_ = kStatus;
  size_t part_bytes_ = 0;   // bytes of the current head, chunk-size line or trailer section so far
  std::string line_;        // a line split across reads
  bool line_used_ = false;  // line_ holds a line already handed out: cleared before the next
  uint64_t left_ = 0;       // body or chunk bytes still to skip
  int status_ = 0;
  bool http10_ = false, conn_close_ = false, conn_keep_alive_ = false;
  bool has_length_ = false, has_te_ = false, chunked_ = false;
  uint64_t length_ = 0;
};

}  // namespace netprof
