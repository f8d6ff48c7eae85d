#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "protocol.hpp"
#include "request_helpers.hpp"

using namespace netprof;

TEST(Protocol, PingAndDefaults) {
  EXPECT_EQ(ok(R"({"cmd":"ping"})").cmd, Request::Ping);
  Request r = ok(R"({"cmd":"run","target":"127.0.0.1:5000","connections":100})");
  ASSERT_EQ(r.cmd, Request::Run);
  EXPECT_EQ(r.run.connections, 100);
  EXPECT_EQ(r.run.msize, 64);
  EXPECT_EQ(r.run.duration, 10.0);
  EXPECT_EQ(r.run.warmup, 1.0);
  EXPECT_EQ(r.run.pipeline, 1);
  EXPECT_EQ(r.run.think.kind, Think::None);
  EXPECT_EQ(r.run.connect_timeout, 10.0);
  ASSERT_EQ(r.run.source_addrs.size(), 1u);
  EXPECT_EQ(ntohs(r.run.target_addr.sin_port), 5000);
  EXPECT_EQ(ntohl(r.run.target_addr.sin_addr.s_addr), 0x7f000001u);
}

TEST(Protocol, FullRequest) {
  // Every field at its maximum that the in-flight limits allow together (1 × 1024 × 1 MiB = 1 GiB).
  Request r = ok(R"({"cmd":"run","target":"127.0.0.2:1","connections":1,"msize":1048576,
    "duration":0.1,"warmup":0,"pipeline":1024,"think":"uniform:10-20.5","connect_timeout":600,
    "sources":["127.0.0.1","127.0.0.3"],"transport":"zmq","probe_share":0.5})");
  EXPECT_EQ(ok(R"({"cmd":"run","target":"127.0.0.2:1","connections":1000000,"pipeline":16})").run.connections, 1000000);
  EXPECT_EQ(r.run.msize, 1 << 20);
  EXPECT_EQ(r.run.pipeline, 1024);
  EXPECT_EQ(r.run.think.kind, Think::Uniform);
  EXPECT_EQ(r.run.think.b_us, 20.5);
  EXPECT_EQ(r.run.source_addrs.size(), 2u);
  EXPECT_EQ(ok(R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"duration":3})").run.duration, 3.0);
}

TEST(Protocol, Malformed) {
  EXPECT_EQ(why_of("{"), "malformed JSON");
  EXPECT_EQ(why_of(""), "malformed JSON");
  EXPECT_EQ(why_of("\xff\xfe"), "malformed JSON");
  EXPECT_NE(why_of("[1,2]").find("object"), std::string::npos);
  EXPECT_NE(why_of("42").find("object"), std::string::npos);
  EXPECT_NE(why_of(R"({"target":"127.0.0.1:1"})").find("cmd"), std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"jump"})").find("unknown cmd"), std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":5})").find("cmd must be a string"), std::string::npos);
}

TEST(Protocol, UnknownFields) {
  EXPECT_NE(why_of(R"({"cmd":"ping","x":1})").find("unknown field 'x'"), std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"conections":2})").find("conections"),
            std::string::npos);
}

TEST(Protocol, WrongTypes) {
  const char* base = R"({"cmd":"run","target":"127.0.0.1:1","connections":1,)";
  EXPECT_NE(why_of(std::string(base) + R"("msize":"64"})").find("msize must be an integer"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("msize":64.0})").find("msize must be an integer"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("pipeline":true})").find("pipeline must be an integer"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("duration":"10"})").find("duration must be a number"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("duration":null})").find("duration must be a number"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("think":1})").find("think must be a string"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("sources":"127.0.0.1"})").find("sources"), std::string::npos);
  EXPECT_NE(why_of(std::string(base) + R"("sources":[1]})").find("sources"), std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"run","target":5,"connections":1})").find("target must be a string"), std::string::npos);
}

TEST(Protocol, OutOfRange) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:1",)";
  EXPECT_NE(why_of(base + R"("connections":0})").find("connections must be in 1..1000000"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1000001})").find("connections"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":-5})").find("connections"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":18446744073709551615})").find("connections"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"msize":0})").find("msize"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"msize":1048577})").find("msize"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"duration":0.05})").find("duration"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"duration":1e9})").find("duration"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"warmup":-1})").find("warmup"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"pipeline":1025})").find("pipeline"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"connect_timeout":0})").find("connect_timeout"), std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1,"sources":[]})").find("sources"), std::string::npos);
}

