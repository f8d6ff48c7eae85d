// ZeroMQ mode: one thread drives N DEALER sockets with zmq_poll (plus the control client and the
// signalfd as plain fds in the same poll set); libzmq's own I/O thread does the TCP work.
//
// A message is one frame of msize bytes; the backend (a ROUTER) must send each frame back to the
// DEALER it came from. "Connected" means one round trip: every DEALER sends a hello frame at once
// and is up when its echo is back (ZeroMQ connects and reconnects silently, so an answered message is
// the only proof the path works). Contract: PROTOCOL.md, "ZeroMQ mode".
#include "zmq_engine.hpp"

#include <errno.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <queue>
#include <random>

#include "clock.hpp"
#include "payload.hpp"

namespace netprof {
namespace {

constexpr int kIoThreads = 1;                      // libzmq I/O threads (besides ours)
constexpr uint64_t kHelloSeq = uint64_t(1) << 63;  // the hello's sequence number: never a real one

struct ZConn {
  void* sock = nullptr;
  enum State : uint8_t { Connecting, Up, Dead } state = Connecting;
  uint32_t credits = 0;
  uint64_t sent = 0, recvd = 0, window_msgs = 0;
};

struct ThinkTimer {
  int64_t due;
  uint32_t conn;
  bool operator>(const ThinkTimer& o) const { return due > o.due; }
};

double tv_s(const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; }

class ZmqRun {
 public:
  ZmqRun(const RunRequest& req, const std::function<bool(const json&)>& emit, const Watch& watch)
      : req_(req), emit_(emit), watch_(watch), frames_(req.msize), rng_(uint64_t(now_ns())) {}

  ~ZmqRun() {
    for (auto& c : conns_)
      if (c.sock) zmq_close(c.sock);  // ZMQ_LINGER 0: unsent frames are dropped, close is immediate
    if (ctx_) zmq_ctx_term(ctx_);
  }

  RunOutcome run() {
    RunOutcome out;
    Stats& st = out.stats;
    const int N = req_.connections;
    st.connections = N;
    st.msize = req_.msize;
    st.pipeline = req_.pipeline;
    auto fail = [&](const char* kind, std::string msg) {
      out.error_kind = kind;
      out.error_message = std::move(msg);
    };

    // Refusals before the run (no `accepted`): each DEALER holds a TCP socket in libzmq's I/O thread
    // and a mailbox eventfd, so twice the descriptors of the TCP mode.
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && rlim_t(2) * rlim_t(N) + kFdReserve > rl.rlim_cur) {
      fail(err::kBadRequest, "connections=" + std::to_string(N) +
                                 " exceeds the open-file limit in zmq mode: each DEALER needs 2 descriptors and "
                                 "RLIMIT_NOFILE (ulimit -n) is " + std::to_string(rl.rlim_cur) + "; use at most " +
                                 std::to_string(rl.rlim_cur > kFdReserve ? (rl.rlim_cur - kFdReserve) / 2 : 0) +
                                 " connections or raise `ulimit -n`");
      return out;
    }
    ctx_ = zmq_ctx_new();
    if (!ctx_ || zmq_ctx_set(ctx_, ZMQ_IO_THREADS, kIoThreads) < 0 ||
        zmq_ctx_set(ctx_, ZMQ_MAX_SOCKETS, N + 16) < 0) {
      fail(err::kBadRequest, "cannot create a ZeroMQ context for " + std::to_string(N) +
                                 " sockets (limit " + std::to_string(ctx_ ? zmq_ctx_get(ctx_, ZMQ_SOCKET_LIMIT) : 0) +
                                 "): " + zmq_strerror(zmq_errno()));
      return out;
    }

    if (!emit_(event("accepted"))) {
      out.client_gone = true;
      return out;
    }
    const int64_t t0 = now_ns();
    const size_t K = size_t(req_.pipeline);
    conns_.resize(size_t(N));
    ring_.assign(size_t(N) * K, 0);
    sbuf_.resize(size_t(req_.msize));
    items_.resize(size_t(N));
    for (int i = 0; i < N; i++) open(uint32_t(i));
    size_t client_item = items_.size(), signal_item = items_.size();
    if (watch_.client_fd >= 0) {
      client_item = items_.size();
      items_.push_back({nullptr, watch_.client_fd, ZMQ_POLLIN, 0});
    }
    if (watch_.signal_fd >= 0) {
      signal_item = items_.size();
      items_.push_back({nullptr, watch_.signal_fd, ZMQ_POLLIN, 0});
    }

