// Control mode: serve JSON-lines requests on a TCP socket, one run at a time, until a signal.
#pragma once

#include <netinet/in.h>

#include "engine.hpp"

namespace netprof {

// Returns the process exit code. Prints "control host:port" on stdout once listening.
int serve_control(const sockaddr_in& bind_addr, const EngineConfig& cfg, int signal_fd);

// Writes one JSON line to a (possibly non-blocking) socket; false when the peer is gone or stuck.
bool write_line(int fd, const json& obj);

}  // namespace netprof
