// The C++ echo backends (cpp_epoll, cpp_poll, cpp_th), exposed to Python by module.cpp.
//
// Each serve_* function takes a listening socket made by the Python side, echoes every byte on
// every accepted connection, and returns once every accepted connection has been closed by the
// peer (after at least one), or when SIGTERM/SIGINT arrives. They run without the GIL.
#pragma once

#include <cstddef>
#include <string>

namespace netprof {

constexpr std::size_t kBufSize = 65536;  // same as backends/common.py BUFSIZE

// Simulated handler work, applied once per recv() that returned data (see common.WorkModel).
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
    void wake() const;   // make fd() readable (used for "all connections closed")
    void drain() const;  // consume the wakeups
};

void set_nodelay(int fd);
void set_nonblocking(int fd);
[[noreturn]] void throw_errno(const char* what);
// send() all of data on a blocking socket; false if the connection is gone.
bool send_all(int fd, const char* data, std::size_t len);

void serve_epoll(int listen_fd, const Work& work);
void serve_poll(int listen_fd, const Work& work);
void serve_threads(int listen_fd, const Work& work);

}  // namespace netprof