TEST(Protocol, Targets) {
  for (const char* t : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "localhost:80", "127.0.0.1:-1",
                        "127.0.0.1:80x", "::1:80", "127.0.0.1:0000080"})
    EXPECT_NE(why_of(std::string(R"({"cmd":"run","connections":1,"target":")") + t + "\"}").find("target"),
              std::string::npos)
        << t;
  EXPECT_EQ(ntohs(ok(R"({"cmd":"run","connections":1,"target":"10.1.2.3:65535"})").run.target_addr.sin_port), 65535);
}

TEST(Protocol, Think) {
  std::string why;
  EXPECT_EQ(Think::parse("none", &why)->kind, Think::None);
  EXPECT_EQ(Think::parse("fixed:2000", &why)->a_us, 2000);
  EXPECT_EQ(Think::parse("poisson:50", &why)->kind, Think::Poisson);
  auto u = Think::parse("uniform:5-10", &why);
  EXPECT_EQ(u->a_us, 5);
  EXPECT_EQ(u->b_us, 10);
  for (const char* bad : {"", "fixed", "fixed:", "fixed:-1", "fixed:abc", "uniform:10-5", "uniform:5", "poisson:1e9",
                          "sometimes", "none:1", "fixed:1x"})
    EXPECT_FALSE(Think::parse(bad, &why)) << bad;
  EXPECT_FALSE(Think::parse("fixed:0", &why)->active());
  std::mt19937_64 rng(1);
  auto p = *Think::parse("poisson:100", &why);
  double sum = 0;
  for (int i = 0; i < 100000; i++) sum += double(p.sample_ns(rng));
  EXPECT_NEAR(sum / 100000, 100e3, 2e3);  // mean 100 µs
  auto f = *Think::parse("uniform:10-20", &why);
  for (int i = 0; i < 1000; i++) {
    uint64_t v = f.sample_ns(rng);
    EXPECT_GE(v, 10000u);
    EXPECT_LE(v, 20000u);
  }
}

TEST(Protocol, LineTooLong) {
  std::string line = R"({"cmd":"ping","pad":")" + std::string(kMaxLine, 'x') + "\"}";
  EXPECT_NE(why_of(line).find("line too long"), std::string::npos);
}

TEST(Protocol, StatsJsonShape) {
  Stats s;
  s.connections = 3;
  s.connected = 2;
  s.messages = 30;
  s.duration_s = 2;
  s.per_conn_messages = {10, 20, 0};
  for (int i = 1; i <= 30; i++) s.latency.record(uint64_t(i) * 1000);
  json j = stats_json(s);
  for (const char* k :
       {"connections", "connected", "messages", "duration_s", "msgs_per_sec", "msize", "pipeline", "per_conn_messages",
        "latency_us", "errors", "setup_s", "warmup_s", "loader_cpu", "t_start", "t_stop", "aborted"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["msgs_per_sec"], 15.0);
  EXPECT_EQ(j["per_conn_messages"].size(), 3u);
  for (const char* k : {"p50", "p90", "p95", "p99", "p999", "max", "mean", "count"})
    EXPECT_TRUE(j["latency_us"].contains(k)) << k;
  EXPECT_NEAR(j["latency_us"]["p50"].get<double>(), 15.0, 0.15);
  EXPECT_EQ(j["latency_us"]["max"], 30.0);
  EXPECT_EQ(j["latency_us"]["count"], 30);
  for (const char* k : {"connect", "reset", "timeout", "mismatch"}) EXPECT_EQ(j["errors"][k], 0);
  EXPECT_EQ(error_event(err::kBackendGone, "x")["error"], "backend_gone");
}

TEST(Protocol, Transport) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:5000","connections":2)";
  EXPECT_EQ(ok(base + "}").run.transport, Transport::Tcp);  // default
  EXPECT_EQ(ok(base + R"(,"transport":"tcp"})").run.transport, Transport::Tcp);
  EXPECT_EQ(ok(base + R"(,"transport":"zmq"})").run.transport, Transport::Zmq);
  Request r = ok(base + R"(,"transport":"zmq","pipeline":8,"think":"fixed:5","sources":["127.0.0.2"]})");
  EXPECT_EQ(r.run.transport, Transport::Zmq);
  EXPECT_EQ(r.run.pipeline, 8);
  EXPECT_EQ(ok(base + R"(,"transport":"zmtp"})").run.transport, Transport::Zmtp);
  for (const char* bad : {R"("ZMQ")", R"("udp")", R"("")", R"("zmq ")"})
    EXPECT_NE(why_of(base + R"(,"transport":)" + bad + "}").find("transport must be \"tcp\", \"zmq\" or \"zmtp\""),
              std::string::npos)
        << bad;
  for (const char* bad : {"1", "null", "true", R"(["zmq"])"})
    EXPECT_NE(why_of(base + R"(,"transport":)" + bad + "}").find("transport must be a string"), std::string::npos)
        << bad;
  // Only run requests take it.
  EXPECT_NE(why_of(R"({"cmd":"ping","transport":"zmq"})").find("unknown field 'transport'"), std::string::npos);
}

