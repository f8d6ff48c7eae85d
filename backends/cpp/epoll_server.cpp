// cpp_epoll: one thread, level-triggered epoll, non-blocking sockets.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends.hpp"

namespace netprof {

void serve_epoll(int listen_fd, const Work& work, const Framing& framing) {
  StopSignal stop;
  set_nonblocking(listen_fd);
  const Fd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!ep) throw_errno("epoll_create1");
  auto watch = [ep = ep.get()](int op, int fd, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    if (epoll_ctl(ep, op, fd, &ev) < 0) throw_errno("epoll_ctl");
  };
  watch(EPOLL_CTL_ADD, listen_fd, EPOLLIN);
  watch(EPOLL_CTL_ADD, stop.fd(), EPOLLIN);

  // fd -> the connection: its socket (closed when the entry goes), its receive side and the bytes
  // the socket did not take yet. While `pending` is non-empty the fd waits for EPOLLOUT only, so a
  // peer that does not read cannot make us buffer without bound.
  struct Conn {
    Fd fd;
    Receiver rx;
    std::string pending;
  };
  std::unordered_map<int, Conn> conns;
  std::vector<char> buf = framing.scratch();
  std::vector<epoll_event> events(512);

  auto close_conn = [&](int fd) {
    if (epoll_ctl(ep.get(), EPOLL_CTL_DEL, fd, nullptr) < 0) throw_errno("epoll_ctl(EPOLL_CTL_DEL)");
    conns.erase(fd);  // closes it
  };
  auto send_or_queue = [&](int fd, const char* data, std::size_t len) {
    const ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) return close_conn(fd);
    const std::size_t sent = n < 0 ? 0 : static_cast<std::size_t>(n);
    if (sent < len) {
      conns[fd].pending.assign(data + sent, len - sent);
      watch(EPOLL_CTL_MOD, fd, EPOLLOUT);
    }
  };

  while (!stop.requested()) {
    const int n = epoll_wait(ep.get(), events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd) {
        int c;
        while ((c = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          Fd owned(c);
          set_nodelay(c);
          watch(EPOLL_CTL_ADD, c, EPOLLIN);
          conns[c].fd = std::move(owned);
        }
        if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) throw_errno("accept4");
      } else if (fd == stop.fd()) {
        stop.drain();
      } else if (auto it = conns.find(fd); it != conns.end() && !it->second.pending.empty()) {
        std::string rest = std::move(it->second.pending);
        it->second.pending.clear();
        watch(EPOLL_CTL_MOD, fd, EPOLLIN);
        send_or_queue(fd, rest.data(), rest.size());
      } else if (it != conns.end()) {
        Receiver& rx = it->second.rx;
        const auto got = rx.receive(fd, framing, buf);
        if (got == Receiver::Closed) {
          close_conn(fd);
        } else if (got == Receiver::Ready) {
          if (work) work();
          send_or_queue(fd, rx.data(), rx.size());
        }
      }
    }
  }
  // The connections still open, then the epoll instance, are closed on the way out (also when a
  // syscall above threw).
}

}  // namespace netprof
