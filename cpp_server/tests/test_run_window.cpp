#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <vector>

#include "request_helpers.hpp"
#include "run_window.hpp"

using namespace netprof;

namespace {
constexpr int64_t kS = 1'000'000'000;

RunRequest request(double duration, double warmup, double share, bool given) {
  RunRequest r;
  r.connections = 3;
  r.duration = duration;
  r.warmup = warmup;
  r.probe_share = share;
  r.probe_share_given = given;
  return r;
}

struct Recorder {
  std::vector<json> events;
  bool ok = true;
  Emit emit() {
    return [this](const json& e) {
      events.push_back(e);
      return ok;
    };
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (auto& e : events) n.push_back(e["event"]);
    return n;
  }
};
}  // namespace

TEST(WindowBounds, CentredProbedSubWindow) {
  WindowBounds w = window_bounds(100 * kS, 10 * kS, 0.3);
  EXPECT_EQ(w.start, 100 * kS);
  EXPECT_EQ(w.stop, 110 * kS);
  EXPECT_EQ(w.probe_start, 103'500'000'000);
  EXPECT_EQ(w.probe_stop, 106'500'000'000);
  WindowBounds all = window_bounds(5, 1000, 1.0);
  EXPECT_EQ(all.probe_start, 5);
  EXPECT_EQ(all.probe_stop, 1005);
  WindowBounds none = window_bounds(5, 1000, 0.0);
  EXPECT_EQ(none.probe_start, 505);
  EXPECT_EQ(none.probe_stop, 505);
  WindowBounds odd = window_bounds(0, 7, 0.5);  // 4 of 7 ns probed, [1, 5)
  EXPECT_EQ(odd.probe_stop - odd.probe_start, 4);
  EXPECT_GE(odd.probe_start, odd.start);
  EXPECT_LE(odd.probe_stop, odd.stop);
}

TEST(WindowBounds, EveryInstantInExactlyOnePhase) {
  WindowBounds w = window_bounds(1000, 100, 0.3);  // probed [1035, 1065)
  EXPECT_EQ(phase_at(w, 999), kOutside);
  EXPECT_EQ(phase_at(w, 1000), kUnprobed);
  EXPECT_EQ(phase_at(w, 1034), kUnprobed);
  EXPECT_EQ(phase_at(w, 1035), kProbed);
  EXPECT_EQ(phase_at(w, 1064), kProbed);
  EXPECT_EQ(phase_at(w, 1065), kUnprobedAfter);
  EXPECT_EQ(phase_at(w, 1099), kUnprobedAfter);
  EXPECT_EQ(phase_at(w, 1100), kOutside);
  int counts[kPhases] = {0, 0, 0, 0};
  for (int64_t t = 900; t < 1200; t++)
    if (int p = phase_at(w, t); p != kOutside) counts[p]++;
  EXPECT_EQ(counts[kProbed], 30);
  EXPECT_EQ(counts[kUnprobed], 35);
  EXPECT_EQ(counts[kUnprobedAfter], 35);
  EXPECT_EQ(counts[kGuard], 0);
  EXPECT_EQ(phase_at(WindowBounds{}, 0), kOutside);  // unfixed: contains nothing
  // Nothing probed: the unprobed window's halves
  EXPECT_EQ(phase_at(window_bounds(0, 100, 0.0), 49), kUnprobed);
  EXPECT_EQ(phase_at(window_bounds(0, 100, 0.0), 50), kUnprobedAfter);
}

TEST(WindowBounds, CutShortensBothWindows) {
  WindowBounds w = window_bounds(1000, 100, 0.3);  // probed [1035, 1065)
  WindowBounds mid = cut_window(w, 1050);
  EXPECT_EQ(mid.stop, 1050);
  EXPECT_EQ(mid.probe_start, 1035);
  EXPECT_EQ(mid.probe_stop, 1050);
  WindowBounds before = cut_window(w, 1010);  // the probed part had not begun: empty
  EXPECT_EQ(before.stop, 1010);
  EXPECT_EQ(before.probe_start, before.probe_stop);
  WindowBounds after = cut_window(w, 1080);
  EXPECT_EQ(after.probe_start, 1035);
  EXPECT_EQ(after.probe_stop, 1065);
  EXPECT_EQ(after.stop, 1080);
  WindowBounds early = cut_window(w, 500);  // before the window: empty at its start
  EXPECT_EQ(early.stop, 1000);
  EXPECT_EQ(early.probe_stop - early.probe_start, 0);
  WindowBounds late = cut_window(w, 5000);  // after it: unchanged
  EXPECT_EQ(late.stop, 1100);
}

TEST(WindowBounds, GuardsAroundTheProbedSubWindowCountInNeitherPhase) {
  WindowBounds w = window_bounds(1000, 100, 0.3, 10);  // guards [1025, 1035) and [1065, 1075)
  EXPECT_EQ(w.guard_start, 1025);
  EXPECT_EQ(w.guard_stop, 1075);
  EXPECT_EQ(phase_at(w, 1024), kUnprobed);
  EXPECT_EQ(phase_at(w, 1025), kGuard);
  EXPECT_EQ(phase_at(w, 1034), kGuard);
  EXPECT_EQ(phase_at(w, 1035), kProbed);
  EXPECT_EQ(phase_at(w, 1065), kGuard);
  EXPECT_EQ(phase_at(w, 1074), kGuard);
  EXPECT_EQ(phase_at(w, 1075), kUnprobedAfter);
  int counts[kPhases] = {0, 0, 0, 0};
  for (int64_t t = 900; t < 1200; t++)
    if (int p = phase_at(w, t); p != kOutside) counts[p]++;
  EXPECT_EQ(counts[kProbed], 30);
  EXPECT_EQ(counts[kGuard], 20);
  EXPECT_EQ(counts[kUnprobed], 25);
  EXPECT_EQ(counts[kUnprobedAfter], 25);
  WindowBounds wide = window_bounds(1000, 100, 0.3, 50);  // cut to the window
  EXPECT_EQ(wide.guard_start, 1000);
  EXPECT_EQ(wide.guard_stop, 1100);
  WindowBounds none = window_bounds(1000, 100, 0.0, 10);  // nothing probed: nothing to guard
  EXPECT_EQ(none.guard_start, none.guard_stop);
  EXPECT_EQ(phase_at(none, 1050), kUnprobedAfter);
  WindowBounds plain = window_bounds(1000, 100, 0.3);  // no guard: empty guards at the probed edges
  EXPECT_EQ(plain.guard_start, plain.probe_start);
  EXPECT_EQ(plain.guard_stop, plain.probe_stop);
  WindowBounds cut = cut_window(w, 1030);  // inside the first guard
  EXPECT_EQ(cut.guard_start, 1025);
  EXPECT_EQ(cut.probe_start, 1030);
  EXPECT_EQ(cut.probe_stop, 1030);
  EXPECT_EQ(cut.guard_stop, 1030);
  WindowBounds cut2 = cut_window(w, 1070);  // inside the second guard
  EXPECT_EQ(cut2.probe_stop, 1065);
  EXPECT_EQ(cut2.guard_stop, 1070);
}

TEST(RunWindow, GuardMarksAroundTheProbeMarks) {
  RunRequest r = request(1.0, 0, 0.4, true);  // probed [0.3, 0.7) s
  r.probe_guard = 0.1;
  {
    Recorder rec;
    Emit emit = rec.emit();
    RunWindow win(r, emit);
    win.fix(10 * kS);
    EXPECT_TRUE(win.advance(20 * kS));
    EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "guard_start", "probe_start", "probe_stop",
                                                     "guard_stop", "measure_stop"}));
    EXPECT_DOUBLE_EQ(rec.events[1]["t"].get<double>(), 10.2);
    EXPECT_DOUBLE_EQ(rec.events[4]["t"].get<double>(), 10.8);
    Stats st;
    win.finish(st, 1);
    EXPECT_NEAR(st.phases[kProbed].duration_s, 0.4, 1e-9);
    EXPECT_NEAR(st.phases[kGuard].duration_s, 0.2, 1e-9);
    EXPECT_NEAR(st.phases[kUnprobed].duration_s, 0.2, 1e-9);
    EXPECT_NEAR(st.phases[kUnprobedAfter].duration_s, 0.2, 1e-9);
    EXPECT_NEAR(st.unprobed().duration_s, 0.4, 1e-9);
    EXPECT_NEAR(st.guard_t_start, 10.2, 1e-9);
    EXPECT_NEAR(st.guard_t_stop, 10.8, 1e-9);
    json j = stats_json(st);
    EXPECT_DOUBLE_EQ(j["probe_guard"].get<double>(), 0.1);
    EXPECT_NEAR(j["phases"]["guard"]["duration_s"].get<double>(), 0.2, 1e-6);
  }
  {
    Recorder rec;  // aborted in the first guard: the probes never ran, the guard is closed
    Emit emit = rec.emit();
    RunWindow win(r, emit);
    win.fix(0);
    win.advance(kS / 4);
    win.cut(kS / 4);
    EXPECT_TRUE(win.close(true));
    EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "guard_start", "guard_stop", "measure_stop"}));
  }
  {
    RunRequest plain = request(1.0, 0, 0.4, true);  // no guard asked: the two-phase events and stats
    Recorder rec;
    Emit emit = rec.emit();
    RunWindow win(plain, emit);
    win.fix(0);
    win.advance(INT64_MAX);
    EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "probe_start", "probe_stop", "measure_stop"}));
    Stats st;
    win.finish(st, 1);
    EXPECT_FALSE(stats_json(st)["phases"].contains("guard"));
  }
}

