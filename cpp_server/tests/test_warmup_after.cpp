// Warm-up after (PROTOCOL.md, "Warm-up after"): the request field, the stats, and runs of the real engine against a
// server that accepts slowly, as a loop that takes one connection per turn does (libuv).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "protocol.hpp"
#include "request_helpers.hpp"
#include "test_server.hpp"

using namespace netprof;

namespace {

TestServer::Handler echo_at_once() {
  return [](ServerConn& c) {
    std::string data;
    while (c.read(&data))
      if (!c.write(data)) return;
  };
}

// One HTTP/1.1 reply per read: the loader sends one request at a time (pipeline 1).
TestServer::Handler http_ok() {
  return [](ServerConn& c) {
    std::string data;
    while (c.read(&data))
      if (!c.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")) return;
  };
}

struct ServedRun {
  Served served;
  int accepted_at_connected = -1;  // what the server had accepted when `connected` was sent
};

// One run against `server` (request_against), noting at the `connected` event how many connections the server
// had accepted: the truth from the server's side of whether the load begins with every connection taken in.
ServedRun run_served(TestServer& server, const std::string& fields, int connections) {
  ServedRun out;
  Emit emit = [&](const json& ev) {
    if (ev["event"] == "connected") out.accepted_at_connected = server.accepted();
    return true;
  };
  out.served = run_request(request_against(server, fields, connections), {}, 1, emit);
  return out;
}

}  // namespace

TEST(WarmupAfterFields, Parsed) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:1","connections":2)";
  EXPECT_FALSE(ok(base + "}").run.served_first);
  EXPECT_FALSE(ok(base + R"(,"warmup_after":"connected"})").run.served_first);
  EXPECT_TRUE(ok(base + R"(,"warmup_after":"served"})").run.served_first);
  EXPECT_TRUE(ok(base + R"(,"warmup_after":"served","rate":100})").run.served_first);
  EXPECT_TRUE(ok(base + R"(,"warmup_after":"served","transport":"zmq"})").run.served_first);  // its DEALERs are anyway
}

TEST(WarmupAfterFields, Refused) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:1","connections":2)";
  EXPECT_EQ(why_of(base + R"(,"warmup_after":"answered"})"),
            R"(warmup_after must be "connected" or "served", got 'answered')");
  EXPECT_NE(why_of(base + R"(,"warmup_after":true})").find("warmup_after must be a string"), std::string::npos);
  const std::string turns = why_of(base + R"(,"warmup_after":"served","alternate":["127.0.0.1:2"]})");
  EXPECT_NE(turns.find("warmup_after \"served\""), std::string::npos) << turns;
  EXPECT_NE(turns.find("alternate"), std::string::npos) << turns;
}

TEST(WarmupAfterFields, StatsJsonOnlyWhenAsked) {
  Stats s;
  EXPECT_FALSE(stats_json(s).contains("served_first"));
  s.has_served_first = true;
  s.first_served = 7;
  s.first_unserved = 3;
  s.first_s = 0.25;
  EXPECT_EQ(stats_json(s)["served_first"], json::parse(R"({"served":7,"unserved":3,"s":0.25})"));
}

// The server takes one connection every 40 ms. "connected" begins the load once the kernel has completed
// the handshakes (most still in the listen queue); "served" once the server has answered every one.
TEST(WarmupAfterEngine, ServedBeginsTheLoadWithEveryConnectionAccepted) {
  const int n = 12;
  TestServer slow(echo_at_once(), 40);
  ServedRun served = run_served(slow, R"("warmup_after":"served")", n);
  ASSERT_EQ(served.served.error_kind, nullptr) << served.served.error_message;
  const Stats& st = served.served.stats;
  ASSERT_TRUE(st.has_served_first);
  EXPECT_EQ(st.first_served, n);
  EXPECT_EQ(st.first_unserved, 0);
  EXPECT_EQ(served.accepted_at_connected, n);
  EXPECT_GE(st.first_s, 0.3);  // 11 gaps of 40 ms
  EXPECT_GE(st.setup_s, st.first_s);
  ASSERT_EQ(st.per_conn_messages.size(), size_t(n));
  for (uint64_t m : st.per_conn_messages) EXPECT_GT(m, 0u);
  // The first exchange is not the load: a closed loop keeps `pipeline` in flight from the window's start on.
  EXPECT_GT(st.messages, uint64_t(n) * 10);

  // The control: without it the load begins with connections still queued. A host that stalls the loader's
  // connect phase for the 1.1 s of accepts could see them all taken: tried again, at most three times.
  ServedRun connected;
  for (int i = 0; i < 3 && (i == 0 || connected.accepted_at_connected == n); i++) {
    TestServer slow2(echo_at_once(), 100);
    connected = run_served(slow2, "", n);
    ASSERT_EQ(connected.served.error_kind, nullptr) << connected.served.error_message;
  }
  EXPECT_FALSE(connected.served.stats.has_served_first);
  EXPECT_LT(connected.accepted_at_connected, n);
  EXPECT_FALSE(stats_json(connected.served.stats).contains("served_first"));
}

TEST(WarmupAfterEngine, HttpServedThenTheLoad) {
  const int n = 6;
  TestServer slow(http_ok(), 30);
  ServedRun r = run_served(slow, R"("warmup_after":"served","protocol":"http")", n);
  ASSERT_EQ(r.served.error_kind, nullptr) << r.served.error_message;
  EXPECT_EQ(r.served.stats.first_served, n);
  EXPECT_EQ(r.accepted_at_connected, n);
  EXPECT_GT(r.served.stats.status[1], uint64_t(n));  // 2xx in the window
}

// connect_timeout bounds the wait: the load begins with the connections not yet answered still queued, and
// the stats say how many.
TEST(WarmupAfterEngine, UnservedWhenConnectTimeoutRunsOut) {
  const int n = 10;
  TestServer slow(echo_at_once(), 150);
  ServedRun r = run_served(slow, R"("warmup_after":"served","connect_timeout":0.3)", n);
  ASSERT_EQ(r.served.error_kind, nullptr) << r.served.error_message;
  const Stats& st = r.served.stats;
  ASSERT_TRUE(st.has_served_first);
  EXPECT_GE(st.first_served, 1);
  EXPECT_GE(st.first_unserved, n / 2);
  EXPECT_EQ(st.first_served + st.first_unserved, n);
  EXPECT_EQ(st.connected, n);
  EXPECT_GT(st.messages, 0u);
}

// Open loop: the schedule starts after the first exchange, and a first message answered in the window
// counts from its send (a wrong intended time would show as a latency of the whole clock).
TEST(OpenLoopWarmupAfter, ServedThenTheSchedule) {
  const int n = 4;
  TestServer slow(echo_at_once(), 30);
  ServedRun r = run_served(slow, R"("warmup_after":"served","rate":400)", n);
  ASSERT_EQ(r.served.error_kind, nullptr) << r.served.error_message;
  const Stats& st = r.served.stats;
  EXPECT_EQ(st.first_served, n);
  EXPECT_EQ(r.accepted_at_connected, n);
  EXPECT_NEAR(double(st.ol.intended) / st.duration_s, 400, 400 * 0.05);
  EXPECT_GT(st.messages, st.ol.intended / 2);
  EXPECT_LT(st.latency.max(), 2'000'000'000u);  // ns
}
