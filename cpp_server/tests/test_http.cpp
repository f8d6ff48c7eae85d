// Protocol http: the request builder, the reply parser (split at every byte, merged, chunked, bad
// input), the request fields, and the engine against scripted servers on loopback (keep-alive, a
// server that closes after N replies, Connection: close, 404, 500, garbage, a truncated body, a huge
// header, pipelining).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "http.hpp"
#include "protocol.hpp"
#include "test_server.hpp"

using namespace netprof;

namespace {

// What a parser made of a byte stream: one entry per reply ("200", "200 close", "100"), then "error:
// KIND" when it failed; "partial" when bytes of an unfinished reply remain.
std::vector<std::string> parse_chunks(const std::string& bytes, size_t chunk, bool head = false) {
  HttpParser parser(head);
  std::vector<std::string> out;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    const uint8_t* p = data + off;
    const uint8_t* end = data + std::min(bytes.size(), off + chunk);
    while (p < end) {
      Reply r;
      auto res = parser.feed(&p, end, &r);
      if (res == ReplyParser::NeedMore) break;
      if (res == ReplyParser::Error) {
        out.push_back(std::string("error: ") + reply_error_kind(parser.error()));
        return out;
      }
      out.push_back(std::to_string(r.status) + (r.close ? " close" : ""));
    }
  }
  if (!parser.idle()) out.push_back("partial");
  return out;
}

// The same result whatever the read sizes: whole, one byte at a time, and every chunk size.
std::vector<std::string> parse_all_ways(const std::string& bytes, bool head = false) {
  std::vector<std::string> whole = parse_chunks(bytes, bytes.size() ? bytes.size() : 1, head);
  for (size_t chunk = 1; chunk < bytes.size(); chunk++)
    EXPECT_EQ(parse_chunks(bytes, chunk, head), whole) << "read size " << chunk;
  return whole;
}

// Split in two at every position (a reply boundary falling anywhere in a read).
void expect_split_anywhere(const std::string& bytes, const std::vector<std::string>& want) {
  for (size_t cut = 0; cut <= bytes.size(); cut++) {
    HttpParser parser;
    std::vector<std::string> got;
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    for (auto [a, b] : {std::pair<size_t, size_t>{0, cut}, {cut, bytes.size()}}) {
      const uint8_t* p = data + a;
      while (p < data + b) {
        Reply r;
        auto res = parser.feed(&p, data + b, &r);
        if (res != ReplyParser::Complete) break;
        got.push_back(std::to_string(r.status) + (r.close ? " close" : ""));
      }
    }
    EXPECT_EQ(got, want) << "cut at " << cut;
  }
}

const std::string kOk = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

}  // namespace