TEST(RunWindow, MarksInOrderWithTheirBoundaries) {
  RunRequest r = request(1.0, 0.5, 0.4, true);
  Recorder rec;
  Emit emit = rec.emit();
  RunWindow win(r, emit);
  win.fix(10 * kS);
  EXPECT_EQ(win.next_mark(), 10'500'000'000);
  EXPECT_TRUE(win.advance(10 * kS));
  EXPECT_TRUE(rec.events.empty());
  EXPECT_TRUE(win.advance(10'600'000'000));  // measure_start only
  EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start"}));
  EXPECT_EQ(win.next_mark(), 10'800'000'000);
  EXPECT_TRUE(win.advance(20 * kS));  // woke late: the rest in order, each at its boundary
  EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "probe_start", "probe_stop", "measure_stop"}));
  EXPECT_DOUBLE_EQ(rec.events[1]["t"].get<double>(), 10.8);
  EXPECT_DOUBLE_EQ(rec.events[2]["t"].get<double>(), 11.2);
  EXPECT_DOUBLE_EQ(rec.events[3]["t"].get<double>(), 11.5);
  EXPECT_TRUE(win.closed());
  EXPECT_EQ(win.next_mark(), INT64_MAX);
  Stats st;
  win.finish(st, 1);
  EXPECT_TRUE(st.has_phases);
  EXPECT_NEAR(st.duration_s, 1.0, 1e-9);
  EXPECT_NEAR(st.phases[kProbed].duration_s, 0.4, 1e-9);
  EXPECT_NEAR(st.unprobed().duration_s, 0.6, 1e-9);
  EXPECT_NEAR(st.probe_t_start, 10.8, 1e-9);
}

TEST(RunWindow, ShareAbsentZeroAndOne) {
  auto names_for = [](const RunRequest& r) {
    Recorder rec;
    Emit emit = rec.emit();
    RunWindow win(r, emit);
    win.fix(0);
    win.advance(INT64_MAX);
    return rec.names();
  };
  std::vector<std::string> plain{"measure_start", "measure_stop"};
  EXPECT_EQ(names_for(request(1, 0, 1.0, false)), plain);  // absent: today's events
  EXPECT_EQ(names_for(request(1, 0, 0.0, true)), plain);   // 0: nothing probed, no probe events
  EXPECT_EQ(names_for(request(1, 0, 1.0, true)),
            std::vector<std::string>({"measure_start", "probe_start", "probe_stop", "measure_stop"}));
  Recorder rec;
  Emit emit = rec.emit();
  RunRequest r = request(2, 0, 1.0, true);
  RunWindow win(r, emit);
  win.fix(kS);
  win.advance(kS);  // share 1: probe_start comes with measure_start, at the same t
  EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "probe_start"}));
  EXPECT_EQ(rec.events[0]["t"], rec.events[1]["t"]);
}