TEST(Protocol, ProbeShare) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:5000","connections":2)";
  Request absent = ok(base + "}");
  EXPECT_FALSE(absent.run.probe_share_given);
  EXPECT_EQ(absent.run.probe_share, 1.0);
  for (double share : {0.0, 0.3, 1.0}) {
    Request r = ok(base + R"(,"probe_share":)" + json(share).dump() + "}");
    EXPECT_TRUE(r.run.probe_share_given);
    EXPECT_EQ(r.run.probe_share, share);
  }
  EXPECT_EQ(ok(base + R"(,"probe_share":1})").run.probe_share, 1.0);  // an integer is a number too
  for (const char* bad : {"-0.1", "1.01", "2"})
    EXPECT_NE(why_of(base + R"(,"probe_share":)" + bad + "}").find("probe_share must be in 0.0..1.0"),
              std::string::npos)
        << bad;
  EXPECT_FALSE(why_of(base + R"(,"probe_share":1e400})").empty());
  for (const char* bad : {R"("0.3")", "null", "true", "[0.3]"})
    EXPECT_NE(why_of(base + R"(,"probe_share":)" + bad + "}").find("probe_share must be a number"), std::string::npos)
        << bad;
}

TEST(Protocol, ProbeGuard) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:5000","connections":2)";
  EXPECT_EQ(ok(base + "}").run.probe_guard, 0.0);
  EXPECT_EQ(ok(base + R"(,"probe_share":0.3,"probe_guard":0.1})").run.probe_guard, 0.1);
  EXPECT_NE(why_of(base + R"(,"probe_guard":0.1})").find("probe_guard needs probe_share"), std::string::npos);
  for (const char* bad : {"-0.1", "61"})
    EXPECT_NE(why_of(base + R"(,"probe_share":0.3,"probe_guard":)" + bad + "}").find("probe_guard must be in"),
              std::string::npos)
        << bad;
}

TEST(Protocol, InFlightLimits) {
  const std::string base = R"({"cmd":"run","target":"127.0.0.1:5000",)";
  // connections × pipeline above 2^24 messages
  EXPECT_NE(why_of(base + R"("connections":20000,"pipeline":1024})").find("messages in flight exceeds the limit"),
            std::string::npos);
  EXPECT_NE(why_of(base + R"("connections":1000000,"pipeline":1024,"msize":1048576})").find("16777216"),
            std::string::npos);
  // connections × pipeline × msize above 1 GiB
  std::string big = why_of(base + R"("connections":10,"pipeline":1024,"msize":1048576})");
  EXPECT_NE(big.find("bytes in flight exceeds the limit of 1073741824"), std::string::npos) << big;
  EXPECT_NE(why_of(base + R"("connections":3,"pipeline":512,"msize":1048576})").find("bytes in flight"),
            std::string::npos);
  ok(base + R"("connections":16384,"pipeline":1024,"msize":64})");   // exactly 2^24 messages, 1 GiB
  ok(base + R"("connections":1024,"pipeline":1,"msize":1048576})");  // exactly 1 GiB
}

