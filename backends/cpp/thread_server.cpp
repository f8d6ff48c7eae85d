// cpp_th: one std::thread per connection, blocking sockets; the calling thread accepts.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends.hpp"

namespace netprof {

namespace {

// Shared with the detached connection threads (which may outlive a return by a few instructions,
// hence shared_ptr). `live` lets a SIGTERM shut every connection down; a thread closes its fd
// under the same lock, so an fd number is never shut down after it was reused.
struct Shared {
  std::mutex m;
  std::condition_variable all_done;
  std::unordered_set<int> live;
};

void echo_connection(int fd, const Work& work, const Framing& framing) {
  std::vector<char> buf = framing.scratch();
  Receiver rx;
  for (;;) {
    const auto got = rx.receive(fd, framing, buf);  // blocking: Again only on EINTR
    if (got == Receiver::Closed) return;
    if (got != Receiver::Ready) continue;
    if (work) work();
    if (!send_all(fd, rx.data(), rx.size())) return;
  }
}

}  // namespace

void serve_threads(int listen_fd, const Work& work, const Framing& framing) {
  StopSignal stop;
  set_nonblocking(listen_fd);  // accept only after poll says so, then until EAGAIN
  auto shared = std::make_shared<Shared>();
  std::size_t accepted = 0;
  pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop.fd(), POLLIN, 0}};

  while (!stop.requested()) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll");
    }
    if (fds[1].revents) stop.drain();
    if (!(fds[0].revents & POLLIN)) continue;
    int c;
    while ((c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0) {
      Fd conn(c);  // handed to the connection's thread
      set_nodelay(c);
      std::lock_guard<std::mutex> lock(shared->m);
      try {
        std::thread([shared, conn = std::move(conn), work, framing]() mutable {
          const int fd = conn.get();
          echo_connection(fd, work, framing);
          std::lock_guard<std::mutex> lock(shared->m);
          shared->live.erase(fd);
          conn.reset();  // closed under the lock (see Shared)
          if (shared->live.empty()) shared->all_done.notify_all();
        }).detach();
      } catch (const std::system_error& e) {  // the socket went with the thread's callable: closed
        throw std::runtime_error(std::string("cpp_th: cannot start a thread for connection ") +
                                 std::to_string(accepted + 1) + ": " + e.what());
      }
      shared->live.insert(c);
      ++accepted;
    }
    if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) throw_errno("accept4");
  }
  // SIGTERM with connections still open: wake their threads (recv returns 0) and wait for them.
  std::unique_lock<std::mutex> lock(shared->m);
  // ENOTCONN (the peer reset it already) is the only failure, and that thread is ending anyway.
  for (int fd : shared->live) (void)shutdown(fd, SHUT_RDWR);
  shared->all_done.wait(lock, [&] { return shared->live.empty(); });
}

}  // namespace netprof
