// ZMTP mode: what the client sends, the peer's handshake read split at every byte and refused when it is
// not a ZMTP 3 ROUTER, and the engine against libzmq's own ROUTER (the independent other side).
#include <gtest/gtest.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "payload.hpp"
#include "protocol.hpp"
#include "request_helpers.hpp"
#include "test_server.hpp"
#include "zmtp.hpp"

using namespace netprof;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes greeting(uint8_t major, const std::string& mechanism) {
  Bytes g(zmtp::kGreetingSize, 0);
  g[0] = 0xff;
  g[8] = 1;  // libzmq puts the routing id's length + 1 in the padding
  g[9] = 0x7f;
  g[10] = major;
  g[11] = 1;
  memcpy(&g[12], mechanism.data(), mechanism.size());
  g[32] = 1;  // as-server
  return g;
}

// A command frame `name` with the properties given as (name, value) pairs.
Bytes command(const std::string& name, const std::vector<std::pair<std::string, std::string>>& props,
              bool long_size = false) {
  Bytes body = {uint8_t(name.size())};
  body.insert(body.end(), name.begin(), name.end());
  for (auto& [k, v] : props) {
    body.push_back(uint8_t(k.size()));
    body.insert(body.end(), k.begin(), k.end());
    for (int s = 24; s >= 0; s -= 8) body.push_back(uint8_t(v.size() >> s));
    body.insert(body.end(), v.begin(), v.end());
  }
  Bytes out;
  if (long_size) {
    out.push_back(0x06);
    for (int s = 56; s >= 0; s -= 8) out.push_back(uint8_t(uint64_t(body.size()) >> s));
  } else {
    out = {0x04, uint8_t(body.size())};
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What libzmq 4.3's ROUTER sends: greeting 3.1 and READY with Socket-Type and an empty Identity.
Bytes router_side() { return greeting(3, "NULL") + command("READY", {{"Socket-Type", "ROUTER"}, {"Identity", ""}}); }

// Feeds `bytes` in pieces of `chunk`; the result and, when Done, how many bytes were left unread.
std::pair<zmtp::Handshake::Result, size_t> handshake(const Bytes& bytes, size_t chunk, zmtp::Handshake* h) {
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    const uint8_t* p = bytes.data() + off;
    const uint8_t* end = bytes.data() + std::min(bytes.size(), off + chunk);
    auto r = h->feed(&p, end);
    if (r != zmtp::Handshake::NeedMore) return {r, size_t(bytes.data() + bytes.size() - p)};
  }
  return {zmtp::Handshake::NeedMore, 0};
}

std::string refusal(const Bytes& bytes) {
  zmtp::Handshake h;
  auto [r, left] = handshake(bytes, bytes.size(), &h);
  EXPECT_EQ(r, zmtp::Handshake::Error);
  return h.detail();
}

}  // namespace

TEST(Zmtp, ClientHello) {
  const Bytes hello = zmtp::client_hello();
  ASSERT_GT(hello.size(), zmtp::kGreetingSize);
  EXPECT_EQ(hello[0], 0xff);
  EXPECT_EQ(hello[9], 0x7f);
  EXPECT_EQ(hello[10], 3);
  EXPECT_EQ(hello[11], 0);
  EXPECT_EQ(std::string(hello.begin() + 12, hello.begin() + 16), "NULL");
  EXPECT_EQ(hello[32], 0);  // as-server: we are the client
  // READY, Socket-Type DEALER: our own reader takes it (as a peer's READY of a DEALER)
  zmtp::Handshake h;
  const Bytes as_peer = greeting(3, "NULL") + Bytes(hello.begin() + zmtp::kGreetingSize, hello.end());
  EXPECT_EQ(handshake(as_peer, 7, &h).first, zmtp::Handshake::Done) << h.detail();
  EXPECT_EQ(h.peer_type(), "DEALER");
}

