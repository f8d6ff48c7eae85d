// The load engine: opens the connections, plays ping-pong on worker threads, measures the window.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "protocol.hpp"

namespace netprof {

struct EngineConfig {
  int threads = 1;
  std::vector<int> cpus;  // worker i is pinned to cpus[i % size]; empty = no pinning
};

// What the coordinator watches besides the workers: the control client (EOF = abort) and a signalfd.
struct Watch {
  int client_fd = -1;                 // -1: none (one-shot mode)
  std::string* client_input = nullptr;  // bytes the client sent mid-run are kept here
  int signal_fd = -1;
};

// Reads whatever the control client sent mid-run (kept in w.client_input for after the run);
// false when it hung up (EOF or error): the run is then aborted. Both engines use it.
bool client_still_there(const Watch& w);

struct RunOutcome {
  Stats stats;
  const char* error_kind = nullptr;  // null when the run completed
  std::string error_message;
  bool client_gone = false;  // the control client disconnected: nobody to report to
  bool signalled = false;    // SIGTERM/SIGINT: the loader is shutting down
};

// Descriptors a run needs beyond one per connection (epoll, eventfds, control sockets, stdio).
constexpr int kFdReserve = 64;

// False (with a message naming the limit and the fix) when `connections` cannot fit under
// RLIMIT_NOFILE.
bool check_fd_limit(int connections, std::string* why);

// Runs one load. `emit` sends accepted, connected, measure_start and measure_stop as they happen
// (returns false when the client is gone); the caller sends result and error from the outcome.
RunOutcome run_load(const RunRequest& req, const EngineConfig& cfg, const std::function<bool(const json&)>& emit,
                    const Watch& watch);

}  // namespace netprof
