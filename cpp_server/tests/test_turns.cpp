// Turns (PROTOCOL.md, "Turns"): the request fields, which target serves which turn, and runs of the real
// engine against two scripted servers of different speeds.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "protocol.hpp"
#include "request_helpers.hpp"
#include "test_server.hpp"

using namespace netprof;

namespace {

const std::string kRun = R"({"cmd":"run","target":"127.0.0.1:5000","connections":4,"duration":1)";

TEST(TurnsFields, Parsed) {
  Request r = ok(kRun + R"(,"alternate":["127.0.0.1:5001"],"turn":0.05})");
  ASSERT_EQ(r.run.targets(), 2);
  EXPECT_TRUE(r.run.turns());
  EXPECT_EQ(r.run.turn, 0.05);
  ASSERT_EQ(r.run.target_addrs.size(), 2u);
  EXPECT_EQ(ntohs(r.run.target_addrs[0].sin_port), 5000);
  EXPECT_EQ(ntohs(r.run.target_addrs[1].sin_port), 5001);
  EXPECT_EQ(ok(kRun + R"(,"alternate":["127.0.0.1:5001"]})").run.turn, 0.1);  // the default
  Request one = ok(kRun + "}");
  EXPECT_FALSE(one.run.turns());
  ASSERT_EQ(one.run.target_addrs.size(), 1u);  // every run connects through target_addrs
}

TEST(TurnsFields, Refused) {
  const std::string two = R"(,"alternate":["127.0.0.1:5001"])";
  EXPECT_NE(why_of(kRun + R"(,"turn":0.1})").find("turn needs alternate"), std::string::npos);
  EXPECT_NE(why_of(kRun + R"(,"alternate":[]})").find("at least one"), std::string::npos);
  EXPECT_NE(why_of(kRun + R"(,"alternate":["127.0.0.1"]})").find("alternate entry"), std::string::npos);
  EXPECT_NE(why_of(kRun + R"(,"alternate":"127.0.0.1:5001"})").find("alternate must be a list"), std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"run","target":"127.0.0.1:5000","connections":3,"duration":1)" + two + "}")
                .find("not a multiple of the 2 targets"),
            std::string::npos);
  EXPECT_NE(why_of(kRun + two + R"(,"turn":0.3})").find("whole number of turns"), std::string::npos);
  EXPECT_NE(why_of(kRun + two + R"(,"turn":0.001})").find("turn must be in"), std::string::npos);
  EXPECT_NE(why_of(kRun + two + R"(,"turn":0.6})").find("at least one per target"), std::string::npos);
  EXPECT_NE(why_of(kRun + two + R"(,"rate":100})").find("does not go with rate"), std::string::npos);
  EXPECT_NE(why_of(kRun + two + R"(,"timeline":4})").find("does not go with timeline"), std::string::npos);
  EXPECT_NE(why_of(kRun + two + R"(,"transport":"zmq"})").find("needs transport \"tcp\""), std::string::npos);
}

TEST(Turns, IndexIsTheFloorAlsoBeforeTheStart) {
  EXPECT_EQ(turn_index(1000, 100, 1000), 0);
  EXPECT_EQ(turn_index(1000, 100, 1099), 0);
  EXPECT_EQ(turn_index(1000, 100, 1100), 1);
  EXPECT_EQ(turn_index(1000, 100, 999), -1);  // the warm-up's last turn
  EXPECT_EQ(turn_index(1000, 100, 900), -1);
  EXPECT_EQ(turn_index(1000, 100, 899), -2);
}

TEST(Turns, TwoTargetsGoABBAAndThreeGoABCCBA) {
  std::string two, three;
  for (int64_t k = -4; k < 8; k++) two += char('A' + turn_target(k, 2));
  for (int64_t k = 0; k < 12; k++) three += char('A' + turn_target(k, 3));
  EXPECT_EQ(two, "ABBAABBAABBA");  // the pattern runs on through the warm-up's negative turns
  EXPECT_EQ(three, "ABCCBAABCCBA");
}

