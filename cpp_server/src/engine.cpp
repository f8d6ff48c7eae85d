#include "engine.hpp"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <queue>
#include <random>
#include <thread>

#include "clock.hpp"
#include "http.hpp"
#include "line.hpp"
#include "netprof/fd.hpp"
#include "open_loop.hpp"
#include "payload.hpp"
#include "run_window.hpp"
#include "sys.hpp"
#include "zmq_engine.hpp"
#include "zmtp.hpp"

namespace netprof {

bool check_fd_limit(const RunRequest& r, std::string* why) {
  const bool grows = r.connection_cap() > r.connections;
  return check_fd_limit(r.connection_cap(), why, grows ? "max_connections" : "connections");
}

bool check_fd_limit(int connections, std::string* why, const char* what) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return true;  // unknown limit: socket() will say EMFILE
  if (rl.rlim_cur != RLIM_INFINITY && rlim_t(connections) + kFdReserve > rl.rlim_cur) {
    *why = std::string(what) + "=" + std::to_string(connections) +
           " exceeds the open-file limit: RLIMIT_NOFILE (ulimit -n) is " + std::to_string(rl.rlim_cur) +
           " and the loader needs connections + " + std::to_string(kFdReserve) + "; use at most " +
           std::to_string(rl.rlim_cur > kFdReserve ? rl.rlim_cur - kFdReserve : 0) +
           " connections or raise `ulimit -n`";
    return false;
  }
  return true;
}

namespace {

// kFirst: warmup_after "served" only (PROTOCOL.md, "Warm-up after"), each connection's first message before the load.
enum RunPhase : int { kConnect, kFirst, kRun, kStop };

// Connect pacing. A SYN that hits a full accept queue is dropped and the kernel would retry only
// after 1 s; instead we give each attempt a short deadline and reconnect (the seed's backlog race).
// Without a cap on attempts in flight, 19k connects to a backlog-100 listener collapse into SYN drops
// (2k of 19k up in 8 s); with it, setup runs at the backend's accept rate.
constexpr int kMaxConnecting = 128;  // per worker, attempts in flight
constexpr int64_t kAttemptTimeoutNs = 100'000'000;
// Each attempt of a connection that timed out waits twice as long as the one before, up to 3.2 s: a
// SYN dropped by a full accept queue is retried after 100 ms as before, while a link whose round trip
// is longer than 100 ms (netem delay) still connects.
constexpr uint32_t kMaxAttemptDoublings = 5;
constexpr int64_t kBackoffMinNs = 1'000'000, kBackoffMaxNs = 200'000'000;
constexpr size_t kIoBuf = 256 * 1024;
// A request/response connection the server closed is reopened at once; attempts that are refused or
// time out are retried with backoff this many times, then the connection is given up.
constexpr uint32_t kMaxReconnectAttempts = 8;
// Open loop: a sleep longer than 1.5x this wakes this much before the next send is due (see loop()).
constexpr int64_t kPreWakeNs = 200'000;
// Open loop, connections as needed: a connection is opened only while the recent round trip is within this
// factor of the thread's least mean round trip over kFloorAnswers answers, and only while the thread's
// connections are fewer than its rate needs at that round trip (Little's law) with this much room above it
// (see grow()).
constexpr int64_t kGrowRttFactor = 2;
constexpr double kGrowHeadroom = 1.25;
constexpr int64_t kFloorAnswers = 64;

struct Conn {
  // Handshake: zmtp only, TCP is up and the ZMTP greeting and READY are being exchanged.
  enum State : uint8_t { Idle, Backoff, Connecting, Handshake, Up, Dead };
  Fd fd;
  uint32_t id = 0;  // global connection index
  State state = Idle;
  bool want_out = false;      // EPOLLOUT currently registered
  bool last_refused = false;  // last attempt was refused (vs. timed out)
  uint32_t attempts = 0;
  uint32_t timed_out = 0;  // attempts that got no answer: each next one waits twice as long
  uint32_t gen = 0;        // invalidates stale connect timers
  uint32_t credits = 0;
  uint64_t started = 0;  // messages started (credit taken, timestamp set)
  uint64_t send_seq = 0;
  size_t send_off = 0;
  uint64_t recv_seq = 0;
  size_t recv_off = 0;
  bool recv_bad = false;
  bool first_pending = false;        // warmup_after "served": its first message is out and not answered yet
  PerPhase<uint64_t> window_msgs{};  // messages completed in the window, by phase
  // Send timestamps of the `pipeline` messages in flight, indexed by seq % pipeline: allocated when
  // the connection comes up, so memory follows the connections actually open.
  std::unique_ptr<int64_t[]> sent_at;
  // Request/response protocols (http, line): the reply parser (null for echo), and whether the
  // connection is being reopened (states Idle/Backoff/Connecting then mean a reconnect, not setup).
  std::unique_ptr<ReplyParser> parser;
  bool reconnecting = false;
  std::unique_ptr<zmtp::Handshake> handshake;  // zmtp: the peer's side of the handshake, while in Handshake
  // Open loop: the intended times of the messages in flight (the same ring as sent_at); whether the
  // connection is in its thread's queue of connections with a free slot; and for a connection opened
  // during the load because a request needed it (PROTOCOL.md, "Connections as needed"), whether it is
  // still being opened and when its first attempt began, and whether it has not answered yet (it holds
  // growth back: see grow()). In open loop `credits` counts only the requests to send again after a
  // reopening.
  std::unique_ptr<int64_t[]> intended_at;
  bool in_ready = false;
  bool opening = false;
  bool unproven = false;
  int64_t open_started = 0;
};

std::unique_ptr<ReplyParser> new_parser(const RunRequest& r) {
  switch (r.protocol) {
    case Protocol::Http: return std::make_unique<HttpParser>(r.head_requests);
    case Protocol::Line: return std::make_unique<LineParser>();
    default: return nullptr;
  }
}

struct Timer {
  int64_t due;
  uint32_t conn;
  uint32_t gen;
  // Send: open loop, a request is due. Turn: turns, the next turn begins (conn unused).
  enum Kind : uint8_t { Retry, AttemptTimeout, Think, Send, Turn } kind;
  bool operator>(const Timer& o) const { return due > o.due; }
};

// Adds one to an eventfd. EAGAIN (the counter is saturated) still leaves it readable: not an error.
void bump(int efd) {
  uint64_t one = 1;
  while (write(efd, &one, 8) < 0 && errno == EINTR) {
  }
}

// Empties an eventfd (non-blocking); EAGAIN just means it was empty.
void drain_eventfd(int efd) {
  uint64_t v;
  while (read(efd, &v, 8) < 0 && errno == EINTR) {
  }
}

struct Shared {
  const RunRequest* req;
  const Payload* payload;
  std::atomic<int> phase{kConnect};
  // The window's boundaries, published by the coordinator (fixed before the first ping, cut on abort).
  std::atomic<int64_t> t_start{INT64_MAX}, guard_start{INT64_MAX}, probe_start{INT64_MAX}, probe_stop{INT64_MAX},
      guard_stop{INT64_MAX}, t_stop{INT64_MAX};
  void publish(const WindowBounds& w) {
    // Stop first: on a cut, a worker that sees the new stop with old probe/guard bounds still
    // classifies every echo before the new stop the same way as with the new bounds.
    t_stop.store(w.stop);
    guard_stop.store(w.guard_stop);
    probe_stop.store(w.probe_stop);
    probe_start.store(w.probe_start);
    guard_start.store(w.guard_start);
    t_start.store(w.start);
  }
  WindowBounds bounds() const {
    WindowBounds w;
    w.start = t_start.load(std::memory_order_relaxed);
    w.guard_start = guard_start.load(std::memory_order_relaxed);
    w.probe_start = probe_start.load(std::memory_order_relaxed);
    w.probe_stop = probe_stop.load(std::memory_order_relaxed);
    w.guard_stop = guard_stop.load(std::memory_order_relaxed);
    w.stop = t_stop.load(std::memory_order_relaxed);
    return w;
  }
  std::atomic<int> workers_ready{0};  // workers done with the connect phase
  // warmup_after "served": workers that sent their connections' first messages, those messages not answered yet
  // (nor lost with their connection), and those answered.
  std::atomic<int> workers_first{0};
  std::atomic<long> first_waiting{0}, first_answered{0};
  std::atomic<long> alive{0};       // connections up now
  std::atomic<long> ever_up{0};     // connections that came up
  std::atomic<long> most_alive{0};  // the most that were up at once
  // Open loop, connections as needed: connections open or being opened (not given up), held under the
  // request's connection_cap() across the worker threads, and the next free connection id.
  std::atomic<long> open_conns{0};
  std::atomic<uint32_t> next_id{0};
  // One more connection is up (counted in alive, ever_up and most_alive).
  void up() {
    const long now_up = alive.fetch_add(1) + 1;
    ever_up.fetch_add(1);
    long most = most_alive.load();
    while (now_up > most && !most_alive.compare_exchange_weak(most, now_up)) {
    }
  }
  // Takes one place under the connection cap; false when it is reached.
  bool reserve_conn(long cap) {
    long n = open_conns.load();
    do {
      if (n >= cap) return false;
    } while (!open_conns.compare_exchange_weak(n, n + 1));
    return true;
  }
  int64_t connect_deadline = 0;
  ScheduleParams schedule;  // open loop: set before the phase turns kRun (published by its release store)
  Fd notify_fd;             // eventfd: worker -> coordinator
  void notify() { bump(notify_fd.get()); }