TEST(Protocol, Abort) {
  EXPECT_EQ(ok(R"({"cmd":"abort"})").cmd, Request::Abort);
  EXPECT_NE(why_of(R"({"cmd":"abort","x":1})").find("unknown field 'x'"), std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"jump"})").find("run, ping, abort or release"), std::string::npos);
}

TEST(Protocol, HistogramsField) {
  EXPECT_TRUE(ok(R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"histograms":true})").run.histograms);
  EXPECT_FALSE(ok(R"({"cmd":"run","target":"127.0.0.1:9","connections":1})").run.histograms);
  EXPECT_NE(why_of(R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"histograms":1})").find("histograms"),
            std::string::npos);

  Stats s;
  s.connections = 1;
  s.per_conn_messages = {3};
  s.messages = 3;
  s.duration_s = 1;
  s.has_phases = true;
  for (uint64_t ns : {5'000, 5'001, 2'000'000}) s.latency.record(ns);
  s.phases[kProbed].latency.record(7'000);
  EXPECT_FALSE(stats_json(s)["latency_us"].contains("hist"));  // only when asked: the shape stays
  json j = stats_json(s, true);
  const json& h = j["latency_us"]["hist"];
  EXPECT_EQ(h["sub_bits"], Histogram::kSubBits);
  EXPECT_EQ(h["min_ns"], 5000);
  EXPECT_EQ(h["max_ns"], 2'000'000);
  EXPECT_EQ(h["sum_ns"], 2'010'001);
  uint64_t total = 0;
  for (const auto& b : h["buckets"]) {
    total += b[1].get<uint64_t>();
    EXPECT_EQ(Histogram::index_of(Histogram::lower_of(b[0].get<size_t>())), b[0].get<size_t>());
  }
  EXPECT_EQ(total, 3u);
  EXPECT_EQ(h["buckets"].size(), 2u);  // 5,000 and 5,001 ns share a bucket (its width is 64 ns)
  EXPECT_EQ(j["phases"]["probed"]["latency_us"]["hist"]["buckets"].size(), 1u);
}

TEST(Protocol, TimelineField) {
  EXPECT_EQ(ok(R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"timeline":20})").run.timeline, 20);
  EXPECT_EQ(ok(R"({"cmd":"run","target":"127.0.0.1:9","connections":1})").run.timeline, 0);
  for (const char* bad : {R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"timeline":101})",
                          R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"timeline":-1})",
                          R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"timeline":"x"})",
                          R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"timeline":4,"transport":"zmq"})"})
    EXPECT_NE(why_of(bad).find("timeline"), std::string::npos) << bad;

  // A window of 1 s in 4 slices: an instant falls in its slice, the end and beyond in the last.
  EXPECT_EQ(timeline_slice(1000, 1'000'000'000, 4, 1000), 0u);
  EXPECT_EQ(timeline_slice(1000, 1'000'000'000, 4, 1000 + 250'000'000), 1u);
  EXPECT_EQ(timeline_slice(1000, 1'000'000'000, 4, 1000 + 999'999'999), 3u);
  EXPECT_EQ(timeline_slice(1000, 1'000'000'000, 4, 1000 + 2'000'000'000), 3u);

  Stats s;
  s.connections = 1;
  s.per_conn_messages = {4};
  EXPECT_FALSE(stats_json(s).contains("timeline"));  // only when asked: the shape stays
  // Two threads' slices merge slice by slice.
  std::vector<Histogram> a(2), b(2);
  a[0].record(1'000);
  b[0].record(3'000);
  b[1].record(2'000'000);
  s.add_timeline(a, 2'000'000'000);
  s.add_timeline(b, 2'000'000'000);
  json t = stats_json(s)["timeline"];
  EXPECT_EQ(t["slice_s"], 1.0);
  ASSERT_EQ(t["slices"].size(), 2u);
  EXPECT_EQ(t["slices"][0]["t_s"], 0.0);
  EXPECT_EQ(t["slices"][0]["messages"], 2);
  EXPECT_EQ(t["slices"][0]["max_us"], 3.0);
  EXPECT_EQ(t["slices"][1]["t_s"], 1.0);
  EXPECT_EQ(t["slices"][1]["messages"], 1);
  EXPECT_EQ(t["slices"][1]["p99_us"], 2000.0);
}
