#include "run_window.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>

#include "clock.hpp"

namespace netprof {

namespace {
double tv_s(const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; }

rusage self_rusage() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) ru = rusage{};  // cannot fail for RUSAGE_SELF; zeros if it does
  return ru;
}
}  // namespace

int cpu_capacity(int threads) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : threads;  // unknown: as many
  return std::max(1, std::min(threads, cpus));
}

WindowBounds window_bounds(int64_t start, int64_t duration_ns, double probe_share, int64_t guard_ns) {
  duration_ns = std::max<int64_t>(0, duration_ns);
  probe_share = std::min(1.0, std::max(0.0, probe_share));
  int64_t probed = std::min(duration_ns, int64_t(std::llround(double(duration_ns) * probe_share)));
  WindowBounds w;
  w.start = start;
  w.stop = start + duration_ns;
  w.probe_start = start + (duration_ns - probed) / 2;
  w.probe_stop = w.probe_start + probed;
  const int64_t guard = probed > 0 ? std::max<int64_t>(0, guard_ns) : 0;
  w.guard_start = std::max(w.start, w.probe_start - guard);
  w.guard_stop = std::min(w.stop, w.probe_stop + guard);
  return w;
}

WindowBounds cut_window(const WindowBounds& w, int64_t t_end) {
  WindowBounds c = w;
  c.stop = std::max(std::min(t_end, w.stop), w.start);
  c.guard_start = std::min(w.guard_start, c.stop);
  c.probe_start = std::min(w.probe_start, c.stop);
  c.probe_stop = std::max(std::min(w.probe_stop, c.stop), c.probe_start);
  c.guard_stop = std::max(std::min(w.guard_stop, c.stop), c.probe_stop);
  return c;
}

bool RunWindow::connected(Stats& st, int64_t t0, int64_t t1, long up) {
  st.setup_s = ns_to_s(t1 - t0);
  json ev = event_at("connected", ns_to_s(t1));
  ev["connected"] = up;
  ev["failed"] = req_.connections - up;
  ev["setup_s"] = std::round(st.setup_s * 1e6) / 1e6;
  if (fixed_) {
    // The window's bounds, announced before it opens (PROTOCOL.md, "Events"): a profiler can gate its probes
    // on them in the kernel, exact whenever it hears the marks.
    ev["t_start"] = r6(ns_to_s(bounds_.start));
    ev["t_stop"] = r6(ns_to_s(bounds_.stop));
    if (marks_[kProbeStart].wanted)
      ev["phases"] = {
          {"probed", {{"t_start", r6(ns_to_s(bounds_.probe_start))}, {"t_stop", r6(ns_to_s(bounds_.probe_stop))}}}};
  }
  return emit_(ev);
}

void RunWindow::fix(int64_t t1) {
  int64_t start = std::max(t1 + s_to_ns(req_.warmup), req_.start_at > 0 ? s_to_ns(req_.start_at) : 0);
  warmup_ns_ = start - t1;
  // Probe marks only when the client asked for phases, and none when nothing is probed; guard marks
  // only when it asked for guards too.
  const bool probes = req_.probe_share_given && req_.probe_share > 0;
  const bool guards = probes && req_.probe_guard > 0;
  bounds_ = window_bounds(start, s_to_ns(req_.duration), req_.probe_share, guards ? s_to_ns(req_.probe_guard) : 0);
  fixed_ = true;
  marks_[kMeasureStart] = {"measure_start", bounds_.start, true, false};
  marks_[kGuardStart] = {"guard_start", bounds_.guard_start, guards, false};
  marks_[kProbeStart] = {"probe_start", bounds_.probe_start, probes, false};
  marks_[kProbeStop] = {"probe_stop", bounds_.probe_stop, probes, false};
  marks_[kGuardStop] = {"guard_stop", bounds_.guard_stop, guards, false};
  marks_[kMeasureStop] = {"measure_stop", bounds_.stop, true, false};
  if (req_.progress > 0) {
    progress_every_ = std::max<int64_t>(1, s_to_ns(req_.progress));
    next_progress_ = t1 + progress_every_;
    last_progress_t_ = t1;
  }
}

bool RunWindow::progress(int64_t now, uint64_t completed, uint64_t in_window) {
  if (closed_ || now < next_progress_) return true;
  // The rate of every answer since the previous event: inside the window that is the window's messages,
  // and across measure_start it spans both, never a sliver of an interval.
  const double dt = ns_to_s(now - last_progress_t_);
  const double rate = dt > 0 && completed >= last_completed_ ? double(completed - last_completed_) / dt : 0;
  json ev = event_at("progress", ns_to_s(now));
  ev["phase"] = opened_ ? "measure" : "warmup";
  ev["messages"] = opened_ ? in_window : 0;
  ev["msgs_per_sec"] = std::round(rate * 10) / 10;
  last_progress_t_ = now;
  last_completed_ = completed;
  // The next one on the interval's grid (a late wake-up skips the slots it missed).
  next_progress_ += progress_every_ * ((now - next_progress_) / progress_every_ + 1);
  return emit_(ev);
}