TEST(RunWindow, AbortPairsWhatWasSent) {
  RunRequest r = request(1.0, 0, 0.5, true);  // probed [0.25, 0.75) s
  {
    Recorder rec;
    Emit emit = rec.emit();
    RunWindow win(r, emit);
    win.fix(0);
    win.advance(kS / 2);  // inside the probed part
    win.cut(kS / 2 + 1000);
    EXPECT_TRUE(win.close(true));
    EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "probe_start", "probe_stop", "measure_stop"}));
    EXPECT_DOUBLE_EQ(rec.events[2]["t"].get<double>(), 0.500001);
    EXPECT_DOUBLE_EQ(rec.events[3]["t"].get<double>(), 0.500001);
  }
  {
    Recorder rec;
    Emit emit = rec.emit();
    RunWindow win(r, emit);
    win.fix(0);
    win.advance(kS / 10);  // before the probed part: it never begins, no probe events
    win.cut(kS / 10);
    EXPECT_TRUE(win.close(true));
    EXPECT_EQ(rec.names(), std::vector<std::string>({"measure_start", "measure_stop"}));
    Stats st;
    win.finish(st, 1);
    EXPECT_EQ(st.phases[kProbed].duration_s, 0);
    EXPECT_NEAR(st.phases[kUnprobed].duration_s, 0.1, 1e-9);
    EXPECT_EQ(st.phases[kUnprobedAfter].duration_s, 0);
  }
  {
    Recorder rec;
    Emit emit = rec.emit();
    RunWindow win(r, emit);
    win.fix(kS);  // aborted during the warm-up: nothing to close
    win.cut(kS / 2);
    EXPECT_TRUE(win.close(true));
    EXPECT_TRUE(rec.events.empty());
    Stats st;
    win.finish(st, 1);
    EXPECT_EQ(st.duration_s, 0);
  }
}

