// cpp_uring: one thread, one io_uring (liburing). Accept, recv and send are ring requests, not
// syscalls: each loop turn submits the new requests and waits for completions in one io_uring_enter.
#include <liburing.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "backends.hpp"

namespace netprof {

namespace {

// One request per connection is in flight at a time, and the listener's accept and the stop
// eventfd's poll are the only others: the CQ holds a completion for each of ~19k connections (the
// loader's most) without falling back on the kernel's overflow list. 65536 is the kernel's maximum.
constexpr unsigned kSqEntries = 4096;
constexpr unsigned kCqEntries = 65536;

// The ring. io_uring_queue_exit closes it: the kernel cancels what is still in flight and writes no
// more into our buffers, so it must go before the buffers do (see serve_uring's declarations).
class Ring {
 public:
  Ring() {
    io_uring_params params{};
    // A big CQ (see kCqEntries). SINGLE_ISSUER + DEFER_TASKRUN (Linux 6.1): only this thread
    // submits, and completions are run when it waits, not by interrupting it in the middle of a turn.
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    params.cq_entries = kCqEntries;
    int r = io_uring_queue_init_params(kSqEntries, &ring_, &params);
    if (r == -EINVAL) {  // an older kernel without those two flags: the plain ring works the same
      params = io_uring_params{};
      params.flags = IORING_SETUP_CQSIZE;
      params.cq_entries = kCqEntries;
      r = io_uring_queue_init_params(kSqEntries, &ring_, &params);
    }
    if (r < 0) fail(r, "io_uring_queue_init_params");
  }
  ~Ring() { io_uring_queue_exit(&ring_); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  io_uring* get() { return &ring_; }

  // The next free SQE; when the SQ is full, what is queued is submitted first to make room.
  io_uring_sqe* sqe() {
    if (io_uring_sqe* s = io_uring_get_sqe(&ring_)) return s;
    const int r = io_uring_submit(&ring_);
    if (r < 0 && r != -EINTR) fail(r, "io_uring_submit");
    if (io_uring_sqe* s = io_uring_get_sqe(&ring_)) return s;
    throw std::runtime_error("io_uring: the submission queue stays full");
  }

  // liburing returns -errno instead of setting errno.
  [[noreturn]] static void fail(int negative_errno, const char* what) {
    errno = -negative_errno;
    throw_errno(what);
  }

 private:
  io_uring ring_{};
};

// What a completion is for: user_data is (connection id << kOpBits) | Op.
enum Op : std::uint64_t { kAccept, kStop, kRecv, kSend };
constexpr unsigned kOpBits = 2;
constexpr std::uint64_t kOpMask = (1u << kOpBits) - 1;

// A connection slot. Its buffer is handed to the kernel with each request and must stay where it is
// until that request completes: it lives on the heap (a vector of slots may move the slots, not
// the buffers), and a slot is reused only after its one request in flight has completed.
struct Conn {
  Fd fd;                        // invalid: a free slot
  std::unique_ptr<char[]> buf;  // msize (message framing) or kBufSize (stream) bytes
  std::size_t have = 0;         // message framing: bytes of the current message received so far
  std::size_t len = 0;          // the bytes being echoed: buf[0, len)
  std::size_t sent = 0;         // of which the socket took these
};

}  // namespace

void serve_uring(int listen_fd, const Work& work, const Framing& framing) {
  StopSignal stop;
  // Declared before the ring, so destroyed after it: no request in flight outlives its buffer.
  std::vector<Conn> conns;
  std::vector<std::size_t> free_ids;
  Ring ring;
  const std::size_t bufsize = framing.stream ? kBufSize : framing.msize;

  auto submit = [&](Op op, std::size_t id, auto prep) {
    io_uring_sqe* sqe = ring.sqe();
    prep(sqe);
    io_uring_sqe_set_data64(sqe, (static_cast<std::uint64_t>(id) << kOpBits) | op);
  };
  // Multishot accept (Linux 5.19) stays armed across connections; an old kernel refuses it with
  // EINVAL and then gets one single-shot accept per connection.
  bool multishot = true;
  auto arm_accept = [&] {
    submit(kAccept, 0, [&](io_uring_sqe* s) {
      // No SOCK_NONBLOCK: the ring never blocks on a socket (it tries without waiting, then polls).
      if (multishot)
        io_uring_prep_multishot_accept(s, listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      else
        io_uring_prep_accept(s, listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    });
  };
  // Wakes the wait below when SIGTERM/SIGINT arrives (the signal alone may just restart it).
  auto arm_stop = [&] { submit(kStop, 0, [&](io_uring_sqe* s) { io_uring_prep_poll_add(s, stop.fd(), POLLIN); }); };
  // As Receiver does: under message framing ask for exactly what completes the current message
  // (recv(msize - have)), so one receive never takes bytes of the next message; else up to kBufSize.
  auto arm_recv = [&](std::size_t id) {
    Conn& c = conns[id];
    const std::size_t want = framing.stream ? kBufSize : framing.msize - c.have;
    submit(kRecv, id, [&](io_uring_sqe* s) { io_uring_prep_recv(s, c.fd.get(), c.buf.get() + c.have, want, 0); });
  };
  // The rest of buf[0, len); the next receive is submitted only once all of it went, so a peer that
  // does not read cannot make us buffer without bound.
  auto arm_send = [&](std::size_t id) {
    Conn& c = conns[id];
    submit(kSend, id, [&](io_uring_sqe* s) {
      io_uring_prep_send(s, c.fd.get(), c.buf.get() + c.sent, c.len - c.sent, MSG_NOSIGNAL);
    });
  };
  auto echo = [&](std::size_t id, std::size_t len) {
    if (work) work();
    conns[id].len = len;
    conns[id].sent = 0;
    arm_send(id);
  };
  auto close_conn = [&](std::size_t id) {
    conns[id].fd.reset();  // its one request has completed: nothing in flight refers to it
    conns[id].have = 0;
    free_ids.push_back(id);
  };
  auto open_conn = [&](int fd) {
    Fd owned(fd);
    set_nodelay(fd);
    std::size_t id;
    if (!free_ids.empty()) {
      id = free_ids.back();
      free_ids.pop_back();
    } else {
      id = conns.size();
      conns.emplace_back();
      // new char[]: not zeroed, so a stream buffer's untouched pages cost no memory
      conns[id].buf.reset(new char[bufsize]);
    }
    conns[id].fd = std::move(owned);
    arm_recv(id);
  };

  arm_accept();
  arm_stop();
  while (!stop.requested()) {
    // Submits what the last turn queued and waits for at least one completion: one syscall.
    const int r = io_uring_submit_and_wait(ring.get(), 1);
    // EINTR: a signal (the stop poll completes too); EBUSY/EAGAIN: completions to reap first.
    if (r < 0 && r != -EINTR && r != -EBUSY && r != -EAGAIN) Ring::fail(r, "io_uring_submit_and_wait");
    unsigned head, seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(ring.get(), head, cqe) {
      ++seen;
      const std::uint64_t data = io_uring_cqe_get_data64(cqe);
      const auto op = static_cast<Op>(data & kOpMask);
      const std::size_t id = data >> kOpBits;
      const int res = cqe->res;
      if (op == kAccept) {
        if (res >= 0) open_conn(res);
        if (res == -EINVAL && multishot) {
          multishot = false;
        } else if (res < 0 && res != -ECONNABORTED && res != -EINTR && res != -EAGAIN) {
          Ring::fail(res, "io_uring accept");  // as cpp_epoll's accept4: EMFILE and the like end the run
        }
        if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept();  // a multishot accept ended, or a single one
      } else if (op == kStop) {
        stop.drain();
        if (!stop.requested()) arm_stop();
      } else if (op == kRecv) {
        Conn& c = conns[id];
        if (res <= 0) {  // EOF or an error (ECONNRESET)
          close_conn(id);
        } else if (framing.stream) {
          echo(id, static_cast<std::size_t>(res));  // work once per receive that returned data
        } else if ((c.have += static_cast<std::size_t>(res)) < framing.msize) {
          arm_recv(id);  // the message is not complete yet
        } else {
          c.have = 0;
          echo(id, framing.msize);  // work once per whole message
        }
      } else {  // kSend
        Conn& c = conns[id];
        if (res < 0) {  // EPIPE, ECONNRESET: the peer is gone
          close_conn(id);
        } else if ((c.sent += static_cast<std::size_t>(res)) < c.len) {
          arm_send(id);  // a short send: the rest
        } else {
          arm_recv(id);
        }
      }
    }
    io_uring_cq_advance(ring.get(), seen);
  }
  // The ring goes first (cancelling what is in flight), then the connections still open.
}

}  // namespace netprof