  // A worker that hit an unexpected error (an exception) stops; the coordinator aborts the run.
  std::atomic<bool> failed{false};
  std::mutex failure_mu;
  std::string failure;
  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(failure_mu);
      if (failure.empty()) failure = why;
    }
    failed.store(true);
    notify();
  }
};

constexpr uint64_t kWakeTag = UINT64_MAX;

class Worker {
 public:
  Worker(Shared& sh, int index, int nworkers, int cpu)
      : sh_(sh),
        index_(index),
        cpu_(cpu),
        rng_(splitmix64(index + 1) ^ now_ns()),
        open_(sh.req->open_loop()),
        zmtp_(sh.req->transport == Transport::Zmtp),
        late_threshold_(open_ ? loader_late_threshold_ns(sh.req->rate) : 0),
        targets_(sh.req->targets()),
        turn_ns_(int64_t(std::llround(sh.req->turn * 1e9))),
        cap_(sh.req->connection_cap()),
        K_(uint64_t(sh.req->pipeline)) {
    const RunRequest& r = *sh.req;
    for (int i = index; i < r.connections; i += nworkers) {
      conns_.emplace_back();
      conns_.back().id = uint32_t(i);
      conns_.back().parser = new_parser(r);
    }
    base_ = uint32_t(conns_.size());
    live_ = base_;
    ep_.reset(check_sys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    wake_fd_.reset(check_sys(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd"));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    check_sys(epoll_ctl(ep_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev), "epoll_ctl(wake)");
    buf_.resize(kIoBuf);
    timeline.resize(size_t(r.timeline));
    if (r.turns()) {
      const size_t n = size_t(std::llround(r.duration / r.turn));
      turn_messages.resize(n);
      turn_latency_ns.resize(n);
      target_latency.resize(size_t(targets_));
    }
  }
  // The owner stops the run (phase kStop, wake) before a worker is destroyed; the sockets close with conns_.
  ~Worker() { join(); }

  void start() {
    try {
      start_thread();
    } catch (const std::system_error& e) {
      throw std::system_error(e.code(), "cannot start a worker thread");
    }
  }
  void start_thread() {
    thread_ = std::thread([this] {
      try {
        loop();
      } catch (const std::bad_alloc&) {
        sh_.fail("out of memory in a worker thread");
      } catch (const std::exception& e) {
        sh_.fail(std::string("worker thread: ") + e.what());
      }
    });
  }
  void wake() { bump(wake_fd_.get()); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

  // Results, read after join().
  PerPhase<Histogram> hist;  // by phase
  Errors errors;
  int connected = 0;
  uint64_t reconnects = 0;           // request/response protocols: connections reopened
  std::array<uint64_t, 5> status{};  // http: replies completed in the window, by status class 1xx..5xx
  Waiting waiting;                   // answered after the window's end (those never answered: gather_unanswered)
  PerPhase<Histogram> hist_sent;     // open loop: latency from the actual send, by phase
  OpenLoopStats ol;                  // open loop: the schedule's figures (the coordinator adds the unsent)
  std::vector<Histogram> timeline;   // the window's slices (request `timeline`): latency as hist's
  // Turns (request `alternate`): per turn of the window, the messages sent in it and answered in the window
  // and their latency summed (ns); per target, the window's latency. Empty without turns.
  std::vector<uint64_t> turn_messages;
  std::vector<double> turn_latency_ns;
  std::vector<Histogram> target_latency;
  const std::deque<Conn>& conns() const { return conns_; }
  // Live counts for progress events, read by the coordinator mid-run: messages answered since pinging
  // began, and those of the window.
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  uint64_t in_window() const { return in_window_.load(std::memory_order_relaxed); }

 private:
  void loop() {
    if (cpu_ >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu_, &set);
      // The CPU list was checked by sched_setaffinity() at startup: a failure here is unexpected.
      if (int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0)
        throw std::system_error(rc, std::generic_category(), "pthread_setaffinity_np");
    }
    // Open loop: epoll's timeout is this thread's send clock. The default timer slack (50 µs) would let
    // the kernel wake us that late; 1 ns makes the wake-up as punctual as the hardware allows, without
    // spinning.
    if (open_ && prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) != 0) throw_errno("prctl(PR_SET_TIMERSLACK)");
    for (size_t i = 0; i < conns_.size(); i++) pending_.push_back(uint32_t(i));
    bool connect_done = false, first_sent = false, running = false;
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
      } else if (phase == kFirst && !first_sent) {
        first_sent = true;
        send_firsts();
      } else if (phase == kRun && !running) {
        running = true;
        if (open_) {  // this thread's schedule starts now; its connections that are up take its requests
          sched_ = sh_.schedule;
          arrival_.init(sched_, uint32_t(index_));
          seen_ = arrival_;
          scheduled_ = true;
          for (uint32_t i = 0; i < conns_.size(); i++) push_ready(i);
          pump(now_ns());
        } else {
          for (uint32_t i = 0; i < conns_.size(); i++) {
            Conn& c = conns_[i];
            if (c.state != Conn::Up && !c.reconnecting) continue;
            c.credits = uint32_t(sh_.req->pipeline) - uint32_t(c.started - c.recv_seq);  // a first still out: K-1
            if (c.state == Conn::Up) try_send(i);  // a reconnecting one sends when it is up
          }
        }
        if (targets_ > 1) arm_turn(now_ns());
      }
      int64_t wait = connect_done ? -1 : std::max<int64_t>(0, sh_.connect_deadline - now);
      if (!timers_.empty()) {
        int64_t t = std::max<int64_t>(0, timers_.top().due - now_ns());
        // Open loop: a long sleep ends in a deep idle state (a halted virtual CPU, a deep C-state) that
        // takes tens of µs to leave (here: 67 µs p50 after 5 ms). Waking kPreWakeNs early and sleeping
        // the rest, a short sleep the CPU leaves at once, lands on time (13 µs p50); no spinning.
        if (open_ && t > kPreWakeNs + kPreWakeNs / 2) t -= kPreWakeNs;
        wait = wait < 0 ? t : std::min(wait, t);
      }
      timespec ts = ns_to_timespec(wait);
      int n = epoll_pwait2(ep_.get(), evs.data(), int(evs.size()), wait < 0 ? nullptr : &ts, nullptr);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno("epoll_pwait2");
      }
      for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == kWakeTag) {
          drain_eventfd(wake_fd_.get());
          continue;
        }
        on_event(uint32_t(evs[i].data.u64), evs[i].events);
      }
      // Open loop: replies freed slots, connections came up: the requests waiting for them go now.
      if (scheduled_ && n > 0) pump(now_ns());
    }
  }

  // ---- connect phase ----

  // warmup_after "served" (PROTOCOL.md, "Warm-up after"): one message on each connection that is up; the coordinator
  // starts the load once every one is answered (or connect_timeout ends the wait).
  void send_firsts() {
    long sent = 0;
    for (Conn& c : conns_) {
      if (c.state != Conn::Up) continue;
      c.first_pending = true;
      c.credits = 1;
      if (open_) c.intended_at[c.started % K_] = now_ns();  // answered in the window, it counts from its send
      sent++;
    }
    sh_.first_waiting.fetch_add(sent);  // before any send: a send that fails settles its connection's first
    sh_.workers_first.fetch_add(1);
    sh_.notify();
    for (uint32_t i = 0; i < conns_.size(); i++)
      if (conns_[i].first_pending) try_send(i);
  }

  // Connection c's first message was answered, or c was lost before it was.
  void first_settled(Conn& c, bool answered) {
    if (!c.first_pending) return;
    c.first_pending = false;
    if (answered) sh_.first_answered.fetch_add(1);
    if (sh_.first_waiting.fetch_sub(1) == 1) sh_.notify();
  }

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
    c.fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.fd) return hard_fail(i);  // EMFILE and friends: retrying cannot help
    int one = 1;
    // Port chosen at connect() time, per 4-tuple: each source address gets its own ~28k ports.
    if (setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
        setsockopt(c.fd.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one) < 0)
      return hard_fail(i);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr = r.source_addrs[c.id % r.source_addrs.size()];
    if (bind(c.fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof src) < 0) return hard_fail(i);
    const sockaddr_in& to = r.target_addrs[c.id % r.target_addrs.size()];
    int rc = connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to);
    // A reconnect, and a connection opened during the load, always wait for epoll (no sending from
    // inside the reopen or the send loop that started it).
    if (rc == 0 && !c.reconnecting && !c.opening) return became_up(i);
    if (rc == 0 || errno == EINPROGRESS) {
      epoll_event ev{};
      ev.events = EPOLLOUT;
      ev.data.u64 = i;
      if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) < 0) return hard_fail(i);  // ENOMEM, ENOSPC
      c.state = Conn::Connecting;
      connecting_++;
      timers_.push(
          {now + (kAttemptTimeoutNs << std::min(c.timed_out, kMaxAttemptDoublings)), i, c.gen, Timer::AttemptTimeout});
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
    if (!retryable(e) || ((c.reconnecting || c.opening) && c.attempts >= kMaxReconnectAttempts)) return hard_fail(i);
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
    if (conns_[i].reconnecting) return give_up(i);
    if (conns_[i].opening) return open_failed(i);
    Conn& c = conns_[i];
    close_fd(c);
    c.state = Conn::Dead;
    errors.connect++;
    resolved_++;
    closed_for_good();
  }

  void became_up(uint32_t i) {
    Conn& c = conns_[i];
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    // MOD after an EINPROGRESS connect (registered for EPOLLOUT), ADD after an immediate one.
    if (epoll_ctl(ep_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) < 0 &&
        (errno != ENOENT || epoll_ctl(ep_.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) < 0))
      return hard_fail(i);
    if (c.reconnecting) {  // reopened: its unanswered requests go out again
      c.reconnecting = false;
      c.state = Conn::Up;
      try_send(i);
      if (c.state == Conn::Up) push_ready(i);  // open loop: its free slots take requests again
      return;
    }
    if (zmtp_) return greet(i);
    ready(i);
  }

  // zmtp: TCP is up; our greeting and READY go at once (a fresh socket's buffer takes their ~90 bytes
  // whole), the peer's are read by on_handshake. The attempt's timeout still runs: a peer that never
  // answers in ZMTP times out like a SYN that is never answered.
  void greet(uint32_t i) {
    Conn& c = conns_[i];
    static const std::vector<uint8_t> hello = zmtp::client_hello();
    ssize_t n;
    do {
      n = send(c.fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n != ssize_t(hello.size())) return connect_error(i, n < 0 ? errno : EAGAIN, now_ns());
    c.handshake = std::make_unique<zmtp::Handshake>();
    c.state = Conn::Handshake;
    c.last_refused = false;  // unanswered by the deadline: a timeout
  }

  // zmtp: the peer's greeting and READY, as they arrive.
  void on_handshake(uint32_t i) {
    Conn& c = conns_[i];
    ssize_t n = recv(c.fd.get(), buf_.data(), buf_.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return connect_error(i, n == 0 ? ECONNRESET : errno, now_ns());  // e.g. a ROUTER refusing us
    const uint8_t* p = buf_.data();
    const uint8_t* end = p + n;
    switch (c.handshake->feed(&p, end)) {
      case zmtp::Handshake::NeedMore: return;
      case zmtp::Handshake::Error:  // not a ZMTP 3 ROUTER: trying again cannot help
        if (errors.sample.empty()) errors.sample = "zmtp: " + c.handshake->detail();
        c.handshake.reset();
        return hard_fail(i);
      case zmtp::Handshake::Done:
        errors.mismatch += size_t(end - p);  // a ROUTER sends nothing before our first message
        c.handshake.reset();
        return ready(i);
    }
  }

  // The connection is up (zmtp: the handshake is done) and takes part in the run.
  void ready(uint32_t i) {
    Conn& c = conns_[i];
    c.sent_at = std::make_unique<int64_t[]>(size_t(sh_.req->pipeline));  // bad_alloc: the run fails as `internal`
    if (open_) c.intended_at = std::make_unique<int64_t[]>(size_t(sh_.req->pipeline));
    c.state = Conn::Up;
    sh_.up();
    if (c.opening) return opened(i);
    connected++;
    resolved_++;
  }

  // connect_timeout reached: whatever is not up now never will be (for this run).
  void expire_connects() {
    for (auto& c : conns_) {
      if (c.state == Conn::Up || c.state == Conn::Dead || c.reconnecting) continue;
      if (c.last_refused)
        errors.connect++;
      else
        errors.timeout++;
      if (c.state == Conn::Connecting) connecting_--;
      close_fd(c);
      c.state = Conn::Dead;
      c.gen++;
      resolved_++;
      closed_for_good();
    }
    pending_.clear();
  }

  void close_fd(Conn& c) {
    c.fd.reset();  // close() also drops it from the epoll set
    c.want_out = false;
    c.handshake.reset();
  }

  // ---- open loop: connections as needed ----

  // Opens one more connection for the requests waiting on this thread, if the cap (over all threads)
  // allows; false when it does not (or an earlier one could not be opened: the backend refuses new
  // connections, and trying again for every request would only repeat the refusal).
  bool open_one(int64_t now) {
    if (grow_stopped_ || !sh_.reserve_conn(cap_)) return false;
    const uint32_t i = uint32_t(conns_.size());
    conns_.emplace_back();  // a deque: references to the others stay valid
    Conn& c = conns_.back();
    c.id = sh_.next_id.fetch_add(1);
    c.parser = new_parser(*sh_.req);
    c.opening = true;
    c.unproven = true;
    unproven_++;
    c.open_started = now;
    live_++;
    opening_slots_ += K_;
    attempt(i, now);
    return true;
  }

  // A connection opened for waiting requests is up: its slots take them (pump() runs after the event).
  void opened(uint32_t i) {
    Conn& c = conns_[i];
    c.opening = false;
    opening_slots_ -= K_;
    const int64_t now = now_ns();
    ol.connect.record(uint64_t(now - c.open_started));
    const WindowBounds w = sh_.bounds();
    if (now >= w.start && now < w.stop) ol.conns_opened++;
    push_ready(i);
  }

  // A connection opened during the load that could not be opened: counted in `connect`; this thread
  // opens no more (its waiting requests are then behind).
  void open_failed(uint32_t i) {
    Conn& c = conns_[i];
    close_fd(c);
    c.state = Conn::Dead;
    c.opening = false;
    c.gen++;
    errors.connect++;
    opening_slots_ -= K_;
    grow_stopped_ = true;
    settle(c);
    closed_for_good();
  }

  // A connection of this thread is closed for the rest of the run: its place under the cap is free.
  void closed_for_good() {
    live_--;
    sh_.open_conns.fetch_sub(1);
  }

  // A connection opened during the load answered (its first reply) or died: it no longer holds growth back.
  void settle(Conn& c) {
    if (!c.unproven) return;
    c.unproven = false;
    unproven_--;
  }

  // Requests a connection can still take: `pipeline` minus those in flight and those to send again.
  uint64_t free_slots(const Conn& c) const {
    const uint64_t used = c.started - c.recv_seq + c.credits;
    return used >= K_ ? 0 : K_ - used;
  }

  // Queues a connection that is up and has a free slot: one of the -c connections behind the others (least
  // recently used first: they share the load evenly, as in closed loop, so their per-connection counts still
  // judge the server's fairness); one opened during the load on top of the others opened so (most recently
  // used first).
  void push_ready(uint32_t i) {
    Conn& c = conns_[i];
    if (!scheduled_ || c.in_ready || c.state != Conn::Up || free_slots(c) == 0) return;
    c.in_ready = true;
    if (i < base_) {
      ready_.push_back(i);
    } else {
      extra_ready_.push_back(i);
    }
  }

  // The next connection with a free slot, false when none has one: a -c connection first, else the opened
  // connection used last. A burst (a stall of the server or the host) opens connections for the requests it
  // held up; afterwards the load goes back to the -c connections and the opened ones carry only what those
  // cannot take, instead of spreading every request over all of them for the rest of the window (with
  // hundreds of connections taking turns, a server works per request as at hundreds of connections: the knee
  // of issue 51 fell below -c 10's).
  bool take_ready(uint32_t* out) {
    auto usable = [this](uint32_t i) {
      Conn& c = conns_[i];
      c.in_ready = false;
      return c.state == Conn::Up && free_slots(c) > 0;
    };
    while (!ready_.empty()) {
      const uint32_t i = ready_.front();
      ready_.pop_front();
      if (usable(i)) {
        *out = i;
        return true;
      }
    }
    while (!extra_ready_.empty()) {
      const uint32_t i = extra_ready_.back();
      extra_ready_.pop_back();
      if (usable(i)) {
        *out = i;
        return true;
      }
    }
    return false;
  }

  // Sends this thread's requests that are due, each on the next connection with a free slot; the due
  // ones that find none wait for a slot: below the cap for the first that frees or for one of a connection
  // opened for them (grow()), else, the cap reached, "behind". Then arms the send timer for the next request
  // not yet due (or for grow()'s next look).
  void pump(int64_t now) {
    if (!scheduled_ || sh_.phase.load(std::memory_order_relaxed) != kRun) return;
    const int64_t stop = sh_.t_stop.load(std::memory_order_relaxed);
    uint32_t i;
    while (true) {
      const int64_t due = arrival_.next(sched_);
      if (due >= stop || due > now || !take_ready(&i)) break;
      start_request(i, due, now, stop);
      try_send(i);  // writes it (the connection may die: then it is not queued again)
      push_ready(i);
    }
    while (true) {  // the due requests left: what they wait for
      const int64_t due = seen_.next(sched_);
      if (due >= stop || due > now) break;
      const uint8_t kind = can_grow() ? kWaited : kBehind;
      if (kind == kWaited) waiting_++;
      if (kinds_.empty() || kinds_.back().kind != kind) kinds_.push_back({seen_n_, kind});
      kinds_.back().end = ++seen_n_;
      seen_.advance(sched_);
    }
    const int64_t next = std::min(seen_.next(sched_), grow(now));
    if (next < stop && next != timer_due_) {
      timers_.push({next, 0, 0, Timer::Send});
      timer_due_ = next;
    }
  }

  // Whether this thread may still open a connection: the cap (over all threads) not reached, no open failed.
  bool can_grow() const { return !grow_stopped_ && sh_.open_conns.load(std::memory_order_relaxed) < cap_; }

  // Connections as needed (PROTOCOL.md): opens connections for the waiting requests that the connections
  // being opened will not take, once the oldest has waited a round trip (this thread's recent mean: in that
  // time every busy connection answers once on average, so a slot frees for a momentary excess), while that
  // round trip is within kGrowRttFactor of the thread's unqueued one, rtt_floor_ns_ (the requests in flight
  // are not queueing in the server: a server that is its own limit, or stalled, answers no faster on more
  // connections, only pays for accepting them) and while fewer are opened-and-unanswered than have answered (the pool
  // at most doubles per round trip, as TCP's slow start grows its window), and while the thread's connections (open or
  // being opened) are fewer than its rate needs at that round trip (needed_conns()). Without them a stall of the server
  // (a GC pause, a busy host) opened a connection for every request due in it, hundreds, whose accepts slowed the
  // server further: issue 51's knee fell below a pool of 10's. Returns when to look again (INT64_MAX: no need); a reply
  // or a connection coming up makes pump() look again anyway.
  int64_t grow(int64_t now) {
    if (rtt_ewma_ns_ == 0) return INT64_MAX;       // no answer yet: no round trip to judge the pool by
    const int64_t oldest = arrival_.next(sched_);  // the oldest request waiting, if any waits
    while (waiting_ > opening_slots_) {
      const int64_t at = oldest + rtt_ewma_ns_;
      if (at > now) return at;
      if (rtt_floor_ns_ > 0 && rtt_ewma_ns_ > kGrowRttFactor * rtt_floor_ns_) break;
      if (live_ >= needed_conns()) break;
      if (unproven_ >= std::max<uint64_t>(1, base_ + proven_) || !open_one(now)) break;
    }
    return INT64_MAX;
  }

  // The connections this thread's rate needs at its recent round trip, kGrowHeadroom above the mean: by
  // Little's law it has rate x round trip requests in flight on average, K per connection. Requests that
  // wait while the pool has that many wait for the server's round trips or for the loader's own lateness
  // (a thread that wakes late finds a burst due at once: issue 51's stall test saw 6 connections opened for
  // sends 4.4 ms late), not for connections; with 25% room a burst of the schedule (Poisson) still finds
  // a slot without one (at 80% of the pool's slots busy on average).
  uint64_t needed_conns() const {
    const double in_flight = double(rtt_ewma_ns_) / sched_.gap_ns;
    return uint64_t(std::ceil(in_flight * kGrowHeadroom / double(K_)));
  }

  // Starts this thread's next scheduled request (intended at `due`) on connection i, and counts it.
  void start_request(uint32_t i, int64_t due, int64_t now, int64_t stop) {
    Conn& c = conns_[i];
    c.sent_at[c.started % K_] = now;
    c.intended_at[c.started % K_] = due;
    c.started++;
    arrival_.advance(sched_);
    uint8_t kind = kFree;        // sent when first looked at: it found a free slot
    if (started_n_ < seen_n_) {  // it waited: for what was decided when it came due
      kind = kinds_.front().kind;
      if (++started_n_ == kinds_.front().end) kinds_.pop_front();
      if (kind == kWaited) waiting_--;
    } else {
      started_n_++;
      seen_n_++;
      seen_.advance(sched_);
    }
    if (now >= stop) ol.queued_at_end++;                            // due before the end, still waiting then
    if (due < sh_.t_start.load(std::memory_order_relaxed)) return;  // warm-up: only the window's are counted
    ol.intended++;
    if (now >= stop) return;
    ol.sent++;
    const uint64_t late = uint64_t(now - due);
    if (kind == kBehind) {  // its time came while every slot was taken and no connection could be opened
      ol.behind++;
      ol.behind_late.record(late);
    } else if (kind == kWaited && i >= base_ && c.started <= K_) {  // among an opened one's first requests
      ol.waited_connect++;
    } else if (kind == kWaited) {  // it waited for a slot of a connection that was open
      ol.waited_slot++;
    } else {  // a slot was free: any lateness is the loader's own
      ol.schedule_late.record(late);
      if (int64_t(late) > late_threshold_) ol.loader_late++;
    }
  }

  // ---- timers ----

  void run_timers(int64_t now) {
    while (!timers_.empty() && timers_.top().due <= now) {
      Timer t = timers_.top();
      timers_.pop();
      if (t.kind == Timer::Send) {                // open loop: this thread's next request is due
        if (t.due == timer_due_) timer_due_ = 0;  // else stale: a later arming replaced it
        pump(now);
        continue;
      }
      Conn& c = conns_[t.conn];
      switch (t.kind) {
        case Timer::Retry:
          if (c.state == Conn::Backoff && c.gen == t.gen) {
            c.state = Conn::Idle;
            if (c.reconnecting || c.opening)
              attempt(t.conn, now);
            else
              pending_.push_front(t.conn);
          }
          break;
        case Timer::AttemptTimeout:
          if ((c.state == Conn::Connecting || c.state == Conn::Handshake) && c.gen == t.gen) {
            if (c.state == Conn::Connecting) connecting_--;
            c.timed_out++;
            connect_error(t.conn, ETIMEDOUT, now);
          }
          break;
        case Timer::Think:
          if (c.state == Conn::Up || c.reconnecting) {
            c.credits++;
            if (c.state == Conn::Up) try_send(t.conn);
          }
          break;
        case Timer::Send: break;  // handled above
        case Timer::Turn:         // the connections of the target whose turn begins send what they hold
          for (uint32_t i = 0; i < conns_.size(); i++)
            if (conns_[i].state == Conn::Up && serving(conns_[i].id, now)) try_send(i);
          arm_turn(now);
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
      if (getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
      connecting_--;
      if (err == 0 && !(events & (EPOLLERR | EPOLLHUP)))
        became_up(i);
      else
        connect_error(i, err ? err : ECONNREFUSED, now_ns());
      return;
    }
    if (c.state == Conn::Handshake) return on_handshake(i);
    if (c.state != Conn::Up) return;  // closed earlier in this batch
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
      if (!on_readable(i)) return;
    }
    if ((events & EPOLLOUT) && c.state == Conn::Up) try_send(i);
  }

  // Returns false when the connection died.
  bool on_readable(uint32_t i) {
    Conn& c = conns_[i];
    if (c.parser) return on_readable_reply(i);
    const size_t msize = sh_.req->message_bytes();  // zmtp: with the frame header, echoed as sent
    while (true) {
      ssize_t n = recv(c.fd.get(), buf_.data(), buf_.size(), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        lost(i);
        return false;
      }
      if (n < 0) return true;
      int64_t now = now_ns();
      const WindowBounds window = sh_.bounds();
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
        if (c.recv_off == msize) complete(i, now, window);
      }
      if (size_t(n) < buf_.size()) break;  // drained; level-triggered epoll reports the rest
    }
    try_send(i);
    return c.state == Conn::Up;
  }

  void complete(uint32_t i, int64_t now, const WindowBounds& window) {
    Conn& c = conns_[i];
    int phase = phase_at(window, now);
    if (!c.recv_bad && !c.first_pending) counted(phase != kOutside);
    if (!c.recv_bad && phase != kOutside) {
      c.window_msgs[phase]++;
      record_latency(c, phase, now, window.start);
      count_turn(c, now, window);
    }
    answered(c, now, window.stop);
    c.recv_seq++;
    c.recv_off = 0;
    c.recv_bad = false;
    release_next(i, now);
  }

  // The latency of the reply to message recv_seq, completed at `now` in `phase` of the window that began
  // at `start`: from its send (closed loop) or from its intended time, and also from its send (open
  // loop); the timeline's slice of `now` takes the first.
  void record_latency(const Conn& c, int phase, int64_t now, int64_t start) {
    const size_t slot = c.recv_seq % size_t(sh_.req->pipeline);
    const int64_t sent = c.sent_at[slot];
    const uint64_t lat = uint64_t(now - (open_ ? c.intended_at[slot] : sent));
    hist[phase].record(lat);
    if (open_) hist_sent[phase].record(uint64_t(now - sent));
    if (!timeline.empty())
      timeline[timeline_slice(start, int64_t(sh_.req->duration * 1e9), int(timeline.size()), now)].record(lat);
  }

  // Turns: the reply to message recv_seq, answered in the window at `now`, counts in the turn its request was
  // sent in (when that was in the window too) and in its target's latency.
  void count_turn(const Conn& c, int64_t now, const WindowBounds& window) {
    if (targets_ <= 1) return;
    const int64_t sent = c.sent_at[c.recv_seq % size_t(sh_.req->pipeline)];
    target_latency[c.id % uint32_t(targets_)].record(uint64_t(now - sent));
    const int64_t k = turn_index(window.start, turn_ns_, sent);
    if (k < 0 || k >= int64_t(turn_messages.size())) return;
    turn_messages[size_t(k)]++;
    turn_latency_ns[size_t(k)] += double(now - sent);
  }

  // Turns: whether connection `id`'s target serves the turn of `now`.
  bool serving(uint32_t id, int64_t now) const {
    const int64_t k = turn_index(sh_.t_start.load(std::memory_order_relaxed), turn_ns_, now);
    return turn_target(k, targets_) == int(id % uint32_t(targets_));
  }

  // Turns: a timer for the start of the turn after the one `now` is in.
  void arm_turn(int64_t now) {
    const int64_t start = sh_.t_start.load(std::memory_order_relaxed);
    timers_.push({start + (turn_index(start, turn_ns_, now) + 1) * turn_ns_, 0, 0, Timer::Turn});
  }

  // Message recv_seq is answered at `now`: if that is past the window's end `stop`, it was still
  // waiting then (unanswered when old enough; open loop: in flight at the end when sent before it).
  void answered(const Conn& c, int64_t now, int64_t stop) {
    if (now < stop) return;
    const size_t slot = c.recv_seq % size_t(sh_.req->pipeline);
    const int64_t sent = c.sent_at[slot];
    waiting.answered(c.id, open_ ? c.intended_at[slot] : sent, sent, now, stop, slowest());
    if (open_ && sent < stop) ol.in_flight_at_end++;
  }

  // This worker's slowest answered message of the window (ns): final once an answer came after the
  // window's end (a worker sees its answers in time order), a lower bound of the window's slowest.
  int64_t slowest() const { return int64_t(slowest_of(hist)); }

  // One more message answered (and in the window): single writer, so a plain relaxed store, no
  // locked instruction on the per-message path.
  void counted(bool in_window) {
    completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (in_window) in_window_.store(in_window_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  // What grow() takes for this thread's round trip when nothing queues in the server, rtt_floor_ns_: its
  // fastest answer for the first kFloorAnswers, then the least mean over kFloorAnswers answers (an exact mean
  // of the first ones, then a 1/kFloorAnswers weight). Not the fastest answer all along: a server whose answers
  // spread wide on their own (a handler that waits on a database, poisson-sleep) has a mean many times its
  // fastest, and its pool stopped growing with nothing queued (`--work poisson-sleep:1000` on `thread`, -c 2
  // at 2,000/s: 2 connections in 5 runs of 5, every request waiting for one, 85-88% of the rate). A mean over 64
  // answers spreads ~1/11 as much as one answer; a server that queues still shows as a recent round trip twice that (a
  // stall at once; an overload from the start once its queue is about twice what it was over the first 64 answers:
  // one loop at twice its capacity from the first request on, -c 10, got 30-32 connections where the fastest
  // kept 10, the same requests waiting in its sockets rather than the loader; bench/spread_pool.py).
  void floor_answer(int64_t rtt) {
    rtt_n_++;
    rtt_mean_ns_ += (rtt - rtt_mean_ns_) / std::min(rtt_n_, kFloorAnswers);
    if (rtt_n_ < kFloorAnswers) {
      if (rtt_floor_ns_ == 0 || rtt < rtt_floor_ns_) rtt_floor_ns_ = std::max<int64_t>(1, rtt);
    } else if (rtt_n_ == kFloorAnswers || rtt_mean_ns_ < rtt_floor_ns_) {
      rtt_floor_ns_ = std::max<int64_t>(1, rtt_mean_ns_);
    }
  }

  // An exchange completed: the next message may go (after the think time). Open loop: the round trip joins
  // this thread's mean, and an opened connection's first answer lets grow() open more.
  void release_next(uint32_t i, int64_t now) {
    if (conns_[i].first_pending) {
      first_settled(conns_[i], true);
      if (sh_.phase.load(std::memory_order_relaxed) == kFirst) return;  // the load begins with the run phase
    }
    if (open_) {
      Conn& c = conns_[i];
      const int64_t rtt = now - c.sent_at[(c.recv_seq - 1) % K_];
      rtt_ewma_ns_ = rtt_ewma_ns_ == 0 ? rtt : rtt_ewma_ns_ + (rtt - rtt_ewma_ns_) / 8;  // the first: itself
      floor_answer(rtt);
      if (c.unproven) {
        settle(c);
        proven_++;
      }
    }
    const Think& th = sh_.req->think;
    if (th.active())
      timers_.push({now + int64_t(th.sample_ns(rng_)), i, 0, Timer::Think});
    else if (!open_)
      conns_[i].credits++;
    else  // open loop: the slot takes the thread's next request (pump() runs after the event)
      push_ready(i);
  }

  // ---- request/response protocols (http, line) ----

  // Reads replies; false when the connection was closed (it is being reopened) or died.
  bool on_readable_reply(uint32_t i) {
    Conn& c = conns_[i];
    ReplyParser& parser = *c.parser;
    while (true) {
      ssize_t n = recv(c.fd.get(), buf_.data(), buf_.size(), 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;  // level-triggered epoll reports the rest
      if (n <= 0) {
        server_closed(i);
        return false;
      }
      const int64_t now = now_ns();
      const WindowBounds window = sh_.bounds();
      const uint8_t* p = buf_.data();
      const uint8_t* end = p + n;
      while (p < end) {
        if (parser.idle() && !awaiting_reply(c)) {
          protocol_error(i, errors.malformed,
                         "malformed: reply bytes with no request outstanding: " +
                             excerpt(reinterpret_cast<const char*>(p), size_t(end - p)));
          return false;
        }
        Reply r;
        ReplyParser::Result res = parser.feed(&p, end, &r);
        if (res == ReplyParser::NeedMore) break;
        if (res == ReplyParser::Error) {
          uint64_t& counter = parser.error() == ReplyError::Unframed ? errors.unframed : errors.malformed;
          protocol_error(i, counter, std::string(reply_error_kind(parser.error())) + ": " + parser.detail());
          return false;
        }
        if (r.status >= 100 && r.status < 200) {  // interim (100 Continue, 103 Early Hints): the final one follows
          if (phase_at(window, now) != kOutside) status[0]++;
          continue;
        }
        reply_done(i, now, window, r.status);
        if (r.close) {  // the server closes after this reply: reopen now
          reopen(i);
          return false;
        }
      }
      if (size_t(n) < buf_.size()) break;
    }
    try_send(i);
    return c.state == Conn::Up;
  }

  // A request was sent (or is partly sent) and its reply is not complete.
  static bool awaiting_reply(const Conn& c) { return c.recv_seq < c.send_seq || c.send_off > 0; }

  // One exchange done. 2xx (and every line reply) is a message; other statuses are errors by class.
  void reply_done(uint32_t i, int64_t now, const WindowBounds& window, int status_code) {
    Conn& c = conns_[i];
    const int phase = phase_at(window, now);
    bool ok = true;
    if (status_code) {  // http (the parser only passes 1xx..5xx)
      const int cls = status_code / 100;
      if (phase != kOutside) status[size_t(cls - 1)]++;
      ok = cls == 2;
      if (!ok) {
        (cls == 3 ? errors.http_3xx : cls == 4 ? errors.http_4xx : errors.http_5xx)++;
        if (errors.sample.empty())
          errors.sample = "http_" + std::to_string(cls) + "xx: status " + std::to_string(status_code);
      }
    }
    if (ok && !c.first_pending) counted(phase != kOutside);
    if (ok && phase != kOutside) {
      c.window_msgs[phase]++;
      record_latency(c, phase, now, window.start);
      count_turn(c, now, window);
    }
    answered(c, now, window.stop);
    c.recv_seq++;
    release_next(i, now);
  }

  // An unreadable reply: counted (the first one kept as the sample), the connection reopened.
  void protocol_error(uint32_t i, uint64_t& counter, std::string sample) {
    counter++;
    if (errors.sample.empty()) errors.sample = std::move(sample);
    reopen(i);
  }

  // The server closed (or reset) the connection: a keep-alive connection ends that way, so it is
  // reopened; only a reply cut in the middle is an error.
  void server_closed(uint32_t i) {
    if (!conns_[i].parser->idle()) {
      errors.truncated++;
      if (errors.sample.empty()) errors.sample = "truncated: the server closed the connection in the middle of a reply";
    }
    reopen(i);
  }

  // Closes the connection and opens it again; the requests it had not answered are sent again on
  // the new one (with new send timestamps). Counted in `reconnects`.
  void reopen(uint32_t i) {
    Conn& c = conns_[i];
    close_fd(c);
    c.parser->reset();
    reconnects++;
    // Past the window's end its unanswered requests were waiting then: count them before they are
    // sent again with new timestamps.
    const int64_t stop = sh_.t_stop.load(std::memory_order_relaxed);
    if (c.sent_at && now_ns() >= stop) {
      waiting.in_flight(c.id, c.sent_at.get(), c.intended_at.get(), size_t(sh_.req->pipeline), c.recv_seq, c.started,
                        stop, slowest());
      if (open_) ol.in_flight_at_end += in_flight_before(c, stop);
    }
    // Open loop: these credits are the requests to send again (with their intended times kept).
    c.credits += uint32_t(c.started - c.recv_seq);
    c.started = c.send_seq = c.recv_seq;
    c.send_off = 0;
    c.reconnecting = true;
    c.attempts = 0;
    c.state = Conn::Idle;
    attempt(i, now_ns());
  }

  // A connection that could not be reopened: lost for the rest of the run (counted as `connect`).
  void give_up(uint32_t i) {
    Conn& c = conns_[i];
    close_fd(c);
    c.state = Conn::Dead;
    c.reconnecting = false;
    c.gen++;
    errors.connect++;
    settle(c);
    first_settled(c, false);
    closed_for_good();
    if (sh_.alive.fetch_sub(1) == 1) sh_.notify();  // the last one: the backend is gone
  }

  // Sends as much as credits allow, batching whole messages into one send() when pipelining.
  void try_send(uint32_t i) {
    Conn& c = conns_[i];
    if (const int phase = sh_.phase.load(std::memory_order_relaxed); phase != kRun && phase != kFirst) return;
    const size_t msize = sh_.req->message_bytes();
    const size_t K = size_t(sh_.req->pipeline);
    // Request/response protocols send the same request bytes every time; echo sends per-message bytes.
    const uint8_t* fixed = c.parser ? reinterpret_cast<const uint8_t*>(sh_.req->request_bytes.data()) : nullptr;
    bool blocked = false;
    while (true) {
      // Build [send_seq@send_off ...] from messages already started plus newly started ones.
      size_t len = 0;
      uint64_t seq = c.send_seq;
      size_t off = c.send_off;
      int64_t now = 0;
      while (len < buf_.size()) {
        if (seq >= c.started) {
          if (c.credits > 0) {  // closed loop: a free slot; open loop: a request sent again after a reopening
            if (!now) now = now_ns();
            if (targets_ > 1 && !serving(c.id, now)) break;  // turns: not this target's turn (it keeps the slot)
            c.credits--;
            c.sent_at[c.started % K] = now;
            c.started++;
          } else {  // open loop: pump() starts the scheduled requests
            break;
          }
        }
        size_t take = std::min(msize - off, buf_.size() - len);
        if (fixed)
          memcpy(sbuf_ptr() + len, fixed + off, take);
        else
          sh_.payload->fill(c.id, seq, off, take, sbuf_ptr() + len);
        len += take;
        off += take;
        if (off == msize) {
          seq++;
          off = 0;
        }
      }
      if (len == 0) break;
      ssize_t n = send(c.fd.get(), sbuf_ptr(), len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
          blocked = errno == EAGAIN;
          if (blocked) break;
          continue;
        }
        if (c.parser) return server_closed(i);  // reopened
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
      epoll_event ev{};
      ev.events = blocked ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
      ev.data.u64 = i;
      if (epoll_ctl(ep_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) < 0) return lost(i);  // cannot be watched: give it up
      c.want_out = blocked;
    }
  }

  // ---- open loop ----

  // Messages [recv_seq, started) of `c` sent before `stop` (open loop: in flight at the end).
  uint64_t in_flight_before(const Conn& c, int64_t stop) const {
    const size_t K = size_t(sh_.req->pipeline);
    uint64_t k = 0;
    for (uint64_t s = c.recv_seq; s < c.started; s++) k += c.sent_at[s % K] < stop;
    return k;
  }

 public:
  // Open loop, after join(): the requests this thread's schedule still held (never started) with
  // intended times before the window's end `stop`, and the messages its open connections still had in
  // flight, sent before `stop`.
  void finish_open_loop(int64_t start, int64_t stop) {
    if (!scheduled_) return;
    const uint64_t before_stop = arrival_.count_before(sched_, stop);
    const uint64_t before_start = arrival_.count_before(sched_, start);
    ol.queued_at_end += before_stop;
    ol.intended += before_stop - std::min(before_stop, before_start);
    for (const Conn& c : conns_)
      if ((c.state == Conn::Up || c.reconnecting) && c.sent_at) ol.in_flight_at_end += in_flight_before(c, stop);
  }

 private:
  // The backend closed or reset the connection.
  void lost(uint32_t i) {
    Conn& c = conns_[i];
    close_fd(c);
    c.state = Conn::Dead;
    errors.reset++;
    settle(c);
    first_settled(c, false);
    closed_for_good();
    if (sh_.alive.fetch_sub(1) == 1) sh_.notify();  // the last one: the backend is gone
  }

  // Send staging area: separate from the receive buffer because try_send runs inside on_readable.
  uint8_t* sbuf_ptr() {
    if (sbuf_.empty()) sbuf_.resize(kIoBuf);
    return sbuf_.data();
  }

  Shared& sh_;
  const int index_;  // this worker's index: its open-loop schedule's stream
  int cpu_;
  std::mt19937_64 rng_;
  const bool open_;               // open-loop load (the request has a rate)
  const bool zmtp_;               // transport zmtp: a ZMTP handshake before a connection is up
  const int64_t late_threshold_;  // open loop: lateness above which a request is `loader_late`
  const int targets_;             // target and alternate: connection i talks to target i % targets_
  const int64_t turn_ns_;         // turns: each target's turn
  const long cap_;                // open loop: the most connections open at once, over all threads
  const uint64_t K_;              // pipeline: messages in flight per connection
  ScheduleParams sched_;          // open loop: a copy of the run's schedule, taken when the load starts
  // Open loop: this thread's schedule. arrival_ is its next request not yet started, seen_ its next one
  // not yet looked at (at or after arrival_); the requests between them came due and wait, each for a
  // slot below the cap (kWaited: one that frees, or one of a connection opened for it) or, the cap reached,
  // for any slot (kBehind):
  // kinds_ holds their kinds in runs [previous run's end, end) of request numbers.
  enum : uint8_t { kFree, kWaited, kBehind };
  struct KindRun {
    uint64_t end;
    uint8_t kind;
  };
  bool scheduled_ = false;
  Arrival arrival_, seen_;
  uint64_t started_n_ = 0, seen_n_ = 0;
  std::deque<KindRun> kinds_;
  std::deque<uint32_t> ready_;         // -c connections with a free slot, least recently used first
  std::vector<uint32_t> extra_ready_;  // connections opened during the load with a free slot, most recent last
  uint32_t base_ = 0;                  // this thread's -c connections: conns_[0, base_)
  uint64_t waiting_ = 0;               // requests waiting below the cap (kWaited)
  uint64_t unproven_ = 0;              // connections opened during the load that have not answered yet
  uint64_t proven_ = 0;                // those that have (the -c ones count as answered: base_ + proven_)
  uint64_t live_ = 0;                  // this thread's connections not closed for good (open, opening, reopening)
  int64_t rtt_ewma_ns_ = 0;            // this thread's recent mean round trip (send to answer), 1/8 weight
  int64_t rtt_mean_ns_ = 0;            // its mean round trip over the last kFloorAnswers (floor_answer())
  int64_t rtt_n_ = 0;                  // answers in it so far
  int64_t rtt_floor_ns_ = 0;           // its round trip with nothing queued (floor_answer(); 0: none yet)
  uint64_t opening_slots_ = 0;         // the slots (pipeline each) of the connections being opened
  int64_t timer_due_ = 0;              // the pending send timer (0: none)
  bool grow_stopped_ = false;          // a connection opened during the load failed: open no more
  Fd ep_, wake_fd_;
  std::deque<Conn> conns_;  // a deque: connections opened during the load are added without moving the others
  std::deque<uint32_t> pending_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  int connecting_ = 0;
  size_t resolved_ = 0;  // connections up or given up on
  std::vector<uint8_t> buf_, sbuf_;
  std::thread thread_;
  // Own cache line each: the coordinator reads them (rarely) while this worker writes them.
  alignas(64) std::atomic<uint64_t> completed_{0};
  alignas(64) std::atomic<uint64_t> in_window_{0};
};

// The coordinator: the thread that called run_load. It owns the timeline and watches the control
// client and the signals.
class Coordinator {
 public:
  Coordinator(const RunRequest& req, const EngineConfig& cfg, const Emit& emit, const Watch& watch)
      : req_(req),
        cfg_(cfg),
        emit_(emit),
        watch_(watch),
        payload_(req.msize,
                 req.transport == Transport::Zmtp ? zmtp::frame_header(size_t(req.msize)) : std::vector<uint8_t>{}),
        window_(req, emit) {}
  ~Coordinator() { stop_workers(); }

  RunOutcome run() {
    RunOutcome out;
    Stats& st = out.stats;
    st.connections = req_.connections;
    st.msize = req_.msize;
    st.pipeline = req_.pipeline;
    st.protocol = req_.protocol;
    st.request_bytes = req_.request_bytes.size();
    st.open_loop = req_.open_loop();
    st.rate = req_.rate;
    st.arrivals = req_.arrivals;
    if (req_.turns()) {
      st.turn_targets = {req_.target};
      st.turn_targets.insert(st.turn_targets.end(), req_.alternate.begin(), req_.alternate.end());
      st.turn_ns = int64_t(std::llround(req_.turn * 1e9));
    }
    const bool no_connection = play_guarded(out, [&] { return play(out); });
    if (sh_.failed.load()) {
      std::lock_guard<std::mutex> lock(sh_.failure_mu);
      fail_run(out, err::kInternal, sh_.failure);
    }
    // Echoes completing after a cut are not counted: the workers read the published bounds.
    const bool aborted = end_window(window_, out, [&] {
      if (window_.fixed()) sh_.publish(window_.bounds());
    });
    stop_workers();
    if (!aborted && !out.client_gone && req_.hold > 0) hold(out);

    // Merge.
    st.init_counts(req_.connections);
    for (auto& w : workers_) {
      st.connected += w->connected;
      st.reconnects += w->reconnects;
      for (size_t k = 0; k < st.status.size(); k++) st.status[k] += w->status[k];
      st.add_latency(w->hist);
      st.add_timeline(w->timeline, int64_t(req_.duration * 1e9));
      st.add_turns(w->turn_messages, w->turn_latency_ns, w->target_latency);
      for (auto& c : w->conns()) st.add_conn(c.id, c.window_msgs);
      if (st.open_loop) {
        st.add_latency_sent(w->hist_sent);
        if (window_.opened()) w->finish_open_loop(window_.bounds().start, window_.bounds().stop);
        st.ol.add(w->ol);
      }
    }
    if (st.open_loop) {
      st.ol.max_connections = req_.connection_cap();
      st.ol.conns_max = sh_.most_alive.load();
    }
    if (window_.opened()) gather_unanswered(st, window_.bounds().stop);
    st.errors = sum_errors();
    if (no_connection)  // a zmtp peer that answered but not in ZMTP 3 is named by the first failure
      out.error_message = "no connection to " + req_.target + " could be made (" + std::to_string(st.errors.connect) +
                          " refused or failed, " + std::to_string(st.errors.timeout) + " timed out within " +
                          json(req_.connect_timeout).dump() +
                          " s): " + (st.errors.sample.empty() ? "is the backend listening there?" : st.errors.sample);
    window_.finish(st, nworkers_);
    st.aborted = aborted && accepted_;  // a run refused before `accepted` has no result, only the error
    workers_.clear();
    return out;
  }

 private:
  // Connect phase, warm-up and window. True when no connection could be made.
  bool play(RunOutcome& out) {
    sh_.req = &req_;
    sh_.payload = &payload_;
    sh_.notify_fd.reset(check_sys(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd"));
    ep_.reset(check_sys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    add(sh_.notify_fd.get(), EPOLLIN);
    if (watch_.client_fd >= 0) add(watch_.client_fd, EPOLLIN | EPOLLRDHUP);
    if (watch_.signal_fd >= 0) add(watch_.signal_fd, EPOLLIN);

    nworkers_ = std::max(1, std::min(cfg_.threads, req_.connections));
    if (!emit_(event("accepted"))) {
      out.client_gone = true;
      return false;
    }
    accepted_ = true;
    // An abort may already be in the input read with the request (epoll would not report it again).
    if (watch_.client_fd >= 0 && !client_here(out)) return false;
    int64_t t0 = now_ns();
    sh_.connect_deadline = t0 + s_to_ns(req_.connect_timeout);
    sh_.open_conns.store(req_.connections);  // each given back when it fails for good
    sh_.next_id.store(uint32_t(req_.connections));
    for (int w = 0; w < nworkers_; w++) {
      int cpu = cfg_.cpus.empty() ? -1 : cfg_.cpus[size_t(w) % cfg_.cpus.size()];
      workers_.push_back(std::make_unique<Worker>(sh_, w, nworkers_, cpu));
    }
    for (auto& w : workers_) w->start();

    // 1. Connect phase: until every worker has resolved all its connections (or the deadline).
    auto all_resolved = [&] { return sh_.failed.load() || sh_.workers_ready.load() == nworkers_; };
    if (!wait_until(INT64_MAX, out, all_resolved) || sh_.failed.load()) return false;
    if (req_.served_first && sh_.ever_up.load() > 0 && !serve_firsts(out)) return false;
    int64_t t1 = now_ns();
    long up = sh_.ever_up.load();
    // Its boundaries are fixed before the first ping, so workers classify each echo by its own timestamp: the
    // window is exact, whatever our wake-up lag; `connected` announces them.
    if (up > 0) window_.fix(t1);
    if (!window_.connected(out.stats, t0, t1, up)) {
      out.client_gone = true;
      return false;
    }
    if (up == 0) {
      fail_run(out, err::kConnect, "");  // message built after the workers stopped (it needs their counts)
      return true;
    }
    // 2. Warm-up, then the window (fixed above).
    sh_.publish(window_.bounds());
    // Open loop: the schedule starts with the load, at the warm-up's start.
    if (req_.open_loop()) sh_.schedule = ScheduleParams::make(req_, t1, nworkers_);
    sh_.phase.store(kRun, std::memory_order_release);
    for (auto& w : workers_) w->wake();
    auto stop_early = [&] { return backend_gone() || sh_.failed.load(); };
    while (!window_.closed()) {
      // One timer for both: the window's marks and (when asked for) progress events.
      if (!wait_until(std::min(window_.next_mark(), window_.next_progress()), out, stop_early))
        return false;  // client gone or signal
      if (stop_early()) break;
      const int64_t now = now_ns();
      if (!window_.advance(now) || (now >= window_.next_progress() && !send_progress(now))) {
        out.client_gone = true;
        return false;
      }
    }
    if (backend_gone() && !window_.closed())
      fail_run(
          out, err::kBackendGone,
          "the backend closed or reset all " + std::to_string(up) + " connections mid-run (did it crash or exit?)");
    return false;
  }

  // warmup_after "served" (PROTOCOL.md, "Warm-up after"): until every connection's first message is answered (the
  // server has accepted them all) or connect_timeout runs out. False when the run must stop.
  bool serve_firsts(RunOutcome& out) {
    const int64_t t = now_ns();
    sh_.phase.store(kFirst, std::memory_order_release);
    for (auto& w : workers_) w->wake();
    auto all_served = [&] {
      return sh_.failed.load() || (sh_.workers_first.load() == nworkers_ && sh_.first_waiting.load() == 0);
    };
    if (!wait_until(sh_.connect_deadline, out, all_served) || sh_.failed.load()) return false;
    Stats& st = out.stats;
    st.has_served_first = true;
    st.first_served = sh_.first_answered.load();
    st.first_unserved = sh_.first_waiting.load();
    st.first_s = ns_to_s(now_ns() - t);
    return true;
  }

  // A progress event with the counts summed over the workers.
  bool send_progress(int64_t now) {
    uint64_t completed = 0, in_window = 0;
    for (auto& w : workers_) {
      completed += w->completed();
      in_window += w->in_window();
    }
    return window_.progress(now, completed, in_window);
  }

  // The messages still waiting at the window's end `stop`, after the workers stopped: those answered
  // late (counted as they came) plus those never answered, on connections still open (a dead one's
  // requests are lost, counted in errors).
  // Call after the latencies are merged (st.latency: the window's slowest).
  void gather_unanswered(Stats& st, int64_t stop) const {
    const size_t K = size_t(req_.pipeline);
    const int64_t slowest = int64_t(st.latency.max());
    Waiting all;
    for (auto& w : workers_) {
      all.msgs.insert(all.msgs.end(), w->waiting.msgs.begin(), w->waiting.msgs.end());
      for (auto& c : w->conns())
        if ((c.state == Conn::Up || c.reconnecting) && c.sent_at)
          all.in_flight(c.id, c.sent_at.get(), c.intended_at.get(), K, c.recv_seq, c.started, stop, slowest);
    }
    st.set_unanswered(all.msgs, stop);
  }

  void stop_workers() {
    sh_.phase.store(kStop, std::memory_order_release);
    for (auto& w : workers_) w->wake();
    for (auto& w : workers_) w->join();
  }

  void add(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    check_sys(epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev), "epoll_ctl");
  }

  bool backend_gone() const { return sh_.ever_up.load() > 0 && sh_.alive.load() == 0; }

  Errors sum_errors() const {
    Errors e;
    for (auto& w : workers_) e.add(w->errors);
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
      int n = epoll_pwait2(ep_.get(), evs, 8, deadline == INT64_MAX ? nullptr : &ts, nullptr);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno("epoll_pwait2");
      }
      for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        if (fd == sh_.notify_fd.get()) {
          drain_eventfd(fd);
        } else if (fd == watch_.signal_fd) {
          if (!take_signal(fd)) continue;  // spurious wake-up
          out.signalled = true;
          return false;
        } else if (fd == watch_.client_fd && !client_here(out)) {
          return false;
        }
      }
    }
  }

  // The client's input: false when the run must stop (client_ok). A release ends the hold (kept: one may come
  // before it begins); so does an abort once the window has closed, without making the run an aborted one.
  bool client_here(RunOutcome& out) {
    const ClientPoll poll = poll_client(watch_);
    if (poll == ClientPoll::Release || (poll == ClientPoll::Abort && window_.closed())) {
      released_ = true;
      return true;
    }
    return client_ok(poll, out);
  }

  // PROTOCOL.md, "Hold": after measure_stop the connections stay open, nothing more sent on them (the workers
  // have stopped; their sockets close with them), until the client releases them or `hold` seconds pass, so that
  // a server's thread per connection is still there when the client reads its counts at measure_stop.
  void hold(RunOutcome& out) {
    wait_until(now_ns() + s_to_ns(req_.hold), out, [&] { return released_; });
  }

  const RunRequest& req_;
  const EngineConfig& cfg_;
  const Emit& emit_;
  Watch watch_;
  Payload payload_;
  RunWindow window_;
  Shared sh_;
  Fd ep_;
  int nworkers_ = 1;
  bool accepted_ = false;
  bool released_ = false;                         // the client sent {"cmd":"release"} (hold)
  std::vector<std::unique_ptr<Worker>> workers_;  // after sh_: destroyed (joined) first
};

}  // namespace

RunOutcome run_load(const RunRequest& req, const EngineConfig& cfg, const Emit& emit, const Watch& watch) {
  // The engines turn failures during a run into `internal` errors themselves; this is the last line
  // (e.g. out of memory while merging the stats): an error without a result, never a crash.
  try {
    if (req.transport == Transport::Zmq) return run_zmq_load(req, cfg, emit, watch);
    return Coordinator(req, cfg, emit, watch).run();
  } catch (const std::bad_alloc&) {
    RunOutcome out;
    out.error_kind = err::kInternal;
    out.error_message = "out of memory";
    return out;
  } catch (const std::exception& e) {
    RunOutcome out;
    out.error_kind = err::kInternal;
    out.error_message = e.what();
    return out;
  }
}

bool take_signal(int signal_fd) {
  signalfd_siginfo si;
  ssize_t n;
  do {
    n = read(signal_fd, &si, sizeof si);
  } while (n < 0 && errno == EINTR);
  return n == ssize_t(sizeof si);
}

void fail_run(RunOutcome& out, const char* kind, std::string msg) {
  if (out.error_kind) return;
  out.error_kind = kind;
  out.error_message = std::move(msg);
}

bool play_guarded(RunOutcome& out, const std::function<bool()>& play) {
  try {
    return play();
  } catch (const std::bad_alloc&) {
    fail_run(out, err::kInternal, "out of memory");
  } catch (const std::exception& e) {
    fail_run(out, err::kInternal, e.what());
  }
  return false;
}

bool end_window(RunWindow& window, RunOutcome& out, const std::function<void()>& on_cut) {
  const bool aborted = out.error_kind || out.client_gone || out.signalled;
  if (aborted) {
    window.cut(now_ns());
    if (on_cut) on_cut();
  }
  if (!window.close(!out.client_gone)) out.client_gone = true;
  return aborted;
}

bool client_ok(ClientPoll poll, RunOutcome& out) {
  if (poll == ClientPoll::Gone) {
    out.client_gone = true;
    return false;
  }
  if (poll == ClientPoll::Abort) {
    if (!out.error_kind) {
      out.error_kind = err::kAborted;
      out.error_message = "the client aborted the run";
    }
    return false;
  }
  return true;
}

}  // namespace netprof