// An echo server that answers each message after `spin_us` of waiting.
TestServer::Handler echo_after(int delay_us) {
  return [delay_us](ServerConn& c) {
    std::string data;
    while (c.read(&data)) {
      if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      if (!c.write(data)) return;
    }
  };
}

Served run_turns(TestServer& a, TestServer& b, int connections, double duration, double turn) {
  json req = {{"cmd", "run"},
              {"target", "127.0.0.1:" + std::to_string(a.port())},
              {"alternate", {"127.0.0.1:" + std::to_string(b.port())}},
              {"connections", connections},
              {"duration", duration},
              {"turn", turn},
              {"warmup", 0.2},
              {"connect_timeout", 5}};
  return run_request(req);
}

// Two servers, one answering at once and one after 2 ms, 4 connections each, served in 0.1 s turns: each
// turn's messages come from the target serving it (the slow one's turns hold ~200 per 0.1 s at most, the
// fast one's many more), every turn of the window is counted, and the turns add up to the window.
TEST(TurnsEngine, EachTurnServesOneTargetAndTheTurnsAddUp) {
  TestServer fast(echo_after(0)), slow(echo_after(2000));
  Served s = run_turns(fast, slow, 8, 1.2, 0.1);
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  const json j = stats_json(s.stats);
  const json& t = j["turns"];
  ASSERT_EQ(t["messages"].size(), 12u) << t.dump();
  EXPECT_EQ(t["turn_s"], 0.1);
  EXPECT_EQ(t["targets"][1], "127.0.0.1:" + std::to_string(slow.port()));
  EXPECT_EQ(t["served"].dump(), "[0,1,1,0,0,1,1,0,0,1,1,0]");
  uint64_t fast_msgs = 0, slow_msgs = 0, all = 0;
  for (size_t k = 0; k < 12; k++) {
    const uint64_t m = t["messages"][k];
    all += m;
    (t["served"][k] == 0 ? fast_msgs : slow_msgs) += m;
    if (t["served"][k] == 1) {
      EXPECT_LE(m, 4 * 0.1 / 0.002 + 4) << k << ": " << t.dump();  // 4 connections, 2 ms a reply at best
      EXPECT_GT(t["latency_mean_us"][k].get<double>(), 2000) << t.dump();
    } else {
      EXPECT_LT(t["latency_mean_us"][k].get<double>(), 2000) << t.dump();
    }
  }
  EXPECT_GT(fast_msgs, 3 * slow_msgs) << t.dump();
  EXPECT_GT(slow_msgs, 0u) << t.dump();
  // Turns count the requests sent and answered in the window; the window's count also has the ones sent
  // in the warm-up and answered in it (one per connection at most).
  EXPECT_LE(all, s.stats.messages);
  EXPECT_GE(all + 8, s.stats.messages) << t.dump();
  EXPECT_EQ(t["by_target"][0]["messages"].get<uint64_t>() + t["by_target"][1]["messages"].get<uint64_t>(),
            s.stats.messages);
  EXPECT_GT(t["by_target"][1]["latency_us"]["p50"].get<double>(), 2000) << t.dump();
  // Each target's connections are its own: half the per-connection counts are the slow server's.
  uint64_t even = 0, odd = 0;
  for (size_t c = 0; c < s.stats.per_conn_messages.size(); c++) (c % 2 ? odd : even) += s.stats.per_conn_messages[c];
  EXPECT_EQ(even, t["by_target"][0]["messages"].get<uint64_t>());
  EXPECT_EQ(odd, t["by_target"][1]["messages"].get<uint64_t>());
}

TEST(TurnsEngine, WithoutAlternateTheStatsHaveNoTurns) {
  Stats s;
  EXPECT_FALSE(stats_json(s).contains("turns"));
}

}  // namespace
