#include "control.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "sys.hpp"

namespace netprof {

namespace {
constexpr int kWriteTimeoutMs = 10'000;  // a parent that stops reading for this long is treated as gone

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
    int rc = poll(&p, 1, kWriteTimeoutMs);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
  }
  return true;
}

bool prepare_channel(int fd, std::string* why) {
  struct stat st {};
  int type = 0;
  socklen_t len = sizeof type;
  if (fd < 0 || fstat(fd, &st) != 0) {
    *why = "--control-fd " + std::to_string(fd) + " is not an open descriptor";
    return false;
  }
  if (!S_ISSOCK(st.st_mode) || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
    *why = "--control-fd " + std::to_string(fd) + " is not a stream socket (pass one end of a socketpair)";
    return false;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
    *why = std::string("--control-fd: fcntl: ") + strerror(errno);
    return false;
  }
  return true;
}

ClientPoll poll_client(const Watch& w) {
  char tmp[4096];
  while (true) {
    ssize_t n = recv(w.client_fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n == 0) return ClientPoll::Gone;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return ClientPoll::Gone;
      break;
    }
    // Mid-run the parent sends at most an abort and a ping: a bounded buffer is plenty.
    if (w.client_input && w.client_input->size() < 2 * kMaxLine) w.client_input->append(tmp, size_t(n));
  }
  if (!w.client_input) return ClientPoll::Here;
  // An abort among the complete lines ends the run, a release its hold; the lines around them wait for after
  // the run.
  std::string& in = *w.client_input;
  for (size_t pos = 0, nl; (nl = in.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    Request req;
    std::string why;
    std::string_view line(in.data() + pos, nl - pos);
    if (parse_request(line, &req, &why) && (req.cmd == Request::Abort || req.cmd == Request::Release)) {
      in.erase(pos, nl + 1 - pos);
      return req.cmd == Request::Abort ? ClientPoll::Abort : ClientPoll::Release;
    }
  }
  return ClientPoll::Here;
}

namespace {

// The one connection to the parent: requests are served in order; EOF means the parent is gone.
class Channel {
 public:
  Channel(Fd fd, const EngineConfig& cfg, int signal_fd) : fd_(std::move(fd)), cfg_(cfg), signal_fd_(signal_fd) {}

  int serve() {
    ep_.reset(check_sys(epoll_create1(EPOLL_CLOEXEC), "epoll_create1"));
    add(fd_.get());
    add(signal_fd_);
    epoll_event evs[4];
    while (true) {
      if (!serve_lines()) return 0;  // lines already here (e.g. sent during the last run) first
      int n = epoll_wait(ep_.get(), evs, 4, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno("epoll_wait");
      }
      for (int i = 0; i < n; i++) {
        if (evs[i].data.fd == signal_fd_) {
          if (take_signal(signal_fd_)) return 0;
        } else if (!read_input()) {
          log("the control channel was closed (the parent is gone): exiting");
          return 0;
        }
      }
    }
  }

 private:
  void add(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    check_sys(epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev), "epoll_ctl");
  }

  // Appends what the parent sent; false on EOF or an error (the parent is gone).
  bool read_input() {
    char buf[16384];
    while (true) {
      ssize_t n = recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN;
      }
      in_.append(buf, size_t(n));
      if (in_.size() > 4 * kMaxLine) return true;  // enough to decide; the rest waits
    }
  }

  // Serves every complete line; false when the loader must exit.
  bool serve_lines() {
    while (true) {
      size_t nl = in_.find('\n');
      if (discarding_) {  // the rest of an over-long line
        if (nl == std::string::npos) {
          in_.clear();
          return true;
        }
        in_.erase(0, nl + 1);
        discarding_ = false;
        continue;
      }
      if (nl == std::string::npos) {
        if (in_.size() > kMaxLine) {
          // Report once, then skip to the next newline: the channel stays usable.
          in_.clear();
          discarding_ = true;
          return write_line(fd_.get(), error_event(err::kBadRequest, too_long()));
        }
        return true;
      }
      std::string line = in_.substr(0, nl);
      in_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (!handle_request(line)) return false;
    }
  }

  static std::string too_long() { return "line too long (limit " + std::to_string(kMaxLine) + " bytes)"; }

  // False when the loader must exit (the parent is gone or stuck, or a signal arrived).
  bool handle_request(const std::string& line) {
    const int fd = fd_.get();
    Request req;
    std::string why;
    if (!parse_request(line, &req, &why)) return write_line(fd, error_event(err::kBadRequest, why));
    if (req.cmd == Request::Ping) return write_line(fd, {{"event", "pong"}, {"version", kProtocolVersion}});
    // No run in progress: nothing to abort, nothing held (a release after its hold ran out); no reply.
    if (req.cmd == Request::Abort || req.cmd == Request::Release) return true;
    if (!check_fd_limit(req.run, &why)) return write_line(fd, error_event(err::kBadRequest, why));
    Emit emit = [fd](const json& ev) { return write_line(fd, ev); };
    RunOutcome out = run_load(req.run, cfg_, emit, Watch{fd, &in_, signal_fd_});
    if (out.signalled) {
      out.error_kind = err::kInternal;
      out.error_message = "the loader was stopped by a signal";
    }
    if (out.client_gone) {
      log("the control channel was closed mid-run (the parent is gone): run aborted, exiting");
      return false;
    }
    if (out.error_kind && std::string(out.error_kind) != err::kAborted)
      log(std::string(out.error_kind) + ": " + out.error_message);
    bool ok = true;
    if (out.stats.aborted || !out.error_kind)
      ok = write_line(fd, {{"event", "result"}, {"stats", stats_json(out.stats, req.run.histograms)}});
    if (ok && out.error_kind) ok = write_line(fd, error_event(out.error_kind, out.error_message));
    return ok && !out.signalled;
  }

  Fd fd_;
  const EngineConfig& cfg_;
  int signal_fd_;
  Fd ep_;
  std::string in_;  // unread input
  bool discarding_ = false;
};

}  // namespace

int serve_control(Fd channel, const EngineConfig& cfg, int signal_fd) {
  return Channel(std::move(channel), cfg, signal_fd).serve();
}

}  // namespace netprof
