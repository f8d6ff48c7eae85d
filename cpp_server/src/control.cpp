#include "control.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "clock.hpp"

namespace netprof {

namespace {
constexpr size_t kMaxClients = 64;
constexpr int kWriteTimeoutMs = 10'000;  // a client that stops reading for this long is dropped

void log(const std::string& msg) { fprintf(stderr, "netprof-loader: %s\n", msg.c_str()); }
}  // namespace

bool write_line(int fd, const json& obj) {
  std::string s = obj.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, kWriteTimeoutMs) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
  }
  return true;
}

namespace {

class Server {
 public:
  Server(const EngineConfig& cfg, int signal_fd) : cfg_(cfg), signal_fd_(signal_fd) {}

  int serve(const sockaddr_in& addr) {
    lfd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd_ < 0 || bind(lfd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) < 0 || listen(lfd_, 64) < 0) {
      log(std::string("cannot listen for control connections: ") + strerror(errno));
      return 1;
    }
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    getsockname(lfd_, reinterpret_cast<sockaddr*>(&bound), &len);
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &bound.sin_addr, host, sizeof host);
    printf("control %s:%d\n", host, ntohs(bound.sin_port));
    fflush(stdout);

    ep_ = epoll_create1(EPOLL_CLOEXEC);
    add(lfd_);
    add(signal_fd_);
    epoll_event evs[32];
    while (!stop_) {
      int n = epoll_wait(ep_, evs, 32, -1);
      for (int i = 0; i < n && !stop_; i++) {
        int fd = evs[i].data.fd;
        if (fd == signal_fd_) {
          stop_ = true;
        } else if (fd == lfd_) {
          accept_clients();
        } else if (clients_.count(fd)) {
          on_client(fd);
        }
      }
    }
    for (auto& [fd, in] : clients_) close(fd);
    close(lfd_);
    close(ep_);
    return 0;
  }

 private:
  void add(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
  }

  void accept_clients() {
    while (true) {
      int fd = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (clients_.size() >= kMaxClients) drop_closed_clients();
      if (clients_.size() >= kMaxClients) {
        write_line(fd, error_event(err::kBadRequest, "too many control clients"));
        close(fd);
        continue;
      }
      clients_[fd] = std::string();
      add(fd);
    }
  }

  // Clients that hung up but whose EOF we have not read yet (it may sit later in this epoll batch).
  void drop_closed_clients() {
    std::vector<int> gone;
    for (auto& [fd, in] : clients_) {
      char c;
      ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) gone.push_back(fd);
    }
    for (int fd : gone) drop(fd);
  }

  void drop(int fd) {
    clients_.erase(fd);
    close(fd);  // also leaves the epoll set
  }

  void on_client(int fd) {
    char buf[16384];
    std::string& in = clients_[fd];
    while (true) {
      ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return drop(fd);
      if (n < 0) break;
      in.append(buf, size_t(n));
      if (in.size() > 4 * kMaxLine) break;  // enough to decide; the rest waits
    }
    handle_lines(fd);
  }

  // Serves every complete line in the client's buffer; drops the client on a framing error.
  void handle_lines(int fd) {
    while (clients_.count(fd)) {
      std::string& in = clients_[fd];
      size_t nl = in.find('\n');
      if (nl == std::string::npos) {
        if (in.size() > kMaxLine) {
          // The line's end is lost in the flood: report and hang up, the framing cannot recover.
          write_line(fd, error_event(err::kBadRequest, "line too long (limit " + std::to_string(kMaxLine) + " bytes)"));
          drop(fd);
        }
        return;
      }
      std::string line = in.substr(0, nl);
      in.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (!handle_request(fd, line)) return;
    }
  }

  // False when the client was dropped or the loader must stop.
  bool handle_request(int fd, const std::string& line) {
    Request req;
    std::string why;
    if (!parse_request(line, &req, &why)) {
      if (!write_line(fd, error_event(err::kBadRequest, why))) return drop(fd), false;
      return true;
    }
    if (req.cmd == Request::Ping) {
      json pong = {{"event", "pong"}, {"version", kProtocolVersion}};
      if (!write_line(fd, pong)) return drop(fd), false;
      return true;
    }
    if (!check_fd_limit(req.run.connections, &why)) {
      if (!write_line(fd, error_event(err::kBadRequest, why))) return drop(fd), false;
      return true;
    }
    std::function<bool(const json&)> emit = [fd](const json& ev) { return write_line(fd, ev); };
    RunOutcome out = run_load(req.run, cfg_, emit, Watch{fd, &clients_[fd], signal_fd_});
    if (out.signalled) {
      stop_ = true;
      out.error_kind = err::kInternal;
      out.error_message = "the loader was stopped by a signal";
    }
    if (out.client_gone) {
      log("control client disconnected mid-run: run aborted");
      return drop(fd), false;
    }
    bool ok = true;
    if (out.error_kind) log(std::string(out.error_kind) + ": " + out.error_message);
    if (out.stats.aborted || !out.error_kind) ok = write_line(fd, {{"event", "result"}, {"stats", stats_json(out.stats)}});
    if (ok && out.error_kind) ok = write_line(fd, error_event(out.error_kind, out.error_message));
    if (!ok) return drop(fd), false;
    return !stop_;
  }

  const EngineConfig& cfg_;
  int signal_fd_;
  int lfd_ = -1, ep_ = -1;
  bool stop_ = false;
  std::map<int, std::string> clients_;  // fd -> unread input
};

}  // namespace

int serve_control(const sockaddr_in& bind_addr, const EngineConfig& cfg, int signal_fd) {
  return Server(cfg, signal_fd).serve(bind_addr);
}

}  // namespace netprof
