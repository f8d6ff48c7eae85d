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
#include <memory>
#include <new>
#include <queue>
#include <random>

#include "clock.hpp"
#include "payload.hpp"
#include "run_window.hpp"

namespace netprof {
namespace {

constexpr int kIoThreads = 1;                      // libzmq I/O threads (besides ours)
constexpr uint64_t kHelloSeq = uint64_t(1) << 63;  // the hello's sequence number: never a real one
// ZMQ_MAXMSGSIZE is msize and this much: a longer echo is still read (its extra bytes count as `mismatch`),
// a frame longer than that makes libzmq drop the connection before it buffers the frame, so a backend
// cannot have the loader (root) allocate whatever size a frame header says.
constexpr int64_t kFrameSlack = 64 * 1024;

// Owners of libzmq handles (the ZeroMQ counterpart of Fd).
struct ZmqSocketClose {
  void operator()(void* s) const { zmq_close(s); }  // ZMQ_LINGER 0: unsent frames are dropped, close is immediate
};
using ZSocket = std::unique_ptr<void, ZmqSocketClose>;
struct ZmqContextTerm {
  void operator()(void* ctx) const {
    while (zmq_ctx_term(ctx) < 0 && zmq_errno() == EINTR) {
    }
  }
};
using ZContext = std::unique_ptr<void, ZmqContextTerm>;

struct ZConn {
  ZSocket sock;
  enum State : uint8_t { Connecting, Up, Dead } state = Connecting;
  uint32_t credits = 0;
  uint64_t sent = 0, recvd = 0;
  PerPhase<uint64_t> window_msgs{};    // by phase
  std::unique_ptr<int64_t[]> sent_at;  // K send timestamps by seq % K, allocated when the DEALER is up
};

struct ThinkTimer {
  int64_t due;
  uint32_t conn;
  bool operator>(const ThinkTimer& o) const { return due > o.due; }
};

class ZmqRun {
 public:
  ZmqRun(const RunRequest& req, const Emit& emit, const Watch& watch)
      : req_(req), emit_(emit), watch_(watch), frames_(req.msize), rng_(uint64_t(now_ns())), window_(req, emit) {}

  RunOutcome run() {
    RunOutcome out;
    Stats& st = out.stats;
    const int N = req_.connections;
    st.connections = N;
    st.msize = req_.msize;
    st.pipeline = req_.pipeline;

    // Refusals before the run (no `accepted`): each DEALER holds a TCP socket in libzmq's I/O thread
    // and a mailbox eventfd, so twice the descriptors of the TCP mode.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rlim_t(2) * rlim_t(N) + kFdReserve > rl.rlim_cur) {
      fail_run(out, err::kBadRequest,
               "connections=" + std::to_string(N) +
                   " exceeds the open-file limit in zmq mode: each DEALER needs 2 descriptors and "
                   "RLIMIT_NOFILE (ulimit -n) is " +
                   std::to_string(rl.rlim_cur) + "; use at most " +
                   std::to_string(rl.rlim_cur > kFdReserve ? (rl.rlim_cur - kFdReserve) / 2 : 0) +
                   " connections or raise `ulimit -n`");
      return out;
    }
    ctx_.reset(zmq_ctx_new());
    if (!ctx_ || zmq_ctx_set(ctx_.get(), ZMQ_IO_THREADS, kIoThreads) < 0 ||
        zmq_ctx_set(ctx_.get(), ZMQ_MAX_SOCKETS, N + 16) < 0) {
      fail_run(out, err::kBadRequest,
               "cannot create a ZeroMQ context for " + std::to_string(N) + " sockets (limit " +
                   std::to_string(ctx_ ? zmq_ctx_get(ctx_.get(), ZMQ_SOCKET_LIMIT) : 0) +
                   "): " + zmq_strerror(zmq_errno()));
      return out;
    }

    const bool no_connection = play_guarded(out, [&] { return play(out); });
    const bool aborted = end_window(window_, out);