    const int64_t connect_deadline = t0 + s_to_ns(req_.connect_timeout);
    bool running = false, window_open = false, no_connection = false;
    int up = 0;
    rusage ru0{};
    while (true) {
      int64_t now = now_ns();
      if (!running) {
        if (resolved_ == size_t(N) || now >= connect_deadline) {
          up = expire_connects();
          st.setup_s = ns_to_s(now - t0);
          json ev = event_at("connected", ns_to_s(now));
          ev["connected"] = up;
          ev["failed"] = N - up;
          ev["setup_s"] = std::round(st.setup_s * 1e6) / 1e6;
          if (!emit_(ev)) {
            out.client_gone = true;
            break;
          }
          if (up == 0) {
            no_connection = true;
            fail(err::kConnect, "");
            break;
          }
          t_start_ = now + s_to_ns(req_.warmup);
          t_stop_ = t_start_ + s_to_ns(req_.duration);
          running = true;
          for (uint32_t i = 0; i < conns_.size(); i++) {
            if (conns_[i].state != ZConn::Up) continue;
            conns_[i].credits = uint32_t(K);
            try_send(i);
          }
          continue;
        }
      } else {
        run_think(now);
        if (!retry_.empty()) {
          std::vector<uint32_t> again;
          again.swap(retry_);
          for (uint32_t i : again) try_send(i);
        }
        if (!window_open && now >= t_start_) {
          getrusage(RUSAGE_SELF, &ru0);
          window_open = true;
          if (!emit_(event_at("measure_start", ns_to_s(t_start_)))) {
            out.client_gone = true;
            break;
          }
        }
        if (now >= t_stop_) break;
      }
      int64_t next = !running ? connect_deadline : (window_open ? t_stop_ : t_start_);
      if (!think_.empty()) next = std::min(next, think_.top().due);
      long timeout_ms = long(std::max<int64_t>(0, (next - now + 999'999) / 1'000'000));
      if (!retry_.empty()) timeout_ms = std::min(timeout_ms, 1L);
      int rc = zmq_poll(items_.data(), int(items_.size()), timeout_ms);
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        fail(err::kInternal, std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
        break;
      }
      if (rc == 0) continue;
      for (uint32_t i = 0; i < uint32_t(N); i++)
        if (items_[i].revents & ZMQ_POLLIN) drain(i);
      if (client_item < items_.size() && items_[client_item].revents && !client_still_there(watch_)) {
        out.client_gone = true;
        break;
      }
      if (signal_item < items_.size() && items_[signal_item].revents) {
        signalfd_siginfo si;
        (void)!read(watch_.signal_fd, &si, sizeof si);
        out.signalled = true;
        break;
      }
    }

    bool aborted = out.error_kind || out.client_gone || out.signalled;
    if (aborted && t_start_) t_stop_ = std::max(std::min(now_ns(), t_stop_), t_start_);
    if (window_open) {
      rusage ru1{};
      getrusage(RUSAGE_SELF, &ru1);  // includes libzmq's I/O thread
      st.user_s = tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime);
      st.sys_s = tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime);
      if (!out.client_gone && !emit_(event_at("measure_stop", ns_to_s(t_stop_)))) out.client_gone = true;
      st.t_start = ns_to_s(t_start_);
      st.t_stop = ns_to_s(t_stop_);
      st.duration_s = ns_to_s(t_stop_ - t_start_);
      st.cpu_frac = st.duration_s > 0 ? (st.user_s + st.sys_s) / (st.duration_s * (1 + kIoThreads)) : 0;
    }
    st.per_conn_messages.resize(size_t(N));
    for (size_t i = 0; i < conns_.size(); i++) {
      st.per_conn_messages[i] = conns_[i].window_msgs;
      st.messages += conns_[i].window_msgs;
      st.connected += conns_[i].state == ZConn::Up;
    }
    if (running) st.connected = up;  // a DEALER that died mid-run still counts as connected
    st.latency.merge(hist_);
    st.errors = errors_;
    if (no_connection)
      out.error_message = "no ZeroMQ peer at tcp://" + req_.target + " answered a hello within " +
                          json(req_.connect_timeout).dump() + " s (" + std::to_string(errors_.connect) +
                          " sockets failed, " + std::to_string(errors_.timeout) +
                          " unanswered): is a ROUTER backend bound there?";
    st.warmup_s = t_start_ ? req_.warmup : 0;
    st.aborted = aborted;
    return out;
  }

