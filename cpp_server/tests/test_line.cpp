// Protocol line: the request, replies split and merged, the reply length limit, and the engine
// against a line server (pipelining, a server that closes after N replies, a reply cut by a close).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "line.hpp"
#include "protocol.hpp"
#include "test_server.hpp"

using namespace netprof;

namespace {

// Replies found in `bytes` read `chunk` bytes at a time; -1 for an error; a trailing -2 for a partial reply.
std::vector<int> replies(const std::string& bytes, size_t chunk) {
  LineParser parser;
  std::vector<int> out;
  int n = 0;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    const uint8_t* p = data + off;
    const uint8_t* end = data + std::min(bytes.size(), off + chunk);
    while (p < end) {
      Reply r;
      auto res = parser.feed(&p, end, &r);
      if (res == ReplyParser::NeedMore) break;
      if (res == ReplyParser::Error) {
        out.push_back(-1);
        return out;
      }
      EXPECT_EQ(r.status, 0);
      EXPECT_FALSE(r.close);
      out.push_back(++n);
    }
  }
  if (!parser.idle()) out.push_back(-2);
  return out;
}

}  // namespace

TEST(Line, Request) {
  std::string out, why;
  ASSERT_TRUE(build_line_request("get key\r", &out, &why));
  EXPECT_EQ(out, "get key\r\n");
  ASSERT_TRUE(build_line_request("", &out, &why));
  EXPECT_EQ(out, "\n");
  EXPECT_FALSE(build_line_request("a\nb", &out, &why));
  EXPECT_NE(why.find("newline"), std::string::npos);
}

TEST(Line, SplitAndMerged) {
  const std::string s = "+PONG\r\nVALUE x 0 3\n\n" + std::string(1000, 'v') + "\n";
  for (size_t chunk = 1; chunk <= s.size(); chunk++) EXPECT_EQ(replies(s, chunk), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(replies("abc", 1), (std::vector<int>{-2}));
  EXPECT_EQ(replies("abc\nde", 2), (std::vector<int>{1, -2}));
}

TEST(Line, TooLong) {
  std::string ok(kMaxLineReply, 'a');
  EXPECT_EQ(replies(ok + "\n", 4096), (std::vector<int>{1}));
  EXPECT_EQ(replies(ok + "a\n", 4096), (std::vector<int>{-1}));
  EXPECT_EQ(replies(ok + "a", ok.size() + 1), (std::vector<int>{-1}));  // no need to wait for the newline
  LineParser p;
  std::string s = ok + "aa";
  const auto* d = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t* cur = d;
  Reply r;
  EXPECT_EQ(p.feed(&cur, d + s.size(), &r), ReplyParser::Error);
  EXPECT_EQ(p.error(), ReplyError::Malformed);
  EXPECT_NE(p.detail().find("65536"), std::string::npos);
}

TEST(LineFields, Parsed) {
  Request r;
  std::string why;
  ASSERT_TRUE(parse_request(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"protocol":"line","line":"PING\r"})",
                            &r, &why))
      << why;
  EXPECT_EQ(r.run.protocol, Protocol::Line);
  EXPECT_EQ(r.run.request_bytes, "PING\r\n");
  EXPECT_FALSE(parse_request(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"protocol":"line"})", &r, &why));
  EXPECT_NE(why.find("needs a line"), std::string::npos);
  EXPECT_FALSE(parse_request(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"line":"x"})", &r, &why));
  EXPECT_NE(why.find("needs protocol \"line\""), std::string::npos);
  EXPECT_FALSE(parse_request(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"protocol":"line","line":"a\nb"})",
                             &r, &why));
  EXPECT_NE(why.find("newline"), std::string::npos);
  Stats s;
  s.protocol = Protocol::Line;
  json j = stats_json(s);
  EXPECT_EQ(j["protocol"], "line");
  EXPECT_FALSE(j.contains("status"));
  EXPECT_TRUE(j["errors"].contains("malformed"));
  EXPECT_TRUE(j["errors"].contains("truncated"));
  EXPECT_FALSE(j["errors"].contains("http_5xx"));
}

namespace {

// A line server: answers every "\n"-terminated request with `reply`, written in `piece`-byte writes;
// closes after `close_after` replies (0: never).
TestServer::Handler line_server(std::string reply, size_t piece, int close_after = 0) {
  return [=](ServerConn& c) {
    std::string data;
    int answered = 0;
    while (c.read(&data)) {
      std::string out;
      bool close = false;
      for (char ch : data) {
        if (ch != '\n') continue;
        out += reply;
        if (close_after && ++answered == close_after) {
          close = true;
          break;
        }
      }
      for (size_t off = 0; off < out.size(); off += piece)
        if (!c.write(out.substr(off, piece))) return;
      if (close) return;
    }
  };
}

}  // namespace

TEST(LineEngine, PipelinedSplitReplies) {
  TestServer server(line_server("+PONG a somewhat longer reply\r\n", 5));
  Served s = run_until(server, R"("protocol":"line","line":"PING","pipeline":4)", 3,
                       [](const Served& r) { return r.stats.messages > 50; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_GT(s.stats.messages, 50u);
  EXPECT_EQ(s.stats.errors.malformed + s.stats.errors.truncated, 0u) << s.stats.errors.sample;
  EXPECT_EQ(s.stats.reconnects, 0u);
  EXPECT_EQ(s.stats.latency.count(), s.stats.messages);
  EXPECT_EQ(s.stats.request_bytes, 5u);
}

TEST(LineEngine, ServerClosesAfterN) {
  TestServer server(line_server("ok\n", 64, 3));
  Served s = run_until(server, R"("protocol":"line","line":"x","pipeline":2)", 2,
                       [](const Served& r) { return r.stats.messages > 10 && r.stats.reconnects > 3; });
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_GT(s.stats.messages, 10u);
  EXPECT_GT(s.stats.reconnects, 3u);
  EXPECT_EQ(s.stats.errors.malformed + s.stats.errors.truncated, 0u) << s.stats.errors.sample;
}

TEST(LineEngine, ReplyCutByClose) {
  TestServer server(line_server("no newline", 64, 1));
  Served s = run_against(server, R"("protocol":"line","line":"x")", 1);
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_EQ(s.stats.messages, 0u);
  EXPECT_GT(s.stats.errors.truncated, 0u);
}

TEST(LineEngine, ReplyTooLong) {
  TestServer server(line_server(std::string(100000, 'y') + "\n", 65536));
  Served s = run_against(server, R"("protocol":"line","line":"x")", 1);
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  EXPECT_EQ(s.stats.messages, 0u);
  EXPECT_GT(s.stats.errors.malformed, 0u);
  EXPECT_GT(s.stats.reconnects, 0u);
}