TEST(HttpRequest, Build) {
  HttpRequestSpec spec;
  std::string out, why;
  bool head = true;
  ASSERT_TRUE(build_http_request(spec, "127.0.0.1:8080", &out, &head, &why)) << why;
  EXPECT_EQ(out, "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
  EXPECT_FALSE(head);

  spec.request = "POST /submit?x=1";
  spec.headers = {"Content-Type: application/json", "X-Trace:abc  "};
  spec.body = "{\"a\": 1}";
  spec.has_body = true;
  spec.host = "example.test";
  ASSERT_TRUE(build_http_request(spec, "127.0.0.1:1", &out, &head, &why)) << why;
  EXPECT_EQ(out,
            "POST /submit?x=1 HTTP/1.1\r\nHost: example.test\r\nContent-Type: application/json\r\nX-Trace: abc\r\n"
            "Content-Length: 8\r\n\r\n{\"a\": 1}");

  // An empty body still says Content-Length: 0; a Host header replaces the default one.
  spec = HttpRequestSpec{};
  spec.request = "HEAD /x";
  spec.has_body = true;
  spec.headers = {"host: h.test"};
  ASSERT_TRUE(build_http_request(spec, "127.0.0.1:1", &out, &head, &why)) << why;
  EXPECT_EQ(out, "HEAD /x HTTP/1.1\r\nhost: h.test\r\nContent-Length: 0\r\n\r\n");
  EXPECT_TRUE(head);
}

TEST(HttpRequest, Refused) {
  auto why_of = [](HttpRequestSpec spec) {
    std::string out, why;
    bool head;
    EXPECT_FALSE(build_http_request(spec, "127.0.0.1:1", &out, &head, &why));
    return why;
  };
  for (const char* bad : {"GET", "GET ", "/path", "GET /a b", "GET /a HTTP/1.1", "G(T /", "GET /\r\n", ""}) {
    HttpRequestSpec s;
    s.request = bad;
    EXPECT_NE(why_of(s).find("METHOD /path"), std::string::npos) << bad;
  }
  for (const char* bad : {"NoColon", ": empty name", "Bad Name: x", "X: a\r\nInjected: 1", "X: a\nb"}) {
    HttpRequestSpec s;
    s.headers = {bad};
    EXPECT_NE(why_of(s).find("Name: value"), std::string::npos) << bad;
  }
  HttpRequestSpec s;
  s.headers = {"content-length: 5"};
  EXPECT_NE(why_of(s).find("frames the request"), std::string::npos);
  s.headers = {"Transfer-Encoding: chunked"};
  EXPECT_NE(why_of(s).find("frames the request"), std::string::npos);
  s.headers = {"Host: a"};
  s.host = "b";
  EXPECT_NE(why_of(s).find("not both"), std::string::npos);
  s = HttpRequestSpec{};
  s.host = "a b";
  EXPECT_NE(why_of(s).find("host"), std::string::npos);
}

TEST(HttpParser, SimpleReplySplitAtEveryByte) {
  EXPECT_EQ(parse_all_ways(kOk), std::vector<std::string>{"200"});
  expect_split_anywhere(kOk, {"200"});
}

TEST(HttpParser, SeveralRepliesInOneRead) {
  const std::string three = kOk + "HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n" + kOk;
  EXPECT_EQ(parse_all_ways(three), (std::vector<std::string>{"200", "201", "200"}));
  expect_split_anywhere(three, {"200", "201", "200"});
  // 200 replies back to back, as a pipelining server writes them.
  std::string many;
  for (int i = 0; i < 50; i++) many += kOk;
  EXPECT_EQ(parse_chunks(many, many.size()).size(), 50u);
  EXPECT_EQ(parse_chunks(many, 7).size(), 50u);
}

TEST(HttpParser, Chunked) {
  const std::string chunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nHello\r\n"
      "8;name=value;flag\r\n, World!\r\n"  // a chunk extension
      "A ; ext=\"q\"\r\n0123456789\r\n"    // BWS before the extension, upper-case hex
      "0\r\n"
      "X-Checksum: abc\r\nX-Other: 1\r\n\r\n";  // trailers
  EXPECT_EQ(parse_all_ways(chunked + kOk), (std::vector<std::string>{"200", "200"}));
  expect_split_anywhere(chunked + chunked, {"200", "200"});
  // No trailers, lower-case coding name, big chunk; TE after other codings ends with chunked.
  const std::string plain =
      "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\n1000\r\n" + std::string(4096, 'x') + "\r\n0\r\n\r\n";
  EXPECT_EQ(parse_all_ways(plain), std::vector<std::string>{"200"});
  // Transfer-Encoding wins over Content-Length.
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            std::vector<std::string>{"200"});
}

TEST(HttpParser, BodylessReplies) {
  // 204, 304 (even with a Content-Length) and 1xx carry no body; HEAD replies neither.
  const std::string s = "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n" + kOk;
  EXPECT_EQ(parse_all_ways(s), (std::vector<std::string>{"204", "304", "200"}));
  EXPECT_EQ(parse_all_ways("HTTP/1.1 100 Continue\r\n\r\n" + kOk), (std::vector<std::string>{"100", "200"}));
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n",
                           /*head=*/true),
            (std::vector<std::string>{"200", "200"}));
}

TEST(HttpParser, ConnectionClose) {
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
            std::vector<std::string>{"200 close"});
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200 OK\r\nconnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n"),
            std::vector<std::string>{"200 close"});
  // HTTP/1.0 closes unless it says keep-alive.
  EXPECT_EQ(parse_all_ways("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"), std::vector<std::string>{"200 close"});
  EXPECT_EQ(parse_all_ways("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"),
            std::vector<std::string>{"200"});
}