TEST(RunWindow, ClientGoneStopsSending) {
  RunRequest r = request(1.0, 0, 0.5, true);
  Recorder rec;
  rec.ok = false;
  Emit emit = rec.emit();
  RunWindow win(r, emit);
  win.fix(0);
  EXPECT_FALSE(win.advance(0));
  EXPECT_TRUE(win.opened());
  EXPECT_TRUE(win.close(false));  // nothing more is sent to a client that is gone
  EXPECT_EQ(rec.events.size(), 1u);
  EXPECT_TRUE(win.closed());
}

TEST(Stats, PhasesAddUpToTheWindow) {
  Stats st;
  st.init_counts(3);
  st.add_conn(0, {5, 2, 0, 3});  // unprobed before, probed, guard, unprobed after
  st.add_conn(2, {1, 0, 0, 0});
  PerPhase<Histogram> h;
  h[kUnprobed].record(1000);
  h[kProbed].record(3000);
  h[kProbed].record(5000);
  h[kUnprobedAfter].record(7000);
  st.add_latency(h);
  EXPECT_EQ(st.messages, 11u);
  EXPECT_EQ(st.per_conn_messages, std::vector<uint64_t>({10, 0, 1}));
  EXPECT_EQ(st.phases[kProbed].per_conn_messages, std::vector<uint64_t>({2, 0, 0}));
  EXPECT_EQ(st.latency.count(), 4u);
  EXPECT_EQ(slowest_of(h), h[kUnprobedAfter].max());
  st.has_phases = true;
  st.probe_share = 0.25;
  st.duration_s = 4;
  st.phases[kUnprobed].duration_s = 2;
  st.phases[kUnprobedAfter].duration_s = 1;
  st.phases[kProbed].duration_s = 1;
  json j = stats_json(st);
  EXPECT_EQ(j["probe_share"], 0.25);
  // "unprobed" is both parts together, each part's rate beside it
  EXPECT_EQ(j["phases"]["unprobed"]["messages"], 9);
  EXPECT_EQ(j["phases"]["unprobed"]["msgs_per_sec"], 3.0);
  EXPECT_EQ(j["phases"]["unprobed"]["per_conn_messages"], json::array({8, 0, 1}));
  EXPECT_EQ(j["phases"]["unprobed"]["latency_us"]["count"], 2);
  EXPECT_EQ(j["phases"]["unprobed"]["parts"][0]["msgs_per_sec"], 3.0);
  EXPECT_EQ(j["phases"]["unprobed"]["parts"][1]["messages"], 3);
  EXPECT_EQ(j["phases"]["unprobed"]["parts"][1]["duration_s"], 1.0);
  EXPECT_EQ(j["phases"]["probed"]["msgs_per_sec"], 2.0);
  EXPECT_EQ(j["phases"]["probed"]["latency_us"]["count"], 2);
  for (const char* k : {"messages", "duration_s", "msgs_per_sec", "per_conn_messages", "latency_us"})
    EXPECT_TRUE(j["phases"]["unprobed"].contains(k)) << k;
  EXPECT_TRUE(j["phases"]["probed"].contains("t_start"));
  st.has_phases = false;
  EXPECT_FALSE(stats_json(st).contains("phases"));  // single-phase requests: today's stats
}

