#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "backends.hpp"

namespace netprof {

Work Work::parse(const std::string& kind, double us, bool poisson) {
  Work w;
  if (kind == "none")
    w.kind = None;
  else if (kind == "sleep")
    w.kind = Sleep;
  else if (kind == "spin")
    w.kind = Spin;
  else
    throw std::invalid_argument("work kind must be none, sleep or spin, not " + kind);
  w.us = us;
  w.poisson = poisson;
  return w;
}

void Work::operator()() const {
  double d = us;
  if (poisson && us > 0) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    d = std::exponential_distribution<double>(1.0 / us)(rng);
  }
  const auto dur = std::chrono::duration<double, std::micro>(d);
  if (kind == Sleep) {
    std::this_thread::sleep_for(dur);  // blocking on purpose: it stands for blocking code
  } else if (kind == Spin) {
    const auto end = std::chrono::steady_clock::now() + dur;
    while (std::chrono::steady_clock::now() < end) {
    }
  }
}

Framing Framing::parse(const std::string& framing, long long msize) {
  if (framing != "message" && framing != "stream")
    throw std::invalid_argument("framing must be message or stream, not " + framing);
  if (msize < 1 || msize > (1 << 20)) throw std::invalid_argument("msize must be 1..1048576");
  Framing f;
  f.msize = static_cast<std::size_t>(msize);
  f.stream = framing == "stream";
  return f;
}

Receiver::Status Receiver::receive(int fd, const Framing& framing, std::vector<char>& scratch) {
  if (have_ == 0 && partial_.capacity() > kBufSize) std::string().swap(partial_);  // big: give back
  char* into = have_ ? partial_.data() + have_ : scratch.data();
  const std::size_t want = have_ ? framing.msize - have_ : scratch.size();
  const ssize_t got = recv(fd, into, want, 0);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Again;
  if (got <= 0) return Closed;
  const auto n = static_cast<std::size_t>(got);
  if (have_ == 0 && (framing.stream || n == framing.msize)) {  // the common case: no copy
    data_ = into;
    size_ = n;
    return Ready;
  }
  if (have_ == 0) {
    partial_.resize(framing.msize);
    std::memcpy(partial_.data(), into, n);
  }
  have_ += n;
  if (have_ < framing.msize) return Partial;
  have_ = 0;
  data_ = partial_.data();
  size_ = framing.msize;
  return Ready;
}

namespace {
int g_wake_fd = -1;
volatile std::sig_atomic_t g_stop = 0;
struct sigaction g_old_term, g_old_int;

void on_stop_signal(int) {
  g_stop = 1;
  const std::uint64_t one = 1;
  const int saved = errno;  // a handler must not clobber the interrupted code's errno
  // Can fail only with EAGAIN (the counter is saturated: the fd is readable already), and a
  // handler could do nothing about it anyway.
  (void)!write(g_wake_fd, &one, sizeof one);
  errno = saved;
}
}  // namespace

StopSignal::StopSignal() : wake_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  g_stop = 0;
  if (!wake_) throw_errno("eventfd");
  g_wake_fd = wake_.get();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking recv/send in worker threads just continue
  if (sigaction(SIGTERM, &sa, &g_old_term) < 0) throw_errno("sigaction(SIGTERM)");
  if (sigaction(SIGINT, &sa, &g_old_int) < 0) {
    const int saved = errno;
    sigaction(SIGTERM, &g_old_term, nullptr);  // undo the first; the error to report is the second's
    errno = saved;
    throw_errno("sigaction(SIGINT)");
  }
}

StopSignal::~StopSignal() {
  // Cannot fail (valid signals, actions sigaction() returned); a destructor could not report it.
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  g_wake_fd = -1;  // the handlers are gone; wake_ closes the eventfd
}

int StopSignal::fd() const { return wake_.get(); }
bool StopSignal::requested() const { return g_stop != 0; }

void StopSignal::drain() const {
  std::uint64_t n;
  // EAGAIN: nothing to consume (a wakeup that was drained already); nothing else can fail.
  (void)!read(wake_.get(), &n, sizeof n);
}

void set_nodelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) throw_errno("setsockopt(TCP_NODELAY)");
}

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throw_errno("fcntl(O_NONBLOCK)");
}

void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

bool send_all(int fd, const char* data, std::size_t len) {
  while (len > 0) {
    const ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    len -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace netprof