TEST(HttpParser, StatusesAndLenientForms) {
  EXPECT_EQ(parse_all_ways("HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!"), std::vector<std::string>{"404"});
  EXPECT_EQ(parse_all_ways("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"),
            std::vector<std::string>{"500"});
  // Empty reason phrase, bare LF line ends, a repeated identical Content-Length, obs-fold, blank line before.
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200\nContent-Length: 2, 2\nX-Folded: a\n  b\n\nok"),
            std::vector<std::string>{"200"});
  EXPECT_EQ(parse_all_ways("\r\nHTTP/1.1 302 \r\nLocation: /\r\ncontent-length:0\r\n\r\n"),
            std::vector<std::string>{"302"});
}

TEST(HttpParser, Garbage) {
  for (const char* bad :
       {"hello world\r\n", "xyz", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/2 200\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 600 X\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n", "\x16\x03\x01\x02\x00\x01", "HTTP/1.1 099 X\r\n\r\n"})
    EXPECT_EQ(parse_all_ways(bad), std::vector<std::string>{"error: malformed"}) << bad;
  // Bad headers and bodies.
  for (const char* bad : {"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
                          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"})
    EXPECT_EQ(parse_all_ways(bad), std::vector<std::string>{"error: malformed"}) << bad;
  // An error sticks until reset().
  HttpParser p;
  std::string g = "nope\r\n" + kOk;
  const auto* d = reinterpret_cast<const uint8_t*>(g.data());
  const uint8_t* cur = d;
  Reply r;
  EXPECT_EQ(p.feed(&cur, d + g.size(), &r), ReplyParser::Error);
  EXPECT_NE(p.detail().find("status line"), std::string::npos);
  EXPECT_EQ(p.feed(&cur, d + g.size(), &r), ReplyParser::Error);
  p.reset();
  cur = d + 6;
  EXPECT_EQ(p.feed(&cur, d + g.size(), &r), ReplyParser::Complete);
  EXPECT_EQ(r.status, 200);
}

TEST(HttpParser, Unframed) {
  // A body with neither Content-Length nor chunked ends only at close: an error kind of its own.
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nHello"),
            std::vector<std::string>{"error: unframed"});
  EXPECT_EQ(parse_all_ways("HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nHello"),
            std::vector<std::string>{"error: unframed"});
  EXPECT_EQ(parse_all_ways("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx"),
            std::vector<std::string>{"error: unframed"});
}

TEST(HttpParser, HugeHeader) {
  const std::string huge =
      "HTTP/1.1 200 OK\r\nX-Big: " + std::string(kMaxHttpHead, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_EQ(parse_chunks(huge, huge.size()), std::vector<std::string>{"error: malformed"});
  EXPECT_EQ(parse_chunks(huge, 1000), std::vector<std::string>{"error: malformed"});
  // Many headers that add up beyond the limit, and a trailer section beyond it.
  std::string many = "HTTP/1.1 200 OK\r\n";
  while (many.size() <= kMaxHttpHead) many += "X-Header: 0123456789012345678901234567890123456789\r\n";
  EXPECT_EQ(parse_chunks(many + "\r\n", 333), std::vector<std::string>{"error: malformed"});
  std::string trailers = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n";
  while (trailers.size() <= 2 * kMaxHttpHead) trailers += "X-T: 0123456789012345678901234567890123456789\r\n";
  EXPECT_EQ(parse_chunks(trailers + "\r\n", 4096), std::vector<std::string>{"error: malformed"});
  // Just under the limit is fine.
  std::string big = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Big: ";
  big += std::string(kMaxHttpHead - big.size() - 4, 'b') + "\r\n\r\n";
  ASSERT_EQ(big.size(), kMaxHttpHead);
  EXPECT_EQ(parse_chunks(big, 512), std::vector<std::string>{"200"});
}

TEST(HttpParser, IdleAndPartial) {
  HttpParser p;
  EXPECT_TRUE(p.idle());
  std::string s = kOk.substr(0, 20);
  const auto* d = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t* cur = d;
  Reply r;
  EXPECT_EQ(p.feed(&cur, d + s.size(), &r), ReplyParser::NeedMore);
  EXPECT_FALSE(p.idle());
  p.reset();
  EXPECT_TRUE(p.idle());
  // Content-Length larger than what arrives: the reply stays partial (the engine counts `truncated` at close).
  EXPECT_EQ(parse_chunks("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", 5),
            std::vector<std::string>{"partial"});
}

TEST(HttpParser, ResetReleasesAHugePartialHead) {
  // A reconnect in the middle of a 60 KiB head: the connection's parser must not keep that buffer.
  HttpParser p;
  const std::string part = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(60 * 1024, 'h');
  const auto* d = reinterpret_cast<const uint8_t*>(part.data());
  for (size_t off = 0; off < part.size(); off += 1000) {  // split: the line is buffered
    const uint8_t* cur = d + off;
    Reply r;
    ASSERT_EQ(p.feed(&cur, d + std::min(part.size(), off + 1000), &r), ReplyParser::NeedMore);
  }
  ASSERT_GE(p.line_capacity(), 60u * 1024);
  p.reset();
  EXPECT_LE(p.line_capacity(), HttpParser::kKeptLineCapacity);
  EXPECT_TRUE(p.idle());
  // The next connection's reply parses as usual.
  const auto* ok = reinterpret_cast<const uint8_t*>(kOk.data());
  const uint8_t* cur = ok;
  Reply r;
  EXPECT_EQ(p.feed(&cur, ok + kOk.size(), &r), ReplyParser::Complete);
  EXPECT_EQ(r.status, 200);
}

// ---- request fields ----

namespace {
Request run_ok(const std::string& extra) {
  Request r;
  std::string why;
  std::string line = R"({"cmd":"run","target":"127.0.0.1:5000","connections":2)" + extra + "}";
  EXPECT_TRUE(parse_request(line, &r, &why)) << line << ": " << why;
  return r;
}
std::string run_why(const std::string& extra) {
  Request r;
  std::string why;
  std::string line = R"({"cmd":"run","target":"127.0.0.1:5000","connections":2)" + extra + "}";
  EXPECT_FALSE(parse_request(line, &r, &why)) << line;
  return why;
}
}  // namespace

TEST(HttpFields, Parsed) {
  EXPECT_EQ(run_ok("").run.protocol, Protocol::Echo);
  EXPECT_EQ(run_ok(R"(,"protocol":"echo")").run.protocol, Protocol::Echo);
  RunRequest r = run_ok(R"(,"protocol":"http")").run;
  EXPECT_EQ(r.protocol, Protocol::Http);
  EXPECT_EQ(r.request_bytes, "GET / HTTP/1.1\r\nHost: 127.0.0.1:5000\r\n\r\n");
  EXPECT_EQ(r.message_bytes(), r.request_bytes.size());
  r = run_ok(R"(,"protocol":"http","request":"POST /p","headers":["A: 1","B: 2"],"body":"xyz","host":"h")").run;
  EXPECT_EQ(r.request_bytes, "POST /p HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nContent-Length: 3\r\n\r\nxyz");
  EXPECT_TRUE(run_ok(R"(,"protocol":"http","request":"HEAD /")").run.head_requests);
}

TEST(HttpFields, Refused) {
  EXPECT_NE(run_why(R"(,"protocol":"ftp")").find("protocol must be"), std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":1)").find("protocol must be a string"), std::string::npos);
  EXPECT_NE(run_why(R"(,"request":"GET /")").find("needs protocol \"http\""), std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":"line","line":"x","body":"b")").find("'body' needs protocol \"http\""),
            std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":"http","headers":"A: 1")").find("headers must be a list"), std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":"http","headers":[1])").find("headers must be a list"), std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":"http","request":"GET")").find("METHOD /path"), std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":"http","host":"")").find("host must not be empty"), std::string::npos);
  EXPECT_NE(run_why(R"(,"protocol":"http","transport":"zmq")").find("needs transport \"tcp\""), std::string::npos);
  // The in-flight byte limit counts the request's size, not msize.
  std::string body(60000, 'x');
  EXPECT_NE(
      run_why(R"(,"protocol":"http","pipeline":1024,"connections":20,"body":")" + body + "\"").find("request bytes"),
      std::string::npos);
}