TEST(Stats, UnansweredAtTheWindowsEnd) {
  const int64_t stop = 10 * kS;
  Waiting w;
  w.answered(0, 9 * kS, 9 * kS + 5, stop, 0);  // answered inside the window: not waiting
  w.answered(0, stop, stop + 5, stop, 0);      // sent at the end: not sent before it
  w.answered(1, 8 * kS, stop, stop, 0);        // answered exactly at the end: was still waiting
  w.answered(1, 7 * kS, 12 * kS, stop, 0);     // answered late
  // Never answered: sequences 5..8 of connection 2 in a ring of 4 slots; the one sent after the end is left out.
  int64_t ring[4] = {6 * kS, stop - 1000, stop + 1, 3 * kS};  // seq 8, 5, 6, 7 (seq % 4)
  w.in_flight(2, ring, 4, 5, 9, stop, 0);
  w.in_flight(3, ring, 4, 5, 5, stop, 0);  // nothing in flight
  ASSERT_EQ(w.msgs.size(), 5u);            // 8 s, 7 s (conn 1); stop − 1 µs, 3 s, 6 s (conn 2)
  // A floor (the thread's slowest answer so far) keeps only those older than it at the end.
  Waiting floored;
  floored.answered(1, 8 * kS, stop, stop, 2 * kS);  // 2 s old: not older than 2 s
  floored.answered(1, 7 * kS, 12 * kS, stop, 2 * kS);
  floored.in_flight(2, ring, 4, 5, 9, stop, 2 * kS);
  EXPECT_EQ(floored.msgs.size(), 3u);  // 7 s, 3 s, 6 s

  Stats st;
  st.connections = 4;
  PerPhase<Histogram> h;
  h[kUnprobed].record(2 * kS);  // the window's slowest answered message: 2 s
  st.add_latency(h);
  st.set_unanswered(w.msgs, stop);
  // Older than 2 s at the end: those sent at 7 s, 3 s and 6 s (the one sent at 8 s is not older), on 2 connections.
  json u = stats_json(st)["unanswered"];
  EXPECT_EQ(u["count"], 3);
  EXPECT_EQ(u["connections"], 2);
  EXPECT_EQ(u["max_age_us"], 7e6);  // 10 s − 3 s
  Stats quiet;                      // nothing answered in the window: everything waiting counts
  quiet.connections = 4;
  quiet.set_unanswered(w.msgs, stop);
  EXPECT_EQ(quiet.unanswered, 5u);
  EXPECT_EQ(stats_json(Stats{})["unanswered"], json({{"count", 0}, {"max_age_us", 0.0}, {"connections", 0}}));
}

TEST(RunWindow, ProgressEventsOnlyWhenAskedAndNeverAfterTheEnd) {
  Recorder rec;
  Emit emit = rec.emit();
  RunRequest r = request(2, 1, 1, false);  // warm-up [0, 1 s), window [1 s, 3 s)
  RunWindow quiet(r, emit);
  quiet.fix(0);
  EXPECT_EQ(quiet.next_progress(), INT64_MAX);  // absent: no progress events at all
  EXPECT_TRUE(quiet.progress(2 * kS, 100, 50));
  EXPECT_TRUE(rec.events.empty());

  r.progress = 0.5;
  RunWindow win(r, emit);
  win.fix(0);
  EXPECT_EQ(win.next_progress(), kS / 2);
  EXPECT_TRUE(win.progress(kS / 4, 10, 0));  // not due yet
  EXPECT_TRUE(rec.events.empty());
  EXPECT_TRUE(win.progress(kS / 2, 1000, 0));  // warm-up: 1000 answered in 0.5 s
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0]["phase"], "warmup");
  EXPECT_EQ(rec.events[0]["messages"], 0);
  EXPECT_EQ(rec.events[0]["msgs_per_sec"], 2000.0);
  EXPECT_EQ(rec.events[0]["t"], 0.5);
  EXPECT_TRUE(win.advance(kS));  // measure_start
  // Woken late at 1.75 s: the 1.0 and 1.5 s slots are skipped; the rate spans the last interval.
  EXPECT_TRUE(win.progress(kS * 7 / 4, 2000, 300));
  ASSERT_EQ(rec.events.size(), 3u);
  EXPECT_EQ(rec.events[2]["phase"], "measure");
  EXPECT_EQ(rec.events[2]["messages"], 300);
  EXPECT_EQ(rec.events[2]["msgs_per_sec"], 800.0);  // 1000 answers in 1.25 s
  EXPECT_EQ(win.next_progress(), 2 * kS);
  EXPECT_TRUE(win.progress(2 * kS, 2500, 800));
  EXPECT_EQ(rec.events.back()["msgs_per_sec"], 2000.0);  // 500 in 0.25 s
  EXPECT_TRUE(win.advance(3 * kS));                      // measure_stop
  EXPECT_EQ(win.next_progress(), INT64_MAX);
  size_t n = rec.events.size();
  EXPECT_TRUE(win.progress(3 * kS, 3000, 900));
  EXPECT_EQ(rec.events.size(), n);  // nothing after measure_stop
  EXPECT_EQ(rec.names(),
            std::vector<std::string>({"progress", "measure_start", "progress", "progress", "measure_stop"}));
}

