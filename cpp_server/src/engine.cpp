#include "engine.hpp"
#include "payload.hpp"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <atomic>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <thread>

#include "clock.hpp"
#include "zmq_engine.hpp"

namespace netprof {

bool check_fd_limit(int connections, std::string* why) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur != RLIM_INFINITY && rlim_t(connections) + kFdReserve > rl.rlim_cur) {
    *why = "connections=" + std::to_string(connections) + " exceeds the open-file limit: RLIMIT_NOFILE (ulimit -n) is " +
           std::to_string(rl.rlim_cur) + " and the loader needs connections + " + std::to_string(kFdReserve) +
           "; use at most " + std::to_string(rl.rlim_cur > kFdReserve ? rl.rlim_cur - kFdReserve : 0) +
           " connections or raise `ulimit -n`";
    return false;
  }
  return true;
}

namespace {

enum Phase : int { kConnect, kRun, kStop };

// Connect pacing. A SYN that hits a full accept queue is dropped and the kernel would retry only
// after 1 s; instead we give each attempt a short deadline and reconnect (the seed's backlog race).
// Without a cap on attempts in flight, 19k connects to a backlog-100 listener collapse into SYN drops
// (2k of 19k up in 8 s); with it, setup runs at the backend's accept rate.
constexpr int kMaxConnecting = 128;           // per worker, attempts in flight
constexpr int64_t kAttemptTimeoutNs = 100'000'000;
constexpr int64_t kBackoffMinNs = 1'000'000, kBackoffMaxNs = 200'000'000;
constexpr size_t kIoBuf = 256 * 1024;

struct Conn {
  enum State : uint8_t { Idle, Backoff, Connecting, Up, Dead };
  int fd = -1;
  uint32_t id = 0;  // global connection index
  State state = Idle;
  bool want_out = false;      // EPOLLOUT currently registered
  bool last_refused = false;  // last attempt was refused (vs. timed out)
  uint32_t attempts = 0;
  uint32_t gen = 0;  // invalidates stale connect timers
  uint32_t credits = 0;
  uint64_t started = 0;  // messages started (credit taken, timestamp set)
  uint64_t send_seq = 0;
  size_t send_off = 0;
  uint64_t recv_seq = 0;
  size_t recv_off = 0;
  bool recv_bad = false;
  uint64_t window_msgs = 0;
};

struct Timer {
  int64_t due;
  uint32_t conn;
  uint32_t gen;
  enum Kind : uint8_t { Retry, AttemptTimeout, Think } kind;
  bool operator>(const Timer& o) const { return due > o.due; }
};

struct Shared {
  const RunRequest* req;
  const Payload* payload;
  std::atomic<int> phase{kConnect};
  std::atomic<int64_t> t_start{INT64_MAX}, t_stop{INT64_MAX};
  std::atomic<int> workers_ready{0};  // workers done with the connect phase
  std::atomic<long> alive{0};         // connections up now
  std::atomic<long> ever_up{0};       // connections that came up
  int64_t connect_deadline = 0;
  int notify_fd = -1;  // eventfd: worker -> coordinator
  void notify() {
    uint64_t one = 1;
    (void)!write(notify_fd, &one, 8);
  }
};

constexpr uint64_t kWakeTag = UINT64_MAX;

class Worker {
 public:
  Worker(Shared& sh, int index, int nworkers, int cpu) : sh_(sh), cpu_(cpu), rng_(splitmix64(index + 1) ^ now_ns()) {
    const RunRequest& r = *sh.req;
    for (int i = index; i < r.connections; i += nworkers) {
      conns_.emplace_back();
      conns_.back().id = uint32_t(i);
    }
    ring_.assign(conns_.size() * size_t(r.pipeline), 0);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    epoll_ctl(ep_, EPOLL_CTL_ADD, wake_fd_, &ev);
    buf_.resize(kIoBuf);
  }
  ~Worker() {
    for (auto& c : conns_)
      if (c.fd >= 0) close(c.fd);
    close(ep_);
    close(wake_fd_);
  }