    st.init_counts(N);
    for (size_t i = 0; i < conns_.size(); i++) {
      st.add_conn(uint32_t(i), conns_[i].window_msgs);
      st.connected += conns_[i].state == ZConn::Up;
    }
    if (running_) st.connected = up_;  // a DEALER that died mid-run still counts as connected
    st.add_latency(hist_);
    if (window_.opened()) {  // still waiting at the window's end: answered late, or not at all (DEALERs up)
      const int64_t stop = window_.bounds().stop;
      for (uint32_t i = 0; i < conns_.size(); i++)
        if (conns_[i].state == ZConn::Up && conns_[i].sent_at)
          waiting_.in_flight(i, conns_[i].sent_at.get(), size_t(req_.pipeline), conns_[i].recvd, conns_[i].sent, stop,
                             int64_t(st.latency.max()));
      st.set_unanswered(waiting_.msgs, stop);
    }
    st.errors = errors_;
    if (no_connection)
      out.error_message = "no ZeroMQ peer at tcp://" + req_.target + " answered a hello within " +
                          json(req_.connect_timeout).dump() + " s (" + std::to_string(errors_.connect) +
                          " sockets failed, " + std::to_string(errors_.timeout) +
                          " unanswered): is a ROUTER backend bound there?";
    window_.finish(st, 1 + kIoThreads);  // getrusage covers libzmq's I/O thread too
    st.aborted = aborted && accepted_;
    return out;
  }

