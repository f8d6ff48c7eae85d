#include "http.hpp"

#include <algorithm>
#include <cstring>

namespace netprof {

namespace {

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (lower(a[i]) != b[i]) return false;  // b is lower case
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls f(token) for each non-empty, trimmed element of a comma-separated list; stops when f is false.
template <class F>
void for_each_token(std::string_view s, F f) {
  while (true) {
    size_t comma = s.find(',');
    std::string_view t = trim(s.substr(0, comma));
    if (!t.empty() && !f(t)) return;
    if (comma == std::string_view::npos) return;
    s.remove_prefix(comma + 1);
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A field value may hold any byte but CR, LF and NUL (and they would break the request's framing).
bool clean_value(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

bool is_status_prefix(std::string_view s) {
  static constexpr std::string_view kPrefix = "HTTP/1.";
  size_t n = std::min(s.size(), kPrefix.size());
  return s.substr(0, n) == kPrefix.substr(0, n);
}

}  // namespace

bool build_http_request(const HttpRequestSpec& spec, const std::string& default_host, std::string* out, bool* head,
                        std::string* why) {
  const std::string_view req = spec.request;
  const size_t sp = req.find(' ');
  const std::string_view method = req.substr(0, sp);
  const std::string_view target = sp == std::string_view::npos ? std::string_view() : req.substr(sp + 1);
  bool target_ok = !target.empty() && std::all_of(target.begin(), target.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
  });
  if (!is_token(method) || !target_ok) {
    *why = "request must be 'METHOD /path' (one space, no spaces in the path, no HTTP version), got " +
           excerpt(spec.request.data(), spec.request.size(), 200);
    return false;
  }
  bool has_host = false;
  for (const std::string& h : spec.headers) {
    const size_t colon = h.find(':');
    const std::string_view name = std::string_view(h).substr(0, colon);
    if (colon == std::string::npos || !is_token(name) || !clean_value(h)) {
      *why = "headers entries must be 'Name: value' (a token name, no CR, LF or NUL), got " +
             excerpt(h.data(), h.size(), 200);
      return false;
    }
    if (iequals(name, "content-length") || iequals(name, "transfer-encoding")) {
      *why =
          "header '" + std::string(name) + "' is the loader's: it frames the request itself (Content-Length from body)";
      return false;
    }
    has_host |= iequals(name, "host");
  }
  if (!spec.host.empty() && has_host) {
    *why = "give the Host either as host or in headers, not both";
    return false;
  }
  const std::string& host = spec.host.empty() ? default_host : spec.host;
  if (!has_host && (host.empty() || !std::all_of(host.begin(), host.end(), [](char c) {
                      return static_cast<unsigned char>(c) > 0x20 && c != 0x7f;
                    }))) {
    *why = "host must be a non-empty value without spaces or control characters, got " +
           excerpt(host.data(), host.size(), 200);
    return false;
  }
  std::string r;
  r.reserve(spec.request.size() + 64 + spec.body.size());
  r.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  if (!has_host) r.append("Host: ").append(host).append("\r\n");
  for (const std::string& h : spec.headers) {
    const size_t colon = h.find(':');
    r.append(h, 0, colon).append(": ").append(trim(std::string_view(h).substr(colon + 1))).append("\r\n");
  }
  if (spec.has_body) r.append("Content-Length: ").append(std::to_string(spec.body.size())).append("\r\n");
  r.append("\r\n").append(spec.body);
  *out = std::move(r);
  *head = method == "HEAD";
  return true;
}

void HttpParser::reset() {
  state_ = kStatus;
  part_bytes_ = 0;
  // A huge head (up to kMaxHttpHead) once, finished or cut by a reconnect: do not keep its buffer for
  // the life of the connection (20k connections × 64 KiB).
  if (line_.capacity() > kKeptLineCapacity) {
    std::string().swap(line_);
  } else {
    line_.clear();
  }
  line_used_ = false;
  left_ = 0;
  status_ = 0;
  http10_ = conn_close_ = conn_keep_alive_ = false;
  has_length_ = has_te_ = chunked_ = false;
  length_ = 0;
  clear_error();
}

HttpParser::LineResult HttpParser::take_line(const uint8_t** p, const uint8_t* end, size_t limit,
                                             std::string_view* line) {
  if (line_used_) {
    line_.clear();
    line_used_ = false;
  }
  const uint8_t* s = *p;
  const auto* nl = static_cast<const uint8_t*>(std::memchr(s, '\n', size_t(end - s)));
  const size_t n = nl ? size_t(nl - s) + 1 : size_t(end - s);
  if (part_bytes_ + n > limit) return kTooLong;
  part_bytes_ += n;
  const char* cs = reinterpret_cast<const char*>(s);
  if (!nl) {
    line_.append(cs, n);
    *p = end;
    return kPartial;
  }
  *p = nl + 1;
  std::string_view v;
  if (line_.empty()) {
    v = std::string_view(cs, n - 1);
  } else {
    line_.append(cs, n - 1);
    v = line_;
    line_used_ = true;
  }
  if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
  *line = v;
  return kLine;
}

ReplyParser::Result HttpParser::status_line(std::string_view l) {
  // HTTP/1.x SP 3DIGIT [SP reason-phrase]
  auto digit = [&](size_t i) { return l[i] >= '0' && l[i] <= '9'; };
  if (l.size() < 12 || !is_status_prefix(l.substr(0, 7)) || !digit(7) || l[8] != ' ' || !digit(9) || !digit(10) ||
      !digit(11) || (l.size() > 12 && l[12] != ' ') || l[9] < '1' || l[9] > '5')
    return fail(ReplyError::Malformed, "status line is not 'HTTP/1.x NNN reason': " + excerpt(l.data(), l.size()));
  http10_ = l[7] == '0';
  status_ = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
  state_ = kHeaders;
  return NeedMore;
}

ReplyParser::Result HttpParser::header(std::string_view l) {
  if (l.front() == ' ' || l.front() == '\t') return NeedMore;  // obsolete line folding: part of a value we skip
  const size_t colon = l.find(':');
  const std::string_view name = l.substr(0, colon);
  if (colon == std::string_view::npos || !is_token(name))
    return fail(ReplyError::Malformed, "header line is not 'Name: value': " + excerpt(l.data(), l.size()));
  const std::string_view value = trim(l.substr(colon + 1));
  if (iequals(name, "content-length")) {
    // A list of identical values is allowed (RFC 9110 8.6); anything else is not a length.
    bool ok = true, any = false;
    for_each_token(value, [&](std::string_view t) {
      uint64_t v = 0;
      for (char c : t) {
        if (c < '0' || c > '9' || v > kMaxHttpBody) return ok = false;
        v = v * 10 + uint64_t(c - '0');
      }
      if (v > kMaxHttpBody || (has_length_ && v != length_)) return ok = false;
      has_length_ = any = true;
      length_ = v;
      return true;
    });
    if (!ok || !any)
      return fail(ReplyError::Malformed, "bad or conflicting Content-Length: " + excerpt(l.data(), l.size()));
  } else if (iequals(name, "transfer-encoding")) {
    // Chunked only if it is the last coding (the last header's last token).
    has_te_ = true;
    chunked_ = false;
    for_each_token(value, [&](std::string_view t) {
      chunked_ = iequals(t, "chunked");
      return true;
    });
  } else if (iequals(name, "connection")) {
    for_each_token(value, [&](std::string_view t) {
      conn_close_ |= iequals(t, "close");
      conn_keep_alive_ |= iequals(t, "keep-alive");
      return true;
    });
  }
  return NeedMore;
}

ReplyParser::Result HttpParser::end_of_head(Reply* reply) {
  if (status_ < 200) {
    if (status_ == 101) return fail(ReplyError::Malformed, "101 Switching Protocols: the server left HTTP/1.1");
    // An interim reply (100 Continue, 103 Early Hints): no body, the final reply follows.
    reply->status = status_;
    reply->close = false;
    const bool head = head_requests_;
    reset();
    head_requests_ = head;
    return Complete;
  }
  if (head_requests_ || status_ == 204 || status_ == 304) return done(reply);
  if (has_te_) {
    if (!chunked_)
      return fail(ReplyError::Unframed,
                  "Transfer-Encoding without chunked as the last coding: the body ends only when the server closes");
    next_part(kChunkSize);
    return NeedMore;
  }
  if (has_length_) {
    if (length_ == 0) return done(reply);
    left_ = length_;
    state_ = kBody;
    return NeedMore;
  }
  return fail(ReplyError::Unframed, "status " + std::to_string(status_) +
                                        " reply with neither Content-Length nor chunked encoding: its body ends only "
                                        "when the server closes the connection");
}

ReplyParser::Result HttpParser::chunk_size(std::string_view l) {
  size_t i = 0;
  uint64_t v = 0;
  for (; i < l.size(); i++) {
    int h = hex_value(l[i]);
    if (h < 0) break;
    v = v * 16 + uint64_t(h);
    if (v > kMaxHttpBody) return fail(ReplyError::Malformed, "chunk size too large: " + excerpt(l.data(), l.size()));
  }
  size_t j = i;
  while (j < l.size() && (l[j] == ' ' || l[j] == '\t')) j++;
  if (i == 0 || (j < l.size() && l[j] != ';'))  // chunk extensions (;name=value) are skipped
    return fail(ReplyError::Malformed, "bad chunk-size line: " + excerpt(l.data(), l.size()));
  if (v == 0) {
    next_part(kTrailers);
  } else {
    left_ = v;
    state_ = kChunkData;
  }
  return NeedMore;
}

ReplyParser::Result HttpParser::done(Reply* reply) {
  reply->status = status_;
  reply->close = conn_close_ || (http10_ && !conn_keep_alive_);
  const bool head = head_requests_;
  reset();
  head_requests_ = head;
  return Complete;
}

ReplyParser::Result HttpParser::feed(const uint8_t** p, const uint8_t* end, Reply* reply) {
  if (error_ != ReplyError::None) return Error;
  while (*p < end) {
    if (state_ == kBody || state_ == kChunkData) {
      const size_t n = size_t(std::min<uint64_t>(left_, uint64_t(end - *p)));
      *p += n;
      left_ -= n;
      if (left_ > 0) return NeedMore;
      if (state_ == kBody) return done(reply);
      next_part(kChunkEnd);
      continue;
    }
    const size_t limit = state_ == kChunkSize || state_ == kChunkEnd ? kMaxChunkLine : kMaxHttpHead;
    std::string_view line;
    switch (take_line(p, end, limit, &line)) {
      case kPartial:
        // Not HTTP at all: say so at once instead of waiting for a newline that may never come.
        if (state_ == kStatus && line_ != "\r" && !is_status_prefix(line_))
          return fail(ReplyError::Malformed,
                      "reply does not start with 'HTTP/1.': " + excerpt(line_.data(), line_.size()));
        return NeedMore;
      case kTooLong:
        return fail(ReplyError::Malformed, state_ == kTrailers    ? "trailer section over 65536 bytes"
                                           : state_ == kChunkSize ? "chunk-size line over 4096 bytes"
                                           : state_ == kChunkEnd  ? "chunk data not followed by CRLF"
                                                                  : "reply head over 65536 bytes");
      case kLine: break;
    }
    Result r = NeedMore;
    switch (state_) {
      case kStatus:
        if (line.empty()) {
          part_bytes_ = 0;  // blank lines before a status line are skipped
          continue;
        }
        r = status_line(line);
        break;
      case kHeaders: r = line.empty() ? end_of_head(reply) : header(line); break;
      case kChunkSize: r = chunk_size(line); break;
      case kChunkEnd:
        if (!line.empty())
          return fail(ReplyError::Malformed, "chunk data not followed by CRLF: " + excerpt(line.data(), line.size()));
        next_part(kChunkSize);
        break;
      case kTrailers:
        if (line.empty()) r = done(reply);  // trailer fields are skipped
        break;
      default: break;
    }
    if (r != NeedMore) return r;
  }
  return NeedMore;
}

}  // namespace netprof