// `connected` announces the window and its probed sub-window when they are fixed first (the engines fix them before
// it), so a profiler can gate its probes on them before the window opens; a run without connections fixes nothing.
TEST(RunWindow, ConnectedAnnouncesTheFixedWindow) {
  RunRequest r = request(2.0, 0.5, 0.25, true);
  Recorder rec;
  Emit emit = rec.emit();
  Stats st;
  RunWindow win(r, emit);
  win.fix(10 * kS);
  EXPECT_TRUE(win.connected(st, 9 * kS, 10 * kS, 3));
  const json& ev = rec.events.back();
  EXPECT_EQ(ev["event"], "connected");
  EXPECT_DOUBLE_EQ(ev["t_start"].get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(ev["t_stop"].get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(ev["phases"]["probed"]["t_start"].get<double>(), 11.25);
  EXPECT_DOUBLE_EQ(ev["phases"]["probed"]["t_stop"].get<double>(), 11.75);

  RunWindow unprobed(request(2.0, 0.5, 0.0, false), emit);
  unprobed.fix(10 * kS);
  EXPECT_TRUE(unprobed.connected(st, 9 * kS, 10 * kS, 3));
  EXPECT_DOUBLE_EQ(rec.events.back()["t_stop"].get<double>(), 12.5);
  EXPECT_FALSE(rec.events.back().contains("phases"));

  RunWindow none(r, emit);  // nobody connected: no window
  EXPECT_TRUE(none.connected(st, 9 * kS, 10 * kS, 0));
  EXPECT_FALSE(rec.events.back().contains("t_start"));
}

TEST(RunWindow, StartAtDelaysTheWindowAndLengthensTheWarmup) {
  RunRequest r = request(1.0, 0.5, 0.4, true);
  r.start_at = 12.0;  // later than connected (10 s) + warm-up (0.5 s): the window waits for it
  Recorder rec;
  Emit emit = rec.emit();
  RunWindow win(r, emit);
  win.fix(10 * kS);
  EXPECT_EQ(win.bounds().start, 12 * kS);
  EXPECT_EQ(win.bounds().stop, 13 * kS);
  EXPECT_TRUE(win.advance(20 * kS));
  EXPECT_TRUE(win.close(true));
  Stats st;
  win.finish(st, 1);
  EXPECT_NEAR(st.warmup_s, 2.0, 1e-9);
  EXPECT_NEAR(st.t_start, 12.0, 1e-9);

  r.start_at = 5.0;  // already past: warm-up as asked
  RunWindow early(r, emit);
  early.fix(10 * kS);
  EXPECT_EQ(early.bounds().start, 10'500'000'000);
  EXPECT_EQ(ok(R"({"cmd":"run","target":"127.0.0.1:9","connections":1,"start_at":123.5})").run.start_at, 123.5);
}

// cpu_frac's divisor: the threads that could run at once, no more than the CPUs the loader may use (two threads
// on one CPU at 100% of it are 1.0, not 0.5).
TEST(RunWindow, CpuCapacityIsBoundByTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  const int n = CPU_COUNT(&saved);
  EXPECT_EQ(cpu_capacity(1), 1);
  EXPECT_EQ(cpu_capacity(0), 1);
  EXPECT_EQ(cpu_capacity(2), std::min(2, n));
  EXPECT_EQ(cpu_capacity(1000), n);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) first++;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const int pinned2 = cpu_capacity(2), pinned64 = cpu_capacity(64);
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(pinned2, 1);
  EXPECT_EQ(pinned64, 1);
}