TEST(HttpFields, StatsJson) {
  Stats s;
  s.protocol = Protocol::Http;
  s.request_bytes = 40;
  s.reconnects = 3;
  s.status = {1, 2, 3, 4, 5};
  s.errors.http_5xx = 5;
  s.errors.sample = "http_5xx: status 500";
  json j = stats_json(s);
  EXPECT_EQ(j["protocol"], "http");
  EXPECT_EQ(j["request_bytes"], 40);
  EXPECT_EQ(j["reconnects"], 3);
  EXPECT_EQ(j["status"]["5xx"], 5);
  EXPECT_EQ(j["status"]["1xx"], 1);
  EXPECT_EQ(j["errors"]["http_5xx"], 5);
  for (const char* k : {"malformed", "unframed", "truncated", "http_3xx", "http_4xx", "mismatch"})
    EXPECT_TRUE(j["errors"].contains(k)) << k;
  EXPECT_EQ(j["error_sample"], "http_5xx: status 500");
  // Echo stats keep their shape.
  Stats e;
  json je = stats_json(e);
  EXPECT_EQ(je["protocol"], "echo");
  EXPECT_EQ(je["errors"].size(), 4u);
  EXPECT_FALSE(je.contains("status"));
  EXPECT_FALSE(je.contains("reconnects"));
}