int64_t RunWindow::next_mark() const {
  if (!fixed_) return INT64_MAX;
  for (const Mark& m : marks_)
    if (m.wanted && !m.sent) return m.t;
  return INT64_MAX;
}

bool RunWindow::send(MarkId id) {
  Mark& m = marks_[id];
  m.sent = true;
  if (id == kMeasureStart) {
    ru0_ = self_rusage();
    opened_ = true;
  } else if (id == kMeasureStop) {
    ru1_ = self_rusage();
    closed_ = true;
  }
  return emit_(event_at(m.name, ns_to_s(m.t)));
}

bool RunWindow::advance(int64_t now) {
  if (!fixed_) return true;
  for (int id = 0; id < kMarks; id++) {
    Mark& m = marks_[id];
    if (!m.wanted || m.sent) continue;
    if (m.t > now) break;  // marks are in time order
    if (!send(MarkId(id))) return false;
  }
  return true;
}

void RunWindow::cut(int64_t t_end) {
  if (!fixed_ || closed_) return;
  bounds_ = cut_window(bounds_, t_end);
  marks_[kMeasureStop].t = bounds_.stop;
  if (!marks_[kProbeStart].sent) {
    marks_[kProbeStart].t = bounds_.probe_start;
    // Not begun: nothing was probed (and the sub-window is empty unless we woke late for it).
    if (bounds_.probe_start == bounds_.probe_stop) marks_[kProbeStart].wanted = marks_[kProbeStop].wanted = false;
  }
  if (!marks_[kProbeStop].sent) marks_[kProbeStop].t = bounds_.probe_stop;
  if (!marks_[kGuardStart].sent) {
    marks_[kGuardStart].t = bounds_.guard_start;
    if (bounds_.guard_start == bounds_.guard_stop) marks_[kGuardStart].wanted = marks_[kGuardStop].wanted = false;
  }
  if (!marks_[kGuardStop].sent) marks_[kGuardStop].t = bounds_.guard_stop;
}

bool RunWindow::close(bool send_owed) {
  if (!opened_ || closed_) return true;
  bool ok = true;
  for (int id = kGuardStart; id < kMarks; id++) {
    Mark& m = marks_[id];
    if (!m.wanted || m.sent) continue;
    if (send_owed && ok) {
      ok = send(MarkId(id));
    } else {
      m.sent = true;
      if (id == kMeasureStop) {
        ru1_ = self_rusage();
        closed_ = true;
      }
    }
  }
  return ok;
}

void RunWindow::finish(Stats& st, int cpu_threads) const {
  st.warmup_s = fixed_ ? (req_.start_at > 0 ? ns_to_s(warmup_ns_) : req_.warmup) : 0;
  st.has_phases = req_.probe_share_given;
  st.probe_share = req_.probe_share;
  st.probe_guard = req_.probe_guard;
  if (!opened_) return;
  st.t_start = ns_to_s(bounds_.start);
  st.t_stop = ns_to_s(bounds_.stop);
  st.duration_s = ns_to_s(bounds_.stop - bounds_.start);
  st.probe_t_start = ns_to_s(bounds_.probe_start);
  st.probe_t_stop = ns_to_s(bounds_.probe_stop);
  st.guard_t_start = ns_to_s(bounds_.guard_start);
  st.guard_t_stop = ns_to_s(bounds_.guard_stop);
  st.phases[kProbed].duration_s = ns_to_s(bounds_.probe_stop - bounds_.probe_start);
  st.phases[kGuard].duration_s =
      ns_to_s((bounds_.probe_start - bounds_.guard_start) + (bounds_.guard_stop - bounds_.probe_stop));
  st.phases[kUnprobed].duration_s = ns_to_s(bounds_.guard_start - bounds_.start);
  st.phases[kUnprobedAfter].duration_s = ns_to_s(bounds_.stop - bounds_.guard_stop);
  if (closed_) {
    st.user_s = tv_s(ru1_.ru_utime) - tv_s(ru0_.ru_utime);
    st.sys_s = tv_s(ru1_.ru_stime) - tv_s(ru0_.ru_stime);
  }
  st.cpu_frac = st.duration_s > 0 ? (st.user_s + st.sys_s) / (st.duration_s * cpu_capacity(cpu_threads)) : 0;
}

}  // namespace netprof
