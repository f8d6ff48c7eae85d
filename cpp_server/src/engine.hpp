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
  int client_fd = -1;                   // -1: none (one-shot mode)
  std::string* client_input = nullptr;  // bytes the client sent mid-run are kept here
  int signal_fd = -1;
};

// Reads whatever the control client sent mid-run (kept in w.client_input for after the run, except an
// `abort` request, which is taken out). Both engines call it when the client's fd is readable.
// Gone: EOF or error; Abort: it sent {"cmd":"abort"}; Release: {"cmd":"release"} (the end of a hold)
enum class ClientPoll { Here, Gone, Abort, Release };
ClientPoll poll_client(const Watch& w);

// Reads one signal from a (non-blocking) signalfd; false when none was pending.
bool take_signal(int signal_fd);

struct RunOutcome {
  Stats stats;
  const char* error_kind = nullptr;  // null when the run completed
  std::string error_message;
  bool client_gone = false;  // the control client disconnected: nobody to report to
  bool signalled = false;    // SIGTERM/SIGINT: the loader is shutting down
};

// Turns the client's poll result into the outcome; false when the run must stop.
bool client_ok(ClientPoll poll, RunOutcome& out);

// Records a failure of the run unless one is recorded already: the first failure is the reason,
// later ones are its consequences.
void fail_run(RunOutcome& out, const char* kind, std::string msg);

// Runs an engine's play (connect phase, warm-up and window) and turns an exception into the
// outcome's failure. Returns what play returned (true: no connection could be made), false on an
// exception.
bool play_guarded(RunOutcome& out, const std::function<bool()>& play);

class RunWindow;

// Ends a run's window the same way in both engines: an aborted run (error, client gone, signal) is
// cut short now (`on_cut` runs after the cut), and the window is always closed, also on abort, so
// the profiler's snapshots pair up. Returns whether the run aborted.
bool end_window(RunWindow& window, RunOutcome& out, const std::function<void()>& on_cut = {});

// Descriptors a run needs beyond one per connection (epoll, eventfds, control sockets, stdio).
constexpr int kFdReserve = 64;

// False (with a message naming the limit and the fix) when `connections` cannot fit under
// RLIMIT_NOFILE.
bool check_fd_limit(int connections, std::string* why, const char* what = "connections");
// The same for a run: its connections, or under open load with connections as needed its max_connections.
bool check_fd_limit(const RunRequest& r, std::string* why);

// Runs one load. `emit` sends accepted, connected, measure_start and measure_stop as they happen
// (returns false when the client is gone); the caller sends result and error from the outcome.
RunOutcome run_load(const RunRequest& req, const EngineConfig& cfg, const Emit& emit, const Watch& watch);

}  // namespace netprof
