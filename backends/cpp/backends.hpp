// The C++ echo backends (cpp_epoll, cpp_poll, cpp_th, cpp_uring), exposed to Python by module.cpp.
//
// Each serve_* function takes a listening socket made by the Python side, echoes on every accepted
// connection under a Framing, and returns when SIGTERM/SIGINT arrives (never because its
// connections came and went). They run without the GIL.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "netprof/fd.hpp"

namespace netprof {

constexpr std::size_t kBufSize = 65536;  // same as backends/common.py BUFSIZE

// Simulated handler work, applied once per whole message under message framing, once per recv()
// that returned data under stream framing (see common.WorkModel).
struct Work {
  enum Kind { None, Sleep, Spin } kind = None;
  double us = 0;         // duration, or mean duration when poisson
  bool poisson = false;  // draw each duration from an exponential distribution
  static Work parse(const std::string& kind, double us, bool poisson);
  void operator()() const;
  explicit operator bool() const { return kind != None; }
};

// While alive: SIGTERM and SIGINT set a flag and wake fd(), an eventfd the serving loop polls.
// Restores the previous handlers when destroyed. One at a time per process.
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  int fd() const;
  bool requested() const;
  void drain() const;  // consume the wakeups

 private:
  Fd wake_;  // the eventfd; the signal handler reaches it through a global copy of its number
};

// --msize / --framing (see common.Framer). Message framing: each recv() asks for the bytes that
// complete the current message and whole messages are echoed. Stream: read up to kBufSize, echo it.
struct Framing {
  std::size_t msize = 64;
  bool stream = false;
  static Framing parse(const std::string& framing, long long msize);
  // The buffer a Receiver reads a new message (or a stream chunk) into: one per serving thread.
  std::vector<char> scratch() const { return std::vector<char>(stream ? kBufSize : msize); }
};

// The receive side of one connection: one recv() per call (level-triggered loops call it once
// per readiness event; the next wait reports the rest). A message that arrives in one recv() is
// handed out from the scratch buffer without a copy; a partial one is kept here until complete.
class Receiver {
 public:
  enum Status { Ready, Partial, Again, Closed };
  // Ready: data()/size() are what to work() for and echo, valid until the next call.
  // Partial: the message is not complete yet. Again: EAGAIN or EINTR. Closed: EOF or an error.
  Status receive(int fd, const Framing& framing, std::vector<char>& scratch);
  const char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::string partial_;  // sized msize while a message is under way
  std::size_t have_ = 0;
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

void set_nodelay(int fd);
void set_nonblocking(int fd);
[[noreturn]] void throw_errno(const char* what);
// send() all of data on a blocking socket; false if the connection is gone.
bool send_all(int fd, const char* data, std::size_t len);

void serve_epoll(int listen_fd, const Work& work, const Framing& framing);
void serve_poll(int listen_fd, const Work& work, const Framing& framing);
void serve_threads(int listen_fd, const Work& work, const Framing& framing);
// io_uring (liburing): one RECV and one SEND request per message, no recv/send syscalls.
void serve_uring(int listen_fd, const Work& work, const Framing& framing);

}  // namespace netprof
