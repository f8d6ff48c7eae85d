// cpp_poll: one thread, poll() over a pollfd array rebuilt only when connections come and go.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "backends.hpp"

namespace netprof {

void serve_poll(int listen_fd, const Work& work, const Framing& framing) {
  StopSignal stop;
  set_nonblocking(listen_fd);
  // fds[0] the listener, fds[1] the stop eventfd, then one entry per connection; pending[i] is
  // what connection fds[i] did not take yet (it then waits for POLLOUT instead of POLLIN), rx[i]
  // its receive side, owned[i] its socket (the first two belong to the caller and to `stop`).
  std::vector<pollfd> fds{{listen_fd, POLLIN, 0}, {stop.fd(), POLLIN, 0}};
  std::vector<std::string> pending(2);
  std::vector<Receiver> rx(2);
  std::vector<Fd> owned(2);
  constexpr std::size_t kFirstConn = 2;
  std::vector<char> buf = framing.scratch();

  auto send_or_queue = [&](std::size_t i, const char* data, std::size_t len) {
    const ssize_t n = send(fds[i].fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) {
      owned[i].reset();
      fds[i].fd = -1;  // removed after this round
      return;
    }
    const std::size_t sent = n < 0 ? 0 : static_cast<std::size_t>(n);
    if (sent < len) {
      pending[i].assign(data + sent, len - sent);
      fds[i].events = POLLOUT;
    }
  };

  while (!stop.requested()) {
    const int n = poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll");
    }
    const std::size_t polled = fds.size();  // connections accepted below wait for next round
    for (std::size_t i = kFirstConn; i < polled; ++i) {
      if (!fds[i].revents) continue;
      if (!pending[i].empty()) {
        std::string rest = std::move(pending[i]);
        pending[i].clear();
        fds[i].events = POLLIN;
        send_or_queue(i, rest.data(), rest.size());
        continue;
      }
      const auto got = rx[i].receive(fds[i].fd, framing, buf);
      if (got == Receiver::Closed) {
        owned[i].reset();
        fds[i].fd = -1;
      } else if (got == Receiver::Ready) {
        if (work) work();
        send_or_queue(i, rx[i].data(), rx[i].size());
      }
    }
    // Drop closed connections: move the last entry into each hole.
    for (std::size_t i = kFirstConn; i < fds.size();) {
      if (fds[i].fd >= 0) {
        ++i;
        continue;
      }
      fds[i] = fds.back();
      pending[i] = std::move(pending.back());
      rx[i] = std::move(rx.back());
      owned[i] = std::move(owned.back());
      fds.pop_back();
      pending.pop_back();
      rx.pop_back();
      owned.pop_back();
    }
    if (fds[1].revents) stop.drain();
    if (fds[0].revents & POLLIN) {
      int c;
      while ((c = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        Fd conn(c);
        set_nodelay(c);
        fds.push_back({c, POLLIN, 0});
        pending.emplace_back();
        rx.emplace_back();
        owned.push_back(std::move(conn));
      }
      if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) throw_errno("accept4");
    }
  }
  // The connections still open are closed on the way out (`owned`; also when a syscall above threw).
}

}  // namespace netprof
