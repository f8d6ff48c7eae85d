// Control mode: serve JSON-lines requests on the private channel the parent passed (--control-fd),
// one after the other, until the parent closes it (EOF) or a signal arrives.
#pragma once

#include "engine.hpp"
#include "netprof/fd.hpp"

namespace netprof {

// Returns the process exit code (0 when the parent hung up or a signal stopped the loader).
int serve_control(Fd channel, const EngineConfig& cfg, int signal_fd);

// Checks that `fd` can be the control channel (an open stream socket) and makes it non-blocking and
// close-on-exec. False with a reason otherwise.
bool prepare_channel(int fd, std::string* why);

// Writes one JSON line to a (possibly non-blocking) socket; false when the peer is gone or stuck.
bool write_line(int fd, const json& obj);

}  // namespace netprof