  void start() { thread_ = std::thread([this] { loop(); }); }
  void wake() {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, 8);
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

  // Results, read after join().
  Histogram hist;
  Errors errors;
  int connected = 0;
  const std::vector<Conn>& conns() const { return conns_; }

 private:
  void loop() {
    if (cpu_ >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu_, &set);
      pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    for (size_t i = 0; i < conns_.size(); i++) pending_.push_back(uint32_t(i));
    bool connect_done = false, running = false;
    std::vector<epoll_event> evs(1024);
    while (true) {
      int phase = sh_.phase.load(std::memory_order_acquire);
      if (phase == kStop) break;
      run_timers(now_ns());  // first: a retry timer may queue a connection to start below
      int64_t now = now_ns();
      if (!connect_done) {
        start_connects(now);
        if (now >= sh_.connect_deadline) expire_connects();
        if (resolved_ == conns_.size()) {
          connect_done = true;
          sh_.workers_ready.fetch_add(1);
          sh_.notify();
        }
      } else if (phase == kRun && !running) {
        running = true;
        for (uint32_t i = 0; i < conns_.size(); i++) {
          if (conns_[i].state != Conn::Up) continue;
          conns_[i].credits = uint32_t(sh_.req->pipeline);
          try_send(i);
        }
      }
      int64_t wait = connect_done ? -1 : std::max<int64_t>(0, sh_.connect_deadline - now);
      if (!timers_.empty()) {
        int64_t t = std::max<int64_t>(0, timers_.top().due - now_ns());
        wait = wait < 0 ? t : std::min(wait, t);
      }
      timespec ts = ns_to_timespec(wait);
      int n = epoll_pwait2(ep_, evs.data(), int(evs.size()), wait < 0 ? nullptr : &ts, nullptr);
      if (n < 0) continue;  // EINTR
      for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == kWakeTag) {
          uint64_t v;
          (void)!read(wake_fd_, &v, 8);
          continue;
        }
        on_event(uint32_t(evs[i].data.u64), evs[i].events);
      }
    }
  }

  // ---- connect phase ----

  void start_connects(int64_t now) {
    while (connecting_ < kMaxConnecting && !pending_.empty() && now < sh_.connect_deadline) {
      uint32_t i = pending_.front();
      pending_.pop_front();
      attempt(i, now);
    }
  }

  void attempt(uint32_t i, int64_t now) {
    Conn& c = conns_[i];
    const RunRequest& r = *sh_.req;
    c.attempts++;
    c.gen++;
    c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) return hard_fail(i);  // EMFILE and friends: retrying cannot help
    int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // Port chosen at connect() time, per 4-tuple: each source address gets its own ~28k ports.
    setsockopt(c.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr = r.source_addrs[c.id % r.source_addrs.size()];
    if (bind(c.fd, reinterpret_cast<sockaddr*>(&src), sizeof src) < 0) return hard_fail(i);
    int rc = connect(c.fd, reinterpret_cast<const sockaddr*>(&r.target_addr), sizeof r.target_addr);
    if (rc == 0) return became_up(i);
    if (errno == EINPROGRESS) {
      c.state = Conn::Connecting;
      connecting_++;
      epoll_event ev{};
      ev.events = EPOLLOUT;
      ev.data.u64 = i;
      epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
      timers_.push({now + kAttemptTimeoutNs, i, c.gen, Timer::AttemptTimeout});
      return;
    }
    connect_error(i, errno, now);
  }

  static bool retryable(int e) {
    return e == ECONNREFUSED || e == EAGAIN || e == EADDRNOTAVAIL || e == ETIMEDOUT || e == ECONNRESET ||
           e == EADDRINUSE || e == EINTR;
  }

  void connect_error(uint32_t i, int e, int64_t now) {
    Conn& c = conns_[i];
    if (!retryable(e)) return hard_fail(i);
    close_fd(c);
    c.last_refused = e != ETIMEDOUT;
    c.state = Conn::Backoff;
    c.gen++;
    // Exponential backoff with jitter so a refused burst does not come back in lockstep.
    int64_t d = std::min(kBackoffMaxNs, kBackoffMinNs << std::min<uint32_t>(c.attempts, 10));
    d = d / 2 + int64_t(rng_() % uint64_t(d / 2 + 1));
    timers_.push({now + d, i, c.gen, Timer::Retry});
  }

  void hard_fail(uint32_t i) {
    Conn& c = conns_[i];
    close_fd(c);
    c.state = Conn::Dead;
    errors.connect++;
    resolved_++;
  }

  void became_up(uint32_t i) {
    Conn& c = conns_[i];
    c.state = Conn::Up;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev) < 0) epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev);
    connected++;
    resolved_++;
    sh_.alive.fetch_add(1);
    sh_.ever_up.fetch_add(1);
  }

  // connect_timeout reached: whatever is not up now never will be (for this run).
  void expire_connects() {
    for (auto& c : conns_) {
      if (c.state == Conn::Up || c.state == Conn::Dead) continue;
      if (c.last_refused)
        errors.connect++;
      else
        errors.timeout++;
      if (c.state == Conn::Connecting) connecting_--;
      close_fd(c);
      c.state = Conn::Dead;
      c.gen++;
      resolved_++;
    }
    pending_.clear();
  }

  void close_fd(Conn& c) {
    if (c.fd >= 0) close(c.fd);  // close() also drops it from the epoll set
    c.fd = -1;
    c.want_out = false;
  }

  // ---- timers ----

  void run_timers(int64_t now) {
    while (!timers_.empty() && timers_.top().due <= now) {
      Timer t = timers_.top();
      timers_.pop();
      Conn& c = conns_[t.conn];
      switch (t.kind) {
        case Timer::Retry:
          if (c.state == Conn::Backoff && c.gen == t.gen) {
            c.state = Conn::Idle;
            pending_.push_front(t.conn);
          }
          break;
        case Timer::AttemptTimeout:
          if (c.state == Conn::Connecting && c.gen == t.gen) {
            connecting_--;
            connect_error(t.conn, ETIMEDOUT, now);
          }
          break;
        case Timer::Think:
          if (c.state == Conn::Up) {
            c.credits++;
            try_send(t.conn);
          }
          break;
      }
    }
  }

  // ---- ping-pong ----

  void on_event(uint32_t i, uint32_t events) {
    Conn& c = conns_[i];
    if (c.state == Conn::Connecting) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      connecting_--;
      if (err == 0 && !(events & (EPOLLERR | EPOLLHUP)))
        became_up(i);
      else
        connect_error(i, err ? err : ECONNREFUSED, now_ns());
      return;
    }
    if (c.state != Conn::Up) return;  // closed earlier in this batch
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
      if (!on_readable(i)) return;
    }
    if ((events & EPOLLOUT) && c.state == Conn::Up) try_send(i);
  }

  // Returns false when the connection died.
  bool on_readable(uint32_t i) {
    Conn& c = conns_[i];
    const size_t msize = size_t(sh_.req->msize);
    while (true) {
      ssize_t n = recv(c.fd, buf_.data(), buf_.size(), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        lost(i);
        return false;
      }
      if (n < 0) return true;
      int64_t now = now_ns();
      int64_t t_start = sh_.t_start.load(std::memory_order_relaxed);
      int64_t t_stop = sh_.t_stop.load(std::memory_order_relaxed);
      const uint8_t* p = buf_.data();
      size_t left = size_t(n);
      // Bytes the backend may legitimately echo: everything sent and not yet echoed.
      uint64_t outstanding = (c.send_seq - c.recv_seq) * msize + c.send_off - c.recv_off;
      if (left > outstanding) {
        errors.mismatch += left - outstanding;  // bytes we never sent
        left = size_t(outstanding);
      }
      while (left > 0) {
        size_t take = std::min(left, msize - c.recv_off);
        if (sh_.payload->diff(c.id, c.recv_seq, c.recv_off, p, take)) {
          errors.mismatch += sh_.payload->diff(c.id, c.recv_seq, c.recv_off, p, take);
          c.recv_bad = true;
        }
        p += take;
        left -= take;
        c.recv_off += take;
        if (c.recv_off == msize) complete(i, now, t_start, t_stop);
      }
      if (size_t(n) < buf_.size()) break;  // drained; level-triggered epoll reports the rest
    }
    try_send(i);
    return c.state == Conn::Up;
  }

  void complete(uint32_t i, int64_t now, int64_t t_start, int64_t t_stop) {
    Conn& c = conns_[i];
    const size_t K = size_t(sh_.req->pipeline);
    if (!c.recv_bad && now >= t_start && now < t_stop) {
      c.window_msgs++;
      hist.record(uint64_t(now - ring_[size_t(i) * K + c.recv_seq % K]));
    }
    c.recv_seq++;
    c.recv_off = 0;
    c.recv_bad = false;
    const Think& th = sh_.req->think;
    if (th.active())
      timers_.push({now + int64_t(th.sample_ns(rng_)), i, 0, Timer::Think});
    else
      c.credits++;
  }

  // Sends as much as credits allow, batching whole messages into one send() when pipelining.
  void try_send(uint32_t i) {
    Conn& c = conns_[i];
    if (sh_.phase.load(std::memory_order_relaxed) != kRun) return;
    const size_t msize = size_t(sh_.req->msize);
    const size_t K = size_t(sh_.req->pipeline);
    bool blocked = false;
    while (true) {
      // Build [send_seq@send_off ...] from messages already started plus newly started ones.
      size_t len = 0;
      uint64_t seq = c.send_seq;
      size_t off = c.send_off;
      int64_t now = 0;
      while (len < buf_.size()) {
        if (seq >= c.started) {
          if (c.credits == 0) break;
          if (!now) now = now_ns();
          c.credits--;
          ring_[size_t(i) * K + c.started % K] = now;
          c.started++;
        }
        size_t take = std::min(msize - off, buf_.size() - len);
        sh_.payload->fill(c.id, seq, off, take, sbuf_ptr() + len);
        len += take;
        off += take;
        if (off == msize) {
          seq++;
          off = 0;
        }
      }
      if (len == 0) break;
      ssize_t n = send(c.fd, sbuf_ptr(), len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
          blocked = errno == EAGAIN;
          if (blocked) break;
          continue;
        }
        lost(i);
        return;
      }
      uint64_t total = c.send_off + size_t(n);
      c.send_seq += total / msize;
      c.send_off = total % msize;
      if (size_t(n) < len) {
        blocked = true;
        break;
      }
    }
    if (blocked != c.want_out) {
      c.want_out = blocked;
      epoll_event ev{};
      ev.events = blocked ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
      ev.data.u64 = i;
      epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    }
  }

  // The backend closed or reset the connection.
  void lost(uint32_t i) {
    Conn& c = conns_[i];
    close_fd(c);
    c.state = Conn::Dead;
    errors.reset++;
    if (sh_.alive.fetch_sub(1) == 1) sh_.notify();  // the last one: the backend is gone
  }

  // Send staging area: separate from the receive buffer because try_send runs inside on_readable.
  uint8_t* sbuf_ptr() {
    if (sbuf_.empty()) sbuf_.resize(kIoBuf);
    return sbuf_.data();
  }

  Shared& sh_;
  int cpu_;
  std::mt19937_64 rng_;
  int ep_ = -1, wake_fd_ = -1;
  std::vector<Conn> conns_;
  std::vector<int64_t> ring_;  // per connection, K send timestamps indexed by seq % K
  std::deque<uint32_t> pending_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  int connecting_ = 0;
  size_t resolved_ = 0;  // connections up or given up on
  std::vector<uint8_t> buf_, sbuf_;
  std::thread thread_;
};