TEST(Zmtp, FrameHeader) {
  EXPECT_EQ(zmtp::frame_header(64), (Bytes{0, 64}));
  EXPECT_EQ(zmtp::frame_header(255), (Bytes{0, 255}));
  EXPECT_EQ(zmtp::frame_header(256), (Bytes{2, 0, 0, 0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(zmtp::frame_header_size(255), 2u);
  EXPECT_EQ(zmtp::frame_header_size(256), 9u);
  // the payload carries it as every message's head; the body is the same bytes as without it
  Payload plain(300), framed(300, zmtp::frame_header(300));
  ASSERT_EQ(framed.size(), 309u);
  Bytes a(300), b(309);
  plain.fill(3, 7, 0, 300, a.data());
  framed.fill(3, 7, 0, 4, b.data());  // split inside the head and across its end
  framed.fill(3, 7, 4, 305, b.data() + 4);
  EXPECT_EQ(Bytes(b.begin(), b.begin() + 9), zmtp::frame_header(300));
  EXPECT_EQ(Bytes(b.begin() + 9, b.end()), a);
  EXPECT_EQ(framed.diff(3, 7, 0, b.data(), 309), 0u);
  b[1] ^= 1;
  b[100] ^= 1;
  EXPECT_EQ(framed.diff(3, 7, 0, b.data(), 309), 2u);
  EXPECT_EQ(framed.diff(3, 7, 0, b.data(), 2), 1u);  // the head alone
}

TEST(Zmtp, HandshakeSplitAnywhere) {
  const Bytes peer = router_side() + Bytes{0, 1, 'x'};  // and a message frame after it: left unread
  for (size_t chunk = 1; chunk <= peer.size(); chunk++) {
    zmtp::Handshake h;
    auto [r, left] = handshake(peer, chunk, &h);
    ASSERT_EQ(r, zmtp::Handshake::Done) << chunk << ": " << h.detail();
    EXPECT_EQ(h.peer_type(), "ROUTER");
    EXPECT_EQ(left, 3u) << chunk;
  }
  zmtp::Handshake h;  // a long-size command, a property name in other case
  EXPECT_EQ(handshake(greeting(3, "NULL") + command("READY", {{"socket-type", "DEALER"}}, true), 5, &h).first,
            zmtp::Handshake::Done)
      << h.detail();
  EXPECT_EQ(h.peer_type(), "DEALER");
}

TEST(Zmtp, HandshakeRefusals) {
  const Bytes http = {'H', 'T', 'T', 'P', '/', '1', '.', '1', ' ', '4', '0', '0'};
  EXPECT_NE(refusal(http).find("not a ZMTP peer: its first bytes are 'HTTP/1.1 400'"), std::string::npos);
  // an echo server's first byte would pass; ZMTP 1.0's 10th byte has bit 0 clear
  Bytes v1 = greeting(3, "NULL");
  v1[9] = 0;
  EXPECT_NE(refusal(v1).find("not a ZMTP peer"), std::string::npos);
  EXPECT_NE(refusal(greeting(2, "NULL")).find("ZMTP 2.x"), std::string::npos);
  EXPECT_NE(refusal(greeting(3, "CURVE")).find("mechanism 'CURVE'"), std::string::npos);
  EXPECT_NE(refusal(greeting(3, "NULL") + Bytes{0, 2, 'h', 'i'}).find("message frame"), std::string::npos);
  EXPECT_NE(refusal(greeting(3, "NULL") + command("ERROR", {})).find("refused"), std::string::npos);
  Bytes error = greeting(3, "NULL") + Bytes{0x04, 11, 5, 'E', 'R', 'R', 'O', 'R', 5, 'n', 'o', 'p', 'e'};
  EXPECT_NE(refusal(error).find("refused the handshake: 'nope'"), std::string::npos);
  EXPECT_NE(refusal(greeting(3, "NULL") + command("HELLO", {})).find("'HELLO' instead of READY"), std::string::npos);
  EXPECT_NE(refusal(greeting(3, "NULL") + command("READY", {{"Socket-Type", "PUB"}})).find("a 'PUB' socket"),
            std::string::npos);
  EXPECT_NE(refusal(greeting(3, "NULL") + command("READY", {})).find("no Socket-Type"), std::string::npos);
  Bytes cut = greeting(3, "NULL") + command("READY", {{"Socket-Type", "ROUTER"}});
  cut[zmtp::kGreetingSize + 1] -= 3;  // the value's size runs past the body
  EXPECT_NE(refusal(cut).find("malformed property"), std::string::npos);
  Bytes huge = greeting(3, "NULL") + Bytes{0x06, 0, 0, 0, 0, 0, 2, 0, 0};
  EXPECT_NE(refusal(huge).find("131072 bytes"), std::string::npos);
}

TEST(Zmtp, RequestField) {
  EXPECT_EQ(ok(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"transport":"zmtp"})").run.transport,
            Transport::Zmtp);
  Request r = ok(
      R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"transport":"zmtp","msize":300,"rate":100,"timeline":4})");
  EXPECT_EQ(r.run.message_bytes(), 309u);
  EXPECT_NE(
      why_of(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"transport":"zmtp","protocol":"line","line":"x"})")
          .find("needs transport \"tcp\""),
      std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"transport":"zmq","rate":100})")
                .find("\"tcp\" or \"zmtp\""),
            std::string::npos);
  EXPECT_NE(why_of(R"({"cmd":"run","target":"127.0.0.1:1","connections":1,"transport":"udp"})").find("\"zmtp\""),
            std::string::npos);
}

