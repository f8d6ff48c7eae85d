// Hold (PROTOCOL.md, "Hold"): the request field, the `release` command, and runs of the real engine against a
// server with a thread per connection, each noting when its connection's EOF came: the server's own truth of
// when the loader closed.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clock.hpp"
#include "netprof/fd.hpp"
#include "protocol.hpp"
#include "request_helpers.hpp"
#include "test_server.hpp"

using namespace netprof;

namespace {

// Echoes until EOF and notes the EOF's time (CLOCK_MONOTONIC ns).
struct ClosesSeen {
  std::mutex mu;
  std::vector<int64_t> at;

  TestServer::Handler echo() {
    return [this](ServerConn& c) {
      std::string data;
      while (c.read(&data))
        if (!c.write(data)) return;
      std::lock_guard<std::mutex> lock(mu);
      at.push_back(now_ns());
    };
  }
};

struct HeldRun {
  RunOutcome out;
  int64_t measure_stop = 0;  // when the engine emitted it
  int64_t returned = 0;      // when run_load returned
};

// One run with the control channel `client` (-1: none), which `on_stop` may write to at measure_stop.
HeldRun run_with_client(TestServer& server, const std::string& fields, int connections, int client,
                        const std::function<void()>& on_stop = {}) {
  Request r;
  std::string why;
  if (!parse_request_obj(request_against(server, fields, connections), &r, &why))
    throw std::runtime_error("bad test request: " + why);
  HeldRun h;
  Emit emit = [&](const json& ev) {
    if (ev["event"] == "measure_stop") {
      h.measure_stop = now_ns();
      if (on_stop) on_stop();
    }
    return true;
  };
  std::string input;
  h.out = run_load(r.run, EngineConfig{}, emit, Watch{client, client >= 0 ? &input : nullptr, -1});
  h.returned = now_ns();
  return h;
}

}  // namespace

TEST(HoldFields, Parsed) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:1","connections":2)";
  EXPECT_EQ(ok(base + "}").run.hold, 0);
  EXPECT_EQ(ok(base + R"(,"hold":2.5})").run.hold, 2.5);
  EXPECT_EQ(ok(base + R"(,"hold":1,"transport":"zmtp"})").run.hold, 1);
  EXPECT_EQ(ok(R"({"cmd":"release"})").cmd, Request::Release);
}

TEST(HoldFields, Refused) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:1","connections":2)";
  EXPECT_NE(why_of(base + R"(,"hold":61})").find("hold"), std::string::npos);
  EXPECT_NE(why_of(base + R"(,"hold":-1})").find("hold"), std::string::npos);
  EXPECT_EQ(why_of(base + R"(,"hold":1,"transport":"zmq"})"), R"(hold needs transport "tcp" or "zmtp", not "zmq")");
  EXPECT_EQ(why_of(R"({"cmd":"release","hold":1})"), "unknown field 'hold' for cmd release");
}

// No client to release them: the connections stay open the whole hold after measure_stop, then close.
TEST(HoldEngine, ConnectionsOutliveMeasureStopForTheHold) {
  const int n = 4;
  ClosesSeen closes;
  TestServer server(closes.echo());
  HeldRun h = run_with_client(server, R"("hold":0.6)", n, -1);
  ASSERT_EQ(h.out.error_kind, nullptr) << h.out.error_message;
  EXPECT_FALSE(h.out.stats.aborted);
  EXPECT_GT(h.out.stats.messages, 0u);
  server.stop();  // joins the handlers: every EOF is noted
  ASSERT_EQ(closes.at.size(), size_t(n));
  // a physical floor: nothing is closed before the hold has run out (0.6 s less the clock's grain)
  EXPECT_GE(*std::min_element(closes.at.begin(), closes.at.end()) - h.measure_stop, s_to_ns(0.59));
}

// The client releases them at measure_stop: the hold (30 s) ends at once. Its `abort` ends the hold too,
// without making the run an aborted one.
TEST(HoldEngine, ReleaseOrAbortEndsTheHold) {
  for (const char* cmd : {"{\"cmd\":\"release\"}\n", "{\"cmd\":\"abort\"}\n"}) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    Fd ours(sv[0]), theirs(sv[1]);
    ClosesSeen closes;
    TestServer server(closes.echo());
    HeldRun h = run_with_client(server, R"("hold":30)", 3, theirs.get(),
                                [&] { ASSERT_EQ(::write(ours.get(), cmd, strlen(cmd)), ssize_t(strlen(cmd))); });
    ASSERT_EQ(h.out.error_kind, nullptr) << cmd << h.out.error_message;
    EXPECT_FALSE(h.out.stats.aborted) << cmd;
    EXPECT_FALSE(h.out.client_gone) << cmd;
    EXPECT_LT(h.returned - h.measure_stop, s_to_ns(10)) << cmd;  // not the 30-s hold (room for a paused host)
  }
}

// An aborted run is not held: its client is not following the marks.
TEST(HoldEngine, AnAbortedRunIsNotHeld) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Fd ours(sv[0]), theirs(sv[1]);
  ClosesSeen closes;
  TestServer server(closes.echo());
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const char* cmd = "{\"cmd\":\"abort\"}\n";
    (void)!::write(ours.get(), cmd, strlen(cmd));
  });
  const int64_t t0 = now_ns();
  HeldRun h = run_with_client(server, R"("hold":30,"duration":20)", 2, theirs.get());
  aborter.join();
  EXPECT_STREQ(h.out.error_kind, err::kAborted);
  EXPECT_TRUE(h.out.stats.aborted);
  EXPECT_LT(h.returned - t0, s_to_ns(10));  // neither the 20-s window nor the 30-s hold (the abort may come first)
}