 private:
  // Connect phase, warm-up and window. True when no DEALER came up.
  bool play(RunOutcome& out) {
    const int N = req_.connections;
    if (!emit_(event("accepted"))) {
      out.client_gone = true;
      return false;
    }
    accepted_ = true;
    // An abort may already be in the input read with the request (poll would not report it again).
    if (watch_.client_fd >= 0 && !client_ok(poll_client(watch_), out)) return false;
    const int64_t t0 = now_ns();
    const size_t K = size_t(req_.pipeline);
    conns_.resize(size_t(N));
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
    while (true) {
      int64_t now = now_ns();
      if (!running_) {
        if (resolved_ == size_t(N) || now >= connect_deadline) {
          up_ = expire_connects();
          if (up_ > 0) window_.fix(now);  // before `connected`, which announces its bounds
          if (!window_.connected(out.stats, t0, now, up_)) {
            out.client_gone = true;
            return false;
          }
          if (up_ == 0) {
            fail_run(out, err::kConnect, "");  // message built by run() (it needs the counts)
            return true;
          }
          running_ = true;
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
        if (!window_.advance(now) || !window_.progress(now, completed_, in_window_)) {
          out.client_gone = true;
          return false;
        }
        if (window_.closed()) return false;
      }
      int64_t next = !running_ ? connect_deadline : std::min(window_.next_mark(), window_.next_progress());
      if (!think_.empty()) next = std::min(next, think_.top().due);
      long timeout_ms = long(std::max<int64_t>(0, (next - now + 999'999) / 1'000'000));
      if (!retry_.empty()) timeout_ms = std::min(timeout_ms, 1L);
      int rc = zmq_poll(items_.data(), int(items_.size()), timeout_ms);
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        fail_run(out, err::kInternal, std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
        return false;
      }
      if (rc == 0) continue;
      for (uint32_t i = 0; i < uint32_t(N); i++)
        if (items_[i].revents & ZMQ_POLLIN) drain(i);
      if (client_item < items_.size() && items_[client_item].revents && !client_ok(poll_client(watch_), out))
        return false;
      if (signal_item < items_.size() && items_[signal_item].revents && take_signal(watch_.signal_fd)) {
        out.signalled = true;
        return false;
      }
    }
  }

 private:
  void open(uint32_t i) {
    ZConn& c = conns_[i];
    items_[i] = {nullptr, -1, ZMQ_POLLIN, 0};
    c.sock.reset(zmq_socket(ctx_.get(), ZMQ_DEALER));
    if (!c.sock) return hard_fail(i);  // EMFILE, or the context's socket limit
    int zero = 0;
    const int64_t max_frame = int64_t(req_.msize) + kFrameSlack;
    // In-flight messages are bounded by `pipeline`: unlimited queues never make a send EAGAIN.
    if (zmq_setsockopt(c.sock.get(), ZMQ_LINGER, &zero, sizeof zero) < 0 ||
        zmq_setsockopt(c.sock.get(), ZMQ_SNDHWM, &zero, sizeof zero) < 0 ||
        zmq_setsockopt(c.sock.get(), ZMQ_RCVHWM, &zero, sizeof zero) < 0 ||
        zmq_setsockopt(c.sock.get(), ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame) < 0)
      return hard_fail(i);
    const std::string& src = req_.sources[i % req_.sources.size()];
    // libzmq's "tcp://SOURCE:0;TARGET" binds the outgoing connection to a source address.
    std::string endpoint = "tcp://" + (req_.sources.size() == 1 && src == "127.0.0.1" ? "" : src + ":0;") + req_.target;
    if (zmq_connect(c.sock.get(), endpoint.c_str()) < 0) return hard_fail(i);
    items_[i].socket = c.sock.get();
    frames_.fill(i, kHelloSeq, 0, frames_.size(), sbuf_.data());
    if (zmq_send(c.sock.get(), sbuf_.data(), sbuf_.size(), ZMQ_DONTWAIT) < 0) hard_fail(i);
  }

  void hard_fail(uint32_t i) {
    ZConn& c = conns_[i];
    c.sock.reset();
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
      c.sock.reset();
      items_[i] = {nullptr, -1, ZMQ_POLLIN, 0};
      c.state = ZConn::Dead;
      resolved_++;
    }
    return up;
  }

  // Every message queued on DEALER i; extra frames of a multipart echo are bytes never sent.
  void drain(uint32_t i) {
    void* sock = conns_[i].sock.get();
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
      c.sent_at = std::make_unique<int64_t[]>(size_t(req_.pipeline));   // bad_alloc: the run fails as `internal`
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
    const WindowBounds& window = window_.bounds();
    const int phase = phase_at(window, now);
    const int64_t sent = c.sent_at[c.recvd % K];
    if (!bad) {
      completed_++;
      in_window_ += phase != kOutside;
    }
    if (!bad && phase != kOutside) {
      c.window_msgs[phase]++;
      hist_[phase].record(uint64_t(now - sent));
    }
    if (now >= window.stop) waiting_.answered(i, sent, now, window.stop, int64_t(slowest_of(hist_)));
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
      c.sent_at[c.sent % K] = now_ns();
      if (zmq_send(c.sock.get(), sbuf_.data(), sbuf_.size(), ZMQ_DONTWAIT) < 0) {
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
  const Emit& emit_;
  Watch watch_;
  Payload frames_;  // as in the TCP engine
  std::mt19937_64 rng_;
  RunWindow window_;
  bool accepted_ = false, running_ = false;
  int up_ = 0;
  ZContext ctx_;  // before conns_: terminated after every socket is closed
  std::vector<ZConn> conns_;
  std::vector<zmq_pollitem_t> items_;  // one per DEALER, then the control client and the signalfd
  std::vector<uint8_t> sbuf_;
  std::vector<uint32_t> retry_;
  std::priority_queue<ThinkTimer, std::vector<ThinkTimer>, std::greater<ThinkTimer>> think_;
  size_t resolved_ = 0;       // DEALERs up or given up on
  PerPhase<Histogram> hist_;  // by phase
  Errors errors_;
  Waiting waiting_;                         // answered after the window's end (those never answered: added at the end)
  uint64_t completed_ = 0, in_window_ = 0;  // answered since pinging began / in the window: progress events
};

}  // namespace

RunOutcome run_zmq_load(const RunRequest& req, const EngineConfig& /*cfg: one thread, process affinity*/,
                        const Emit& emit, const Watch& watch) {
  return ZmqRun(req, emit, watch).run();
}

}  // namespace netprof