namespace {

// libzmq's ROUTER on an ephemeral loopback port, echoing every message to its sender on a thread (after
// `delay_ms`, one message at a time); with `extra`, each echo's last frame comes back that many bytes longer (a
// backend that answers too much).
class RouterEcho {
 public:
  explicit RouterEcho(int delay_ms = 0, size_t extra = 0)
      : delay_ms_(delay_ms), ctx_(zmq_ctx_new()), sock_(zmq_socket(ctx_, ZMQ_ROUTER)), extra_(extra) {
    int timeout_ms = 50, zero = 0;
    char endpoint[64];
    size_t len = sizeof endpoint;
    if (!sock_ || zmq_setsockopt(sock_, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms) < 0 ||
        zmq_setsockopt(sock_, ZMQ_LINGER, &zero, sizeof zero) < 0 || zmq_bind(sock_, "tcp://127.0.0.1:*") < 0 ||
        zmq_getsockopt(sock_, ZMQ_LAST_ENDPOINT, endpoint, &len) < 0)
      throw std::runtime_error(std::string("router: ") + zmq_strerror(zmq_errno()));
    port_ = std::stoi(strrchr(endpoint, ':') + 1);
    thread_ = std::thread([this] { echo(); });
  }
  ~RouterEcho() {
    stop_ = true;
    thread_.join();
    zmq_close(sock_);
    zmq_ctx_term(ctx_);
  }
  int port() const { return port_; }
  long echoed() const { return echoed_.load(); }

