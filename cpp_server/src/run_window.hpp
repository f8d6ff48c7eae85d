// The run's timeline, one implementation for both engines (TCP and ZeroMQ): the `connected` event,
// the measurement window and its probed sub-window, their marks (each sent at the moment its boundary
// passes), the loader's own CPU over the window, and the window's fields of the final stats.
#pragma once

#include <sys/resource.h>

#include <climits>
#include <cstdint>
#include <functional>

#include "protocol.hpp"

namespace netprof {

// The window [start, stop), its probed sub-window [probe_start, probe_stop) and the guarded span
// around that [guard_start, guard_stop) (guard_start <= probe_start <= probe_stop <= guard_stop),
// monotonic ns. Unfixed (the default) it contains no instant.
struct WindowBounds {
  int64_t start = INT64_MAX, guard_start = INT64_MAX, probe_start = INT64_MAX, probe_stop = INT64_MAX,
          guard_stop = INT64_MAX, stop = INT64_MAX;
};

// The window that starts at `start` and lasts `duration_ns`, with a probed sub-window of
// probe_share × duration centred in it (share 0: empty, at the middle; share 1: the whole window),
// and guards of `guard_ns` on each side of a non-empty one, cut to the window.
WindowBounds window_bounds(int64_t start, int64_t duration_ns, double probe_share, int64_t guard_ns = 0);

// The same window cut short at t_end (a run that stops early): it ends at t_end, but never before it
// began, and the probed sub-window ends there too (empty if it had not begun).
WindowBounds cut_window(const WindowBounds& w, int64_t t_end);

constexpr int kOutside = -1;
// The phase an echo completed at `t` counts in: kOutside, kUnprobed (before the guards), kProbed,
// kGuard or kUnprobedAfter. Every instant of the window belongs to exactly one phase, so the phases'
// counts add up to the window's.
inline int phase_at(const WindowBounds& w, int64_t t) {
  if (t < w.start || t >= w.stop) return kOutside;
  if (t >= w.probe_start && t < w.probe_stop) return kProbed;
  if (t >= w.guard_start && t < w.guard_stop) return kGuard;
  return t < w.guard_start ? kUnprobed : kUnprobedAfter;
}

// How many CPUs `threads` busy threads of this process can keep busy at once: no more than the CPUs its
// affinity mask allows (the caller's mask: the loader's main thread holds the `--cpus` set). libzmq's I/O
// thread beside the loader's own, on one loader CPU, is one CPU's worth, not two.
int cpu_capacity(int threads);

class RunWindow {
 public:
  RunWindow(const RunRequest& req, const Emit& emit) : req_(req), emit_(emit) {}

  // The connect phase (begun at t0) ended at t1 with `up` connections: records setup_s in `st` and
  // sends `connected`, with the window's bounds once fix() has fixed them. False when the client is gone.
  bool connected(Stats& st, int64_t t0, int64_t t1, long up);

  // Fixes the window before the first ping: warm-up from t1, then the duration.
  void fix(int64_t t1);
  bool fixed() const { return fixed_; }
  const WindowBounds& bounds() const { return bounds_; }

  // Time of the next mark still to send (INT64_MAX when none is left).
  int64_t next_mark() const;
  // Sends every mark whose time has come, in order (a mark's `t` is its boundary, not `now`).
  // False when the client is gone.
  bool advance(int64_t now);
  bool opened() const { return opened_; }  // measure_start sent
  bool closed() const { return closed_; }  // measure_stop sent

  // Progress events (PROTOCOL.md, "Progress"), when the request asked for them: the time the next
  // one is due (INT64_MAX when none is), and sending it. `completed` counts the messages answered since
  // pinging began (the rate), `in_window` those of the window so far; call after advance(), so a
  // progress line never comes after measure_stop. False when the client is gone.
  int64_t next_progress() const { return closed_ ? INT64_MAX : next_progress_; }
  bool progress(int64_t now, uint64_t completed, uint64_t in_window);

  // The run stops early at t_end: see cut_window(). A probed sub-window that had not begun sends no
  // probe marks.
  void cut(int64_t t_end);
  // Ends the window: takes the loader's CPU times and sends (when `send`) the marks still owed to
  // pair up with those sent (probe_stop, measure_stop), at their boundaries. False when the client is gone.
  bool close(bool send);

  // The window's fields of the stats: t_start, t_stop, duration_s, warmup_s, loader_cpu (cpu_frac
  // divided by cpu_capacity(`cpu_threads`)) and the phases' boundaries and durations.
  void finish(Stats& st, int cpu_threads) const;

 private:
  int64_t warmup_ns_ = 0;  // from the connect phase's end to the window's start (fix())
  enum MarkId { kMeasureStart, kGuardStart, kProbeStart, kProbeStop, kGuardStop, kMeasureStop, kMarks };
  struct Mark {
    const char* name;
    int64_t t;
    bool wanted;  // sent at all in this run
    bool sent;
  };
  bool send(MarkId id);  // marks it sent; false when the client is gone

  const RunRequest& req_;
  const Emit& emit_;
  WindowBounds bounds_;
  bool fixed_ = false, opened_ = false, closed_ = false;
  Mark marks_[kMarks] = {{"measure_start", 0, false, false}, {"guard_start", 0, false, false},
                         {"probe_start", 0, false, false},   {"probe_stop", 0, false, false},
                         {"guard_stop", 0, false, false},    {"measure_stop", 0, false, false}};
  rusage ru0_{}, ru1_{};
  // Progress: interval, next due time, and the counts at the previous event (rates are per interval).
  int64_t progress_every_ = 0, next_progress_ = INT64_MAX, last_progress_t_ = 0;
  uint64_t last_completed_ = 0;
};

}  // namespace netprof