double tv_s(const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; }

// The coordinator: the thread that called run_load. It owns the timeline and the control socket.
class Coordinator {
 public:
  Coordinator(const RunRequest& req, const EngineConfig& cfg, const std::function<bool(const json&)>& emit,
              const Watch& watch)
      : req_(req), cfg_(cfg), emit_(emit), watch_(watch), payload_(req.msize) {}

  RunOutcome run() {
    RunOutcome out;
    sh_.req = &req_;
    sh_.payload = &payload_;
    sh_.notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    add(sh_.notify_fd, EPOLLIN);
    if (watch_.client_fd >= 0) add(watch_.client_fd, EPOLLIN | EPOLLRDHUP);
    if (watch_.signal_fd >= 0) add(watch_.signal_fd, EPOLLIN);

    int nworkers = std::max(1, std::min(cfg_.threads, req_.connections));
    if (!emit_(event("accepted"))) out.client_gone = true;
    int64_t t0 = now_ns();
    sh_.connect_deadline = t0 + s_to_ns(req_.connect_timeout);
    for (int w = 0; w < nworkers; w++) {
      int cpu = cfg_.cpus.empty() ? -1 : cfg_.cpus[size_t(w) % cfg_.cpus.size()];
      workers_.push_back(std::make_unique<Worker>(sh_, w, nworkers, cpu));
    }
    for (auto& w : workers_) w->start();

    Stats& st = out.stats;
    st.connections = req_.connections;
    st.msize = req_.msize;
    st.pipeline = req_.pipeline;
    int64_t t_start = 0, t_stop = 0;
    rusage ru0{};
    bool window_open = false;

    auto fail = [&](const char* kind, std::string msg) {
      out.error_kind = kind;
      out.error_message = std::move(msg);
    };

    // 1. Connect phase: until every worker has resolved all its connections (or the deadline).
    bool no_connection = false;
    if (!out.client_gone && wait_until(INT64_MAX, out, [&] { return sh_.workers_ready.load() == nworkers; })) {
      int64_t t1 = now_ns();
      long up = sh_.ever_up.load();
      st.setup_s = ns_to_s(t1 - t0);
      json ev = event_at("connected", ns_to_s(t1));
      ev["connected"] = up;
      ev["failed"] = req_.connections - up;
      ev["setup_s"] = std::round(st.setup_s * 1e6) / 1e6;
      if (!emit_(ev)) out.client_gone = true;
      if (up == 0) {
        no_connection = true;
        fail(err::kConnect, "");  // message built after the workers stopped (it needs their counts)
      } else if (!out.client_gone) {
        // 2. Warm-up, then the window. Its boundaries are fixed before the first ping, so workers
        // classify each echo by its own timestamp: the window is exact, whatever our wake-up lag.
        t_start = t1 + s_to_ns(req_.warmup);
        t_stop = t_start + s_to_ns(req_.duration);
        sh_.t_start.store(t_start);
        sh_.t_stop.store(t_stop);
        sh_.phase.store(kRun, std::memory_order_release);
        for (auto& w : workers_) w->wake();
        auto gone = [&] { return backend_gone(); };
        if (wait_until(t_start, out, gone) && !backend_gone()) {
          getrusage(RUSAGE_SELF, &ru0);
          window_open = true;
          if (!emit_(event_at("measure_start", ns_to_s(t_start)))) out.client_gone = true;
          if (!out.client_gone) wait_until(t_stop, out, gone);
        }
        if (backend_gone() && !out.signalled && !out.client_gone)
          fail(err::kBackendGone, "the backend closed or reset all " + std::to_string(up) +
                                      " connections mid-run (did it crash or exit?)");
      }
    }
    bool aborted = out.error_kind || out.client_gone || out.signalled;
    int64_t t_end = now_ns();
    if (aborted && t_start) {
      // Close the window now: echoes completing from here on are not counted.
      t_stop = std::max(std::min(t_end, t_stop), t_start);
      sh_.t_stop.store(t_stop);
    }
    if (window_open) {
      rusage ru1{};
      getrusage(RUSAGE_SELF, &ru1);
      st.user_s = tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime);
      st.sys_s = tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime);
      // Always closes a window it opened, also on abort, so the profiler's snapshots pair up.
      if (!out.client_gone && !emit_(event_at("measure_stop", ns_to_s(t_stop)))) out.client_gone = true;
    }
    sh_.phase.store(kStop, std::memory_order_release);
    for (auto& w : workers_) w->wake();
    for (auto& w : workers_) w->join();

    // 3. Merge.
    st.per_conn_messages.assign(size_t(req_.connections), 0);
    for (auto& w : workers_) {
      st.connected += w->connected;
      st.latency.merge(w->hist);
      for (auto& c : w->conns()) {
        st.per_conn_messages[c.id] = c.window_msgs;
        st.messages += c.window_msgs;
      }
    }
    st.errors = sum_errors();
    if (no_connection)
      out.error_message = "no connection to " + req_.target + " could be made (" + std::to_string(st.errors.connect) +
                          " refused or failed, " + std::to_string(st.errors.timeout) + " timed out within " +
                          json(req_.connect_timeout).dump() + " s): is the backend listening there?";
    st.warmup_s = t_start ? req_.warmup : 0;
    if (window_open) {
      st.t_start = ns_to_s(t_start);
      st.t_stop = ns_to_s(t_stop);
      st.duration_s = ns_to_s(t_stop - t_start);
      st.cpu_frac = st.duration_s > 0 ? (st.user_s + st.sys_s) / (st.duration_s * nworkers) : 0;
    }
    st.aborted = aborted;
    workers_.clear();
    close(ep_);
    close(sh_.notify_fd);
    return out;
  }

 private:
  void add(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  }

  bool backend_gone() const { return sh_.ever_up.load() > 0 && sh_.alive.load() == 0; }

  Errors sum_errors() const {
    Errors e;
    for (auto& w : workers_) {
      e.connect += w->errors.connect;
      e.reset += w->errors.reset;
      e.timeout += w->errors.timeout;
      e.mismatch += w->errors.mismatch;
    }
    return e;
  }

  // Sleeps until `deadline` (monotonic ns) or `done()`; true on either. False when the run must
  // stop: the client went away or a signal arrived (recorded in `out`).
  template <class Done>
  bool wait_until(int64_t deadline, RunOutcome& out, Done done) {
    epoll_event evs[8];
    while (true) {
      if (done()) return true;
      int64_t now = now_ns();
      if (now >= deadline) return true;
      timespec ts = ns_to_timespec(deadline - now);
      int n = epoll_pwait2(ep_, evs, 8, deadline == INT64_MAX ? nullptr : &ts, nullptr);
      for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        if (fd == sh_.notify_fd) {
          uint64_t v;
          (void)!read(fd, &v, 8);
        } else if (fd == watch_.signal_fd) {
          signalfd_siginfo si;
          (void)!read(fd, &si, sizeof si);
          out.signalled = true;
          return false;
        } else if (fd == watch_.client_fd && !client_still_there(watch_)) {
          out.client_gone = true;
          return false;
        }
      }
    }
  }

  const RunRequest& req_;
  const EngineConfig& cfg_;
  const std::function<bool(const json&)>& emit_;
  Watch watch_;
  Payload payload_;
  Shared sh_;
  int ep_ = -1;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace

RunOutcome run_load(const RunRequest& req, const EngineConfig& cfg, const std::function<bool(const json&)>& emit,
                    const Watch& watch) {
  if (req.transport == Transport::Zmq) return run_zmq_load(req, cfg, emit, watch);
  return Coordinator(req, cfg, emit, watch).run();
}

bool client_still_there(const Watch& w) {
  char tmp[4096];
  while (true) {
    ssize_t n = recv(w.client_fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (w.client_input && w.client_input->size() < 2 * kMaxLine) w.client_input->append(tmp, size_t(n));
  }
}

}  // namespace netprof