 private:
  void echo() {
    while (!stop_) {
      std::vector<zmq_msg_t> parts;
      bool more = true;
      while (more) {
        parts.emplace_back();
        zmq_msg_init(&parts.back());
        if (zmq_msg_recv(&parts.back(), sock_, 0) < 0) break;
        more = zmq_msg_more(&parts.back());
      }
      const bool whole = !more;
      if (whole && delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      if (whole && extra_ > 0) {  // the last frame, longer: its bytes and then `extra_` more
        zmq_msg_t longer;
        const size_t n = zmq_msg_size(&parts.back());
        zmq_msg_init_size(&longer, n + extra_);
        memcpy(zmq_msg_data(&longer), zmq_msg_data(&parts.back()), n);
        memset(static_cast<char*>(zmq_msg_data(&longer)) + n, 'x', extra_);
        zmq_msg_move(&parts.back(), &longer);  // releases the frame's own bytes
        zmq_msg_close(&longer);
      }
      for (size_t k = 0; k < parts.size(); k++) {
        if (whole) zmq_msg_send(&parts[k], sock_, k + 1 < parts.size() ? ZMQ_SNDMORE : 0);
        zmq_msg_close(&parts[k]);
      }
      if (whole) echoed_++;
    }
  }
  int delay_ms_;
  void* ctx_;
  void* sock_;
  size_t extra_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<long> echoed_{0};
  std::thread thread_;
};

// One 1-s run of the engine in zmtp (or zmq) mode against the server on `port` (run_against() is for
// TestServers).
Served run_zmtp(int port, const std::string& fields, int connections, const char* transport = "zmtp",
                double connect_timeout = 5) {
  json req = json::parse("{" + fields + "}");
  req["cmd"] = "run";
  req["target"] = "127.0.0.1:" + std::to_string(port);
  req["connections"] = connections;
  req["transport"] = transport;
  req["duration"] = 1.0;
  req["warmup"] = 0;
  req["connect_timeout"] = connect_timeout;
  return run_request(req);
}

}  // namespace

TEST(ZmtpEngine, AgainstLibzmqRouter) {
  RouterEcho router;
  // short frames, one in flight; long frames (9-byte header), four in flight
  for (const std::string& fields : {std::string(R"("msize":64)"), std::string(R"("msize":1000,"pipeline":4)")}) {
    Served s = run_zmtp(router.port(), fields, 3);
    ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
    EXPECT_EQ(s.stats.connected, 3) << fields;
    EXPECT_GT(s.stats.messages, 50u) << fields;
    EXPECT_EQ(s.stats.errors.mismatch, 0u) << fields;
    EXPECT_EQ(s.stats.errors.connect + s.stats.errors.timeout + s.stats.errors.reset, 0u) << fields;
    EXPECT_EQ(s.stats.latency.count(), s.stats.messages) << fields;
  }
  // every message the loader counted was one the ROUTER echoed (it also echoed those outside the window)
  EXPECT_GT(router.echoed(), 100);
}

// Connections as needed speak ZMTP too: a ROUTER that answers one message per ms serves at most 1,000/s, so
// at 2,000/s the loader opens connections up to its cap of 4 (each with its own handshake), and then the
// requests wait behind.
TEST(ZmtpEngine, ConnectionsAsNeededHandshakeToo) {
  RouterEcho router(1);
  Served s = run_zmtp(router.port(), R"("rate":2000,"max_connections":4)", 1);
  ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
  const std::string ol = stats_json(s.stats)["open_loop"].dump();
  EXPECT_EQ(s.stats.ol.conns_max, 4) << ol;
  EXPECT_GT(s.stats.ol.messages_on_opened, 0u) << ol;  // the opened connections carried messages
  EXPECT_GT(s.stats.ol.behind, 0u) << ol;
  EXPECT_EQ(s.stats.errors.mismatch, 0u);
  EXPECT_EQ(s.stats.errors.connect + s.stats.errors.timeout + s.stats.errors.reset, 0u) << s.stats.errors.sample;
  EXPECT_LE(double(s.stats.messages), 1.05 * 1000 * s.stats.duration_s + 5) << ol;  // the ROUTER's 1 ms a message
}

TEST(ZmtpEngine, NotAZmtpPeer) {
  TestServer http([](ServerConn& c) {
    std::string data;
    if (c.read(&data)) c.write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  });
  Served s = run_zmtp(http.port(), "", 2);
  ASSERT_NE(s.error_kind, nullptr);
  EXPECT_STREQ(s.error_kind, err::kConnect);
  EXPECT_NE(s.error_message.find("zmtp: not a ZMTP peer: its first bytes are 'HTTP/1.1 400"), std::string::npos)
      << s.error_message;
  EXPECT_EQ(s.stats.errors.connect, 2u);
}

// ZMQ_MAXMSGSIZE (issue 52): an echo up to 64 KiB too long is read and its extra bytes count as mismatch; a
// frame longer than that makes libzmq drop the connection before it is buffered, so the DEALERs' hellos
// are never answered and they time out (without the cap the 1-MiB echoes were read, and the run went on).
TEST(ZmqEngine, AFrameOverMsizeAnd64KiBIsNeverRead) {
  {
    RouterEcho longer(0, 1024);
    Served s = run_zmtp(longer.port(), R"("msize":64)", 2, "zmq", 2);
    ASSERT_EQ(s.error_kind, nullptr) << s.error_message;
    EXPECT_EQ(s.stats.connected, 2);
    EXPECT_GE(s.stats.errors.mismatch, 2u * 1024u);
  }
  RouterEcho huge(0, 1 << 20);
  Served s = run_zmtp(huge.port(), R"("msize":64)", 2, "zmq", 2);
  ASSERT_NE(s.error_kind, nullptr) << "the oversized echoes were read: " << s.stats.errors.mismatch << " bytes";
  EXPECT_STREQ(s.error_kind, err::kConnect);
  EXPECT_EQ(s.stats.errors.timeout, 2u);
  EXPECT_EQ(s.stats.errors.mismatch, 0u);
}