 private:
  void open(uint32_t i) {
    ZConn& c = conns_[i];
    items_[i] = {nullptr, -1, ZMQ_POLLIN, 0};
    c.sock = zmq_socket(ctx_, ZMQ_DEALER);
    if (!c.sock) return hard_fail(i);  // EMFILE, or the context's socket limit
    int zero = 0;
    // In-flight messages are bounded by `pipeline`: unlimited queues never make a send EAGAIN.
    zmq_setsockopt(c.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(c.sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(c.sock, ZMQ_RCVHWM, &zero, sizeof zero);
    const std::string& src = req_.sources[i % req_.sources.size()];
    // libzmq's "tcp://SOURCE:0;TARGET" binds the outgoing connection to a source address.
    std::string endpoint = "tcp://" + (req_.sources.size() == 1 && src == "127.0.0.1" ? "" : src + ":0;") + req_.target;
    if (zmq_connect(c.sock, endpoint.c_str()) < 0) return hard_fail(i);
    items_[i].socket = c.sock;
    frames_.fill(i, kHelloSeq, 0, frames_.size(), sbuf_.data());
    if (zmq_send(c.sock, sbuf_.data(), sbuf_.size(), ZMQ_DONTWAIT) < 0) hard_fail(i);
  }

  void hard_fail(uint32_t i) {
    ZConn& c = conns_[i];
    if (c.sock) zmq_close(c.sock);
    c.sock = nullptr;
    items_[i] = {nullptr, -1, ZMQ_POLLIN, 0};  // a negative fd is ignored by poll
    c.state = ZConn::Dead;
    errors_.connect++;
    resolved_++;
  }

  // End of the connect phase: DEALERs whose hello is unanswered count as `timeout` and are closed.
  int expire_connects() {
    int up = 0;
    for (uint32_t i = 0; i < conns_.size(); i++) {
      ZConn& c = conns_[i];
      if (c.state == ZConn::Up) up++;
      if (c.state != ZConn::Connecting) continue;
      errors_.timeout++;
      zmq_close(c.sock);
      c.sock = nullptr;
      items_[i] = {nullptr, -1, ZMQ_POLLIN, 0};
      c.state = ZConn::Dead;
      resolved_++;
    }
    return up;
  }

  // Every message queued on DEALER i; extra frames of a multipart echo are bytes never sent.
  void drain(uint32_t i) {
    void* sock = conns_[i].sock;
    while (sock) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      int n = zmq_msg_recv(&m, sock, ZMQ_DONTWAIT);
      if (n < 0) {
        zmq_msg_close(&m);
        if (zmq_errno() == EINTR) continue;
        return;  // EAGAIN: drained
      }
      on_message(i, static_cast<const uint8_t*>(zmq_msg_data(&m)), zmq_msg_size(&m), now_ns());
      bool more = zmq_msg_more(&m);
      while (more) {
        if (zmq_msg_recv(&m, sock, 0) < 0) break;  // the rest of a multipart message is already here
        errors_.mismatch += zmq_msg_size(&m);
        more = zmq_msg_more(&m);
      }
      zmq_msg_close(&m);
    }
  }

  void on_message(uint32_t i, const uint8_t* data, size_t len, int64_t now) {
    ZConn& c = conns_[i];
    if (c.state == ZConn::Connecting) {
      errors_.mismatch += frames_.diff_whole(i, kHelloSeq, data, len);  // a wrong hello still proves the path
      c.state = ZConn::Up;
      resolved_++;
      return;
    }
    if (c.state != ZConn::Up) return;
    if (c.recvd >= c.sent) {  // an echo of nothing outstanding (a duplicate, a stray hello)
      errors_.mismatch += len;
      return;
    }
    size_t bad = frames_.diff_whole(i, c.recvd, data, len);
    errors_.mismatch += bad;
    const size_t K = size_t(req_.pipeline);
    if (!bad && now >= t_start_ && now < t_stop_) {
      c.window_msgs++;
      hist_.record(uint64_t(now - ring_[size_t(i) * K + c.recvd % K]));
    }
    c.recvd++;
    if (req_.think.active()) {
      think_.push({now + int64_t(req_.think.sample_ns(rng_)), i});
    } else {
      c.credits++;
      try_send(i);
    }
  }

  void try_send(uint32_t i) {
    ZConn& c = conns_[i];
    const size_t K = size_t(req_.pipeline);
    while (c.credits > 0 && c.state == ZConn::Up) {
      frames_.fill(i, c.sent, 0, frames_.size(), sbuf_.data());
      ring_[size_t(i) * K + c.sent % K] = now_ns();
      if (zmq_send(c.sock, sbuf_.data(), sbuf_.size(), ZMQ_DONTWAIT) < 0) {
        if (zmq_errno() == EINTR) continue;
        if (zmq_errno() == EAGAIN) {
          retry_.push_back(i);  // not with unlimited HWM, but never lose a credit
        } else {
          errors_.reset++;
          c.state = ZConn::Dead;
        }
        return;
      }
      c.sent++;
      c.credits--;
    }
  }

  void run_think(int64_t now) {
    while (!think_.empty() && think_.top().due <= now) {
      uint32_t i = think_.top().conn;
      think_.pop();
      conns_[i].credits++;
      try_send(i);
    }
  }

  const RunRequest& req_;
  const std::function<bool(const json&)>& emit_;
  Watch watch_;
  Payload frames_;  // as in the TCP engine
  std::mt19937_64 rng_;
  void* ctx_ = nullptr;
  std::vector<ZConn> conns_;
  std::vector<zmq_pollitem_t> items_;  // one per DEALER, then the control client and the signalfd
  std::vector<int64_t> ring_;          // per DEALER, K send timestamps indexed by seq % K
  std::vector<uint8_t> sbuf_;
  std::vector<uint32_t> retry_;
  std::priority_queue<ThinkTimer, std::vector<ThinkTimer>, std::greater<ThinkTimer>> think_;
  size_t resolved_ = 0;  // DEALERs up or given up on
  int64_t t_start_ = 0, t_stop_ = 0;
  Histogram hist_;
  Errors errors_;
};

}  // namespace

RunOutcome run_zmq_load(const RunRequest& req, const EngineConfig& /*cfg: one thread, process affinity*/,
                        const std::function<bool(const json&)>& emit, const Watch& watch) {
  return ZmqRun(req, emit, watch).run();
}

}  // namespace netprof
