// A scripted TCP server on 127.0.0.1 for engine tests: a thread accepts, each connection runs the
// handler on its own thread with blocking I/O; run_against() plays one short run of the real engine
// (run_load) against it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine.hpp"

namespace netprof {

struct ServerAction {
  std::string bytes;   // what to write
  bool close = false;  // then close the connection
};

class ServerConn {
 public:
  explicit ServerConn(int fd) : fd_(fd) {}
  // The next bytes received (replacing *out); false on EOF or error.
  bool read(std::string* out) {
    char buf[65536];
    ssize_t n;
    do {
      n = ::recv(fd_, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    out->assign(buf, size_t(n));
    return true;
  }
  bool write(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }

 private:
  int fd_;
};

class TestServer {
 public:
  using Handler = std::function<void(ServerConn&)>;
  // accept_gap_ms: a pause after each accept, as a loop that accepts one connection per turn under load
  // (libuv's uv__server_io) takes its listen queue.
  explicit TestServer(Handler handler, int accept_gap_ms = 0)
      : handler_(std::move(handler)), accept_gap_ms_(accept_gap_ms) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 ||
        listen(listen_fd_, 512) < 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) < 0)
      throw std::runtime_error("test server: cannot listen");
    port_ = ntohs(a.sin_port);
    if (pipe2(stop_pipe_, O_CLOEXEC) < 0) throw std::runtime_error("test server: pipe");
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TestServer() {
    stop();
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

  // Stops listening and closes every connection (their handlers see EOF); joins all threads.
  void stop() {
    if (stopped_.exchange(true)) return;
    char x = 0;
    (void)!::write(stop_pipe_[1], &x, 1);
    acceptor_.join();
    ::close(listen_fd_);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : workers_) ::shutdown(w->fd, SHUT_RDWR);
    for (auto& w : workers_) w->thread.join();
    for (auto& w : workers_) ::close(w->fd);
    workers_.clear();
  }

 private:
  struct Worker {
    int fd;
    std::atomic<bool> done{false};
    std::thread thread;
  };

  void accept_loop() {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    while (true) {
      if (poll(fds, 2, 100) < 0 && errno != EINTR) return;
      if (fds[1].revents) return;
      reap();
      if (!(fds[0].revents & POLLIN)) continue;
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      // Replies written in pieces must not wait on Nagle for the client's delayed ACK (40 ms a piece:
      // 25 replies/s, which failed CI on a slow host); real servers under test set it too.
      int one = 1;
      if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        throw std::runtime_error("test server: TCP_NODELAY");
      accepted_++;
      std::lock_guard<std::mutex> lock(mu_);
      workers_.push_back(std::make_unique<Worker>());
      Worker* w = workers_.back().get();
      w->fd = fd;
      w->thread = std::thread([this, w] {
        ServerConn c(w->fd);
        handler_(c);
        ::shutdown(w->fd, SHUT_RDWR);  // the handler is done: the client sees the close now
        w->done = true;
      });
      if (accept_gap_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(accept_gap_ms_));
    }
  }

  // Joins finished connection threads (a server that closes often would pile them up).
  void reap() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if ((*it)->done) {
        (*it)->thread.join();
        ::close((*it)->fd);
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  Handler handler_;
  int accept_gap_ms_ = 0;
  int listen_fd_ = -1, port_ = 0;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<int> accepted_{0};
  std::atomic<bool> stopped_{false};
  std::mutex mu_;
  std::list<std::unique_ptr<Worker>> workers_;
  std::thread acceptor_;
};

struct Served {
  Stats stats;
  const char* error_kind = nullptr;
  std::string error_message;
  int accepted_connections = 0;
};

// One run of the engine for a whole request (JSON, with "cmd") on `threads` engine threads; `during` runs on
// another thread 0.2 s in; `emit` sees the events (none: they are dropped).
inline Served run_request(const json& req, const std::function<void()>& during = {}, int threads = 1, Emit emit = {}) {
  Request r;
  std::string why;
  if (!parse_request_obj(req, &r, &why)) throw std::runtime_error("bad test request: " + why);
  EngineConfig cfg;
  cfg.threads = threads;
  if (!emit) emit = [](const json&) { return true; };
  std::thread side;
  if (during)
    side = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      during();
    });
  RunOutcome out = run_load(r.run, cfg, emit, Watch{});
  if (side.joinable()) side.join();
  Served s;
  s.stats = out.stats;
  s.error_kind = out.error_kind;
  s.error_message = out.error_message;
  return s;
}

// A run request against `server`: `fields` are request fields (JSON, without braces) on top of 1 s, no
// warm-up and a 5 s connect timeout. (1 s, not less: this kind of host stalls for 0.3 s and more at a time,
// and a shorter window then sees almost nothing.)
inline json request_against(TestServer& server, const std::string& fields, int connections) {
  json req = json::parse("{" + fields + "}");
  req["cmd"] = "run";
  req["target"] = "127.0.0.1:" + std::to_string(server.port());
  req["connections"] = connections;
  if (!req.contains("duration")) req["duration"] = 1.0;
  if (!req.contains("warmup")) req["warmup"] = 0;
  if (!req.contains("connect_timeout")) req["connect_timeout"] = 5;
  return req;
}

// One run of the engine against `server` (request_against); `during` runs on another thread 0.2 s into the run.
inline Served run_against(TestServer& server, const std::string& fields, int connections,
                          const std::function<void()>& during = {}, int threads = 1) {
  Served s = run_request(request_against(server, fields, connections), during, threads);
  s.accepted_connections = server.accepted();
  return s;
}

// A test whose checks need a minimum of traffic says so in `enough`: CI's host stalls for seconds at
// a time (a 1 s run there took 12 s, and one window saw two reopenings and no reply), so a run that
// falls short is repeated with a window 3x as long, at most twice (1, 3, 9 s). An engine that cannot
// deliver still fails, after 13 s.
using Enough = std::function<bool(const Served&)>;

inline Served run_until(TestServer& server, const std::string& fields, int connections, const Enough& enough) {
  Served s;
  for (double d = 1.0; d <= 9.0; d *= 3) {
    s = run_against(server, fields + ",\"duration\":" + std::to_string(d), connections);
    if (s.error_kind || enough(s)) break;
  }
  return s;
}

}  // namespace netprof