// ---- the engine against scripted servers ----

namespace {

const std::string kHello = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nHello, World!";

// Counts complete requests in what a connection received (each ends with the blank line).
struct HttpRequests {
  std::string buf;
  int take(const std::string& data) {
    buf += data;
    int n = 0;
    size_t pos;
    while ((pos = buf.find("\r\n\r\n")) != std::string::npos) {
      buf.erase(0, pos + 4);
      n++;
    }
    return n;
  }
};

// A server whose every connection answers each request with reply(conn_requests_so_far), closing
// when reply() says so.
// `enough`: as in run_until (no minimum when empty).
Served run_http(const std::function<ServerAction(int)>& reply, const std::string& extra = "", int connections = 4,
                const Enough& enough = {}) {
  TestServer server([reply](ServerConn& c) {
    HttpRequests reqs;
    int answered = 0;
    std::string data;
    while (c.read(&data)) {
      for (int n = reqs.take(data); n > 0; n--) {
        ServerAction a = reply(++answered);
        if (!c.write(a.bytes) || a.close) return;
      }
    }
  });
  const std::string fields = R"("protocol":"http")" + extra;
  return enough ? run_until(server, fields, connections, enough) : run_against(server, fields, connections);
}

}  // namespace

TEST(HttpEngine, KeepAlive) {
  Served s =
      run_http([](int) { return ServerAction{kHello}; }, "", 4, [](const Served& r) { return r.stats.messages > 50; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_GT(s.stats.messages, 50u);
  EXPECT_EQ(s.stats.status[1], s.stats.messages);  // every 2xx in the window is a message
  EXPECT_EQ(s.stats.reconnects, 0u);
  EXPECT_EQ(s.stats.errors.malformed + s.stats.errors.truncated + s.stats.errors.reset, 0u);
  EXPECT_EQ(s.stats.latency.count(), s.stats.messages);
  EXPECT_EQ(s.accepted_connections, 4);
}

TEST(HttpEngine, RepliesSplitAndMerged) {
  // Each reply written in 3 pieces, with pipelining 8: replies and reads never line up.
  TestServer server([](ServerConn& c) {
    HttpRequests reqs;
    std::string data;
    const std::string chunked =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nHello\r\n0\r\nT: x\r\n\r\n";
    while (c.read(&data)) {
      std::string out;
      for (int n = reqs.take(data); n > 0; n--) out += (n % 2 ? kHello : chunked);
      for (size_t off = 0; off < out.size(); off += 17)
        if (!c.write(out.substr(off, 17))) return;
    }
  });
  Served s =
      run_until(server, R"("protocol":"http","pipeline":8)", 2, [](const Served& r) { return r.stats.messages > 50; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_GT(s.stats.messages, 50u);
  EXPECT_EQ(s.stats.errors.malformed, 0u) << s.stats.errors.sample;
  EXPECT_EQ(s.stats.reconnects, 0u);
}

TEST(HttpEngine, ServerClosesAfterNReplies) {
  // Closes after 5 replies without saying so, with requests still in flight (pipeline 4): each close
  // is a reconnect, the unanswered requests are sent again, nothing is an error.
  Served s = run_http(
      [](int n) {
        return ServerAction{kHello, n == 5};
      },
      R"(,"pipeline":4)", 4, [](const Served& r) { return r.stats.messages > 20 && r.stats.reconnects > 4; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_GT(s.stats.messages, 20u);
  EXPECT_GT(s.stats.reconnects, 4u);
  EXPECT_GT(s.accepted_connections, 8);
  EXPECT_EQ(s.stats.errors.truncated + s.stats.errors.malformed, 0u) << s.stats.errors.sample;
  EXPECT_EQ(s.stats.errors.connect, 0u);

  // With think time the released requests wait on timers across the reopenings: none is lost. A lost
  // one would leave its connection with fewer requests in flight, and after two it stops for good; so
  // every connection must keep being answered through several reopenings. (No rate threshold: speed
  // is a benchmark's business, and this host's stalls made one fail CI.)
  Served t = run_http(
      [](int n) {
        return ServerAction{kHello, n == 3};
      },
      R"(,"pipeline":2,"think":"fixed:200")", 4, [](const Served& r) { return r.stats.reconnects > 12; });
  ASSERT_EQ(t.error_kind, nullptr) << t.error_message;
  EXPECT_GT(t.stats.reconnects, 12u);  // 4 connections, each reopened more than 3 times on average
  EXPECT_EQ(t.stats.errors.truncated + t.stats.errors.malformed + t.stats.errors.connect, 0u);
  ASSERT_EQ(t.stats.per_conn_messages.size(), 4u);
  for (uint64_t m : t.stats.per_conn_messages) EXPECT_GT(m, 6u);  // 3 replies per opening: 3+ openings each
}

TEST(HttpEngine, ConnectionCloseHeader) {
  const std::string closing = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
  Served s = run_http(
      [&](int) {
        return ServerAction{closing, true};
      },
      "", 4, [](const Served& r) { return r.stats.messages > 10; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_GT(s.stats.messages, 10u);
  EXPECT_GE(s.stats.reconnects, s.stats.messages);  // one per reply
  EXPECT_EQ(s.stats.errors.truncated + s.stats.errors.malformed, 0u) << s.stats.errors.sample;
}

TEST(HttpEngine, ServerErrors) {
  Served s500 = run_http([](int) { return ServerAction{"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\noops"}; }, "", 4,
                         [](const Served& r) { return r.stats.errors.http_5xx > 10; });
  ASSERT_EQ(s500.error_kind, nullptr) << s500.error_message;
  EXPECT_EQ(s500.stats.messages, 0u);  // non-2xx replies are errors, not messages
  EXPECT_GT(s500.stats.errors.http_5xx, 10u);
  EXPECT_GT(s500.stats.status[4], 10u);
  EXPECT_EQ(s500.stats.errors.sample, "http_5xx: status 500");
  EXPECT_EQ(s500.stats.reconnects, 0u);

  // Every other reply a 404.
  Served s404 = run_http(
      [](int n) { return ServerAction{n % 2 ? kHello : "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"}; }, "", 4,
      [](const Served& r) { return r.stats.messages > 10 && r.stats.errors.http_4xx > 10; });
  ASSERT_EQ(s404.error_kind, nullptr) << s404.error_message;
  EXPECT_GT(s404.stats.messages, 10u);
  EXPECT_GT(s404.stats.errors.http_4xx, 10u);
  EXPECT_EQ(s404.stats.status[1], s404.stats.messages);
  EXPECT_NEAR(double(s404.stats.status[3]), double(s404.stats.status[1]), 8.0);
}

TEST(HttpEngine, Garbage) {
  // A server that is not HTTP (an echo server): each reply is malformed, the connection reopened.
  TestServer echo([](ServerConn& c) {
    std::string data;
    while (c.read(&data))
      if (!c.write(data)) return;
  });
  Served s = run_until(echo, R"("protocol":"http")", 2,
                       [](const Served& r) { return r.stats.errors.malformed > 2 && r.stats.reconnects > 2; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_EQ(s.stats.messages, 0u);
  EXPECT_GT(s.stats.errors.malformed, 2u);
  EXPECT_GT(s.stats.reconnects, 2u);
  // The sample names the kind and shows what came back (the echoed request line).
  EXPECT_EQ(s.stats.errors.sample.rfind("malformed: ", 0), 0u) << s.stats.errors.sample;
  EXPECT_NE(s.stats.errors.sample.find("'GET / HTTP/1.1"), std::string::npos) << s.stats.errors.sample;
}

TEST(HttpEngine, TruncatedBody) {
  // Content-Length larger than what arrives, then close.
  Served s = run_http(
      [](int) {
        return ServerAction{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", true};
      },
      "", 4, [](const Served& r) { return r.stats.errors.truncated > 2; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_EQ(s.stats.messages, 0u);
  EXPECT_GT(s.stats.errors.truncated, 2u);
  EXPECT_GE(s.stats.reconnects, s.stats.errors.truncated);
  EXPECT_NE(s.stats.errors.sample.find("truncated"), std::string::npos);
}

TEST(HttpEngine, HugeHeader) {
  const std::string huge = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(100000, 'z') + "\r\nContent-Length: 0\r\n\r\n";
  Served s = run_http([&](int) { return ServerAction{huge}; }, "", 1);
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_EQ(s.stats.messages, 0u);
  EXPECT_GT(s.stats.errors.malformed, 0u);
  EXPECT_NE(s.stats.errors.sample.find("reply head over 65536 bytes"), std::string::npos) << s.stats.errors.sample;
}

TEST(HttpEngine, UnframedAndUnsolicited) {
  Served s = run_http([](int) { return ServerAction{"HTTP/1.1 200 OK\r\n\r\nbody until close"}; }, "", 1);
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_EQ(s.stats.messages, 0u);
  EXPECT_GT(s.stats.errors.unframed, 0u);
  // Two replies per request: the second has no request to answer.
  Served twice = run_http([](int) { return ServerAction{kHello + kHello}; }, "", 1);
  EXPECT_GT(twice.stats.errors.malformed, 0u);
  EXPECT_NE(twice.stats.errors.sample.find("no request outstanding"), std::string::npos) << twice.stats.errors.sample;
}

TEST(HttpEngine, ServerGoneForGood) {
  // The server stops listening and closes every connection: reconnects are refused, the connections
  // are given up, and the run ends as backend_gone.
  auto server = std::make_unique<TestServer>([](ServerConn& c) {
    std::string data;
    c.read(&data);
  });
  Served s = run_against(*server, R"("protocol":"http","duration":5)", 2, [&] { server->stop(); });
  EXPECT_STREQ(s.error_kind, err::kBackendGone) << s.error_message;
  EXPECT_EQ(s.stats.errors.connect, 2u);  // the two reconnects given up
}

TEST(HttpParser, MutatedRepliesAnyReadSizes) {
  // Random corruptions of valid replies (bytes flipped, inserted, dropped, cut): whatever the bytes,
  // the parser's verdict does not depend on how they are split into reads, and it never runs past them.
  const std::vector<std::string> seeds = {
      kOk,
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nHello\r\n0\r\nT: 1\r\n\r\n",
      "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
      "HTTP/1.0 100 Continue\r\n\r\nHTTP/1.0 404 NF\r\nContent-Length: 2, 2\r\n\r\nno",
  };
  uint64_t state = 0x243f6a8885a308d3ULL;
  auto rnd = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  const char kAlphabet[] = "\r\n :;0123456789abcdefHTP/.,\t\x00\xff";
  for (int iter = 0; iter < 3000; iter++) {
    std::string s = seeds[rnd(seeds.size())] + seeds[rnd(seeds.size())];
    for (int m = int(rnd(4)); m >= 0 && !s.empty(); m--) {
      size_t at = rnd(s.size());
      switch (rnd(4)) {
        case 0: s[at] = kAlphabet[rnd(sizeof kAlphabet - 1)]; break;
        case 1: s.insert(at, 1, kAlphabet[rnd(sizeof kAlphabet - 1)]); break;
        case 2: s.erase(at, 1 + rnd(3)); break;
        default: s.resize(at); break;
      }
    }
    if (s.empty()) continue;
    const auto whole = parse_chunks(s, s.size());
    EXPECT_EQ(parse_chunks(s, 1), whole) << excerpt(s.data(), s.size(), 200);
    EXPECT_EQ(parse_chunks(s, 1 + rnd(16)), whole) << excerpt(s.data(), s.size(), 200);
  }
}
