// The control protocol, loader side: request parsing/validation and the JSON of events and stats.
// The contract is cpp_server/PROTOCOL.md; netprof.profiler.run.loader_client is the other side.
#pragma once

#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "histogram.hpp"
#include "http.hpp"
#include "think.hpp"
#include "zmtp.hpp"

namespace netprof {

using json = nlohmann::ordered_json;            // keys in the order PROTOCOL.md shows them
using Emit = std::function<bool(const json&)>;  // sends one event line; false when the client is gone

constexpr int kProtocolVersion = 1;
constexpr size_t kMaxLine = 64 * 1024;  // client -> loader lines

// Error kinds (PROTOCOL.md).
namespace err {
constexpr const char* kBadRequest = "bad_request";
constexpr const char* kConnect = "connect";
constexpr const char* kBackendGone = "backend_gone";
constexpr const char* kInternal = "internal";
constexpr const char* kAborted = "aborted";  // the client sent {"cmd":"abort"} mid-run
}  // namespace err

// Bounds on a run's size (PROTOCOL.md, "Limits"), checked before the run: a request beyond them is a
// bad_request, so the loader never tries (and fails) to allocate it.
constexpr uint64_t kMaxInFlightMessages = uint64_t(1) << 24;  // connections × pipeline
constexpr uint64_t kMaxInFlightBytes = uint64_t(1) << 30;     // connections × pipeline × msize

// How the loader talks to the backend: raw TCP ping-pong (the default), ZeroMQ DEALER sockets of libzmq
// (one message = one frame; the backend is a ROUTER that echoes each request to its sender), or the
// same conversation in ZMTP 3.0 spoken by the TCP engine itself (no libzmq thread in the loader).
enum class Transport { Tcp, Zmq, Zmtp };

// What one message is (PROTOCOL.md, "Protocols"): an echo of msize bytes (the default), or one
// request/response exchange of HTTP/1.1 or of a line protocol.
enum class Protocol { Echo, Http, Line };
const char* protocol_name(Protocol p);

// Open-loop arrivals (PROTOCOL.md, "Open loop"): evenly spaced, or exponential gaps (a Poisson process).
enum class Arrivals { Constant, Poisson };
const char* arrivals_name(Arrivals a);
constexpr double kMaxRate = 10'000'000;  // requests/s over all connections

// Turns (PROTOCOL.md, "Turns"): at most this many targets, and this many turns in a window.
constexpr size_t kMaxTargets = 26;
constexpr int64_t kMaxTurns = 100'000;

struct RunRequest {
  Transport transport = Transport::Tcp;
  std::string target;
  sockaddr_in target_addr{};
  int connections = 0;
  int msize = 64;
  double duration = 10.0;
  double warmup = 1.0;
  int pipeline = 1;
  std::string think_spec = "none";
  Think think;
  double connect_timeout = 10.0;
  std::vector<std::string> sources{"127.0.0.1"};
  std::vector<in_addr> source_addrs;
  // Share of the window that is probed: a centred sub-window (PROTOCOL.md, "Probe phases").
  // Absent = 1 with no probe events and no `phases` in the stats (the single-phase protocol).
  double probe_share = 1.0;
  bool probe_share_given = false;
  // Seconds on each side of the probed sub-window that count in neither phase (PROTOCOL.md, "Probe
  // phases"): the profiler attaches its probes during the first guard and detaches them during the second.
  double probe_guard = 0;
  // Seconds between `progress` events (PROTOCOL.md, "Progress"); 0 = absent: none are sent.
  double progress = 0;
  // Slices of the window with their own latency figures (PROTOCOL.md, "Timeline"); 0 = absent.
  int timeline = 0;
  Protocol protocol = Protocol::Echo;
  HttpRequestSpec http;  // protocol http
  std::string line;      // protocol line: the request line without its newline
  // One exchange's request on the wire (http, line), built once when the request is parsed; empty for echo.
  std::string request_bytes;
  bool head_requests = false;  // http: the method is HEAD (replies have no body)
  // Open-loop load: requests per second over all connections, sent on a schedule (0 = absent: closed
  // loop, each reply releases the next request).
  double rate = 0;
  Arrivals arrivals = Arrivals::Constant;
  bool open_loop() const { return rate > 0; }
  // Open loop: the most connections open at once (PROTOCOL.md, "Connections as needed"): a request that comes
  // due while every open connection has `pipeline` in flight goes out on a new one, up to this many (0 =
  // absent: `connections`, none are opened during the load).
  int max_connections = 0;
  int connection_cap() const { return std::max(connections, max_connections); }
  // Every latency object of the stats also carries its histogram's buckets (PROTOCOL.md, "Histograms"):
  // for a client that merges several loaders' stats.
  bool histograms = false;
  // CLOCK_MONOTONIC seconds before which the window does not start (0 = absent): several loaders started
  // apart by a few ms begin their windows together (PROTOCOL.md, "Run request"); the warm-up grows to reach it.
  double start_at = 0;
  // Turns (PROTOCOL.md, "Turns"): further targets that share the connections with `target` and are served
  // one at a time, `turn` seconds each; target_addrs holds `target` first, then these. Empty: one target.
  std::vector<std::string> alternate;
  std::vector<sockaddr_in> target_addrs;
  double turn = 0.1;
  bool turns() const { return !alternate.empty(); }
  int targets() const { return int(1 + alternate.size()); }
  // warmup_after, when the connect phase ends (PROTOCOL.md, "Warm-up after"): false ("connected") once every
  // connection is up; true ("served") once every connection has also had one message answered, so the server has
  // accepted them all before the warm-up begins (a loop that accepts one connection per turn takes seconds to under
  // load).
  bool served_first = false;
  // Seconds the connections stay open after measure_stop, nothing more sent on them, until the client sends
  // {"cmd":"release"} (PROTOCOL.md, "Hold"): a server's thread per connection outlives the client's reads at
  // measure_stop. 0 = absent: closed at once.
  double hold = 0;
  // Bytes of one message the loader sends: msize (echo; zmtp: with its frame header) or the request's size.
  size_t message_bytes() const {
    if (protocol != Protocol::Echo) return request_bytes.size();
    return size_t(msize) + (transport == Transport::Zmtp ? zmtp::frame_header_size(size_t(msize)) : 0);
  }
};

struct Request {
  enum Cmd { Ping, Run, Abort, Release } cmd = Ping;
  RunRequest run;
};

// Parses and validates one request line. On failure returns false and a one-line reason
// (the error kind is always bad_request).
bool parse_request(std::string_view line, Request* out, std::string* why);
// Same, for an already-parsed object (the one-shot CLI builds one from its flags).
bool parse_request_obj(const json& obj, Request* out, std::string* why);

bool parse_ipv4(const std::string& s, in_addr* out);
bool parse_hostport(const std::string& s, sockaddr_in* out);

struct Errors {
  uint64_t connect = 0, reset = 0, timeout = 0, mismatch = 0;
  // Request/response protocols (http, line): replies that could not be read, by kind, and (http)
  // replies that were not 2xx, by class.
  uint64_t malformed = 0, unframed = 0, truncated = 0, http_3xx = 0, http_4xx = 0, http_5xx = 0;
  std::string sample;  // the first of those protocol errors, "kind: detail" (empty when none)
  void add(const Errors& o);
};

// The phases of the window: the probed sub-window, the guards on either side of it (where the
// profiler attaches and detaches its probes: counted in neither), and the rest of the window, counted
// in its two parts, before and after the guards (kUnprobed, kUnprobedAfter): reported together as
// "unprobed", with each part's rate beside it, so a cell shows how far its rate moves with no probe.
enum ProbePhase : int { kUnprobed = 0, kProbed = 1, kGuard = 2, kUnprobedAfter = 3 };
constexpr int kPhases = 4;
template <class T>
using PerPhase = std::array<T, kPhases>;

struct PhaseStats {
  uint64_t messages = 0;
  double duration_s = 0;
  std::vector<uint64_t> per_conn_messages;
  Histogram latency;       // closed loop: from the send; open loop: from the intended time
  Histogram latency_sent;  // open loop: from the actual send
};

// Which of `slices` equal slices of a window of `duration_ns` from `start` the instant `t` falls in (the
// last one also takes what completes at its very end).
inline size_t timeline_slice(int64_t start, int64_t duration_ns, int slices, int64_t t) {
  const int64_t slice = std::max<int64_t>(1, duration_ns / slices);
  return size_t(std::clamp<int64_t>((t - start) / slice, 0, slices - 1));
}

// Turns: the turn the instant `t` falls in, counted from the window's `start` in turns of `turn_ns` (floor:
// negative during the warm-up).
inline int64_t turn_index(int64_t start, int64_t turn_ns, int64_t t) {
  const int64_t d = t - start;
  return d >= 0 ? d / turn_ns : -((-d + turn_ns - 1) / turn_ns);
}

// Which of `targets` targets serves turn `k`: rounds of one turn per target, in order in even rounds and in
// reverse in odd ones (two targets: A B B A A B …), so neither is always first after the other.
inline int turn_target(int64_t k, int targets) {
  const int64_t round = k >= 0 ? k / targets : -((-k + targets - 1) / targets);
  const int j = int(k - round * targets);
  return round % 2 == 0 ? j : targets - 1 - j;
}

// The slowest message of any phase (ns).
inline uint64_t slowest_of(const std::array<Histogram, kPhases>& by_phase) {
  uint64_t m = 0;
  for (const Histogram& h : by_phase) m = std::max(m, h.max());
  return m;
}

// Messages sent before the window's end (`stop`) and not answered by then (PROTOCOL.md, "Stats
// object"), gathered per engine thread: their connection and send time (monotonic ns). Only those
// already older at `stop` than `floor` are kept (a lower bound of the window's slowest answered
// message): an ordinary message in flight at the end takes no memory, only the ones that may count.
// In open loop a message's age runs from its intended time (`since`), as its latency does; in closed
// loop `since` is its send time.
struct WaitingMsg {
  uint32_t conn;
  int64_t sent;  // the time its age runs from (`since`)
};
struct Waiting {
  std::vector<WaitingMsg> msgs;
  static bool old(int64_t sent, int64_t since, int64_t stop, int64_t floor) {
    return sent < stop && stop - since > floor;
  }
  // A message sent at `sent` was answered at `done`: kept when it was still waiting at `stop`.
  void answered(uint32_t conn, int64_t since, int64_t sent, int64_t done, int64_t stop, int64_t floor) {
    if (done >= stop && old(sent, since, stop, floor)) msgs.push_back({conn, since});
  }
  void answered(uint32_t conn, int64_t sent, int64_t done, int64_t stop, int64_t floor) {
    answered(conn, sent, sent, done, stop, floor);
  }
  // Never answered: the messages [from, to) of `conn`, their send times in the ring `sent_at` of `k`
  // slots (indexed by sequence % k), and their intended times in `since_at` (open loop; null: closed loop).
  void in_flight(uint32_t conn, const int64_t* sent_at, const int64_t* since_at, size_t k, uint64_t from, uint64_t to,
                 int64_t stop, int64_t floor) {
    for (uint64_t s = from; s < to; s++) {
      const int64_t since = since_at ? since_at[s % k] : sent_at[s % k];
      if (old(sent_at[s % k], since, stop, floor)) msgs.push_back({conn, since});
    }
  }
  void in_flight(uint32_t conn, const int64_t* sent_at, size_t k, uint64_t from, uint64_t to, int64_t stop,
                 int64_t floor) {
    in_flight(conn, sent_at, nullptr, k, from, to, stop, floor);
  }
};

// Open-loop figures (PROTOCOL.md, "Open loop"), gathered per engine thread and summed.
struct OpenLoopStats {
  uint64_t intended = 0;  // intended time inside the window [start, stop)
  uint64_t sent = 0;      // of those, sent before stop
  // Of those sent, the ones that waited for a free slot with no connection left to open (the connection
  // cap reached), the ones that waited and went out among the first of a connection opened during the
  // load (its connect), and the others that waited below the cap (for a slot of one already open).
  uint64_t behind = 0;
  uint64_t waited_connect = 0;
  uint64_t waited_slot = 0;
  Histogram behind_late;          // ns: how late the behind ones went out
  Histogram schedule_late;        // ns: how late the ones that had a free slot went out (the loader's own error)
  uint64_t loader_late = 0;       // of those, later than the threshold
  uint64_t queued_at_end = 0;     // intended before stop, not sent by then
  uint64_t in_flight_at_end = 0;  // sent before stop, not answered by then
  // Connections as needed: how many could be open at once (the cap), the most that were (set by the
  // coordinator), those opened during the load that came up inside the window, the setup time (ns: first
  // attempt to up) of every one opened during the load, and the window's messages answered on them (not
  // in per_conn_messages, which keeps the `connections` opened before the load).
  int max_connections = 0;
  long conns_max = 0;
  uint64_t conns_opened = 0;
  Histogram connect;
  uint64_t messages_on_opened = 0;
  void add(const OpenLoopStats& o) {
    intended += o.intended;
    sent += o.sent;
    behind += o.behind;
    waited_connect += o.waited_connect;
    waited_slot += o.waited_slot;
    behind_late.merge(o.behind_late);
    schedule_late.merge(o.schedule_late);
    loader_late += o.loader_late;
    queued_at_end += o.queued_at_end;
    in_flight_at_end += o.in_flight_at_end;
    conns_opened += o.conns_opened;
    connect.merge(o.connect);
  }
};

// Lateness (ns) above which a request that had a free slot counts as `loader_late`: one tenth of the
// mean gap between two requests of the run (1 / rate), but at least 1 ms.
inline int64_t loader_late_threshold_ns(double rate) {
  return std::max<int64_t>(1'000'000, int64_t(std::min(0.1 / rate * 1e9, 4e18)));  // min: a tiny rate cannot overflow
}

struct Stats {
  int connections = 0, connected = 0;
  uint64_t messages = 0;
  double duration_s = 0;
  int msize = 0, pipeline = 1;
  std::vector<uint64_t> per_conn_messages;
  Histogram latency;  // ns, messages completed inside the window (open loop: from their intended time)
  Errors errors;
  // Open loop (reported when the request gave rate): the rate, the arrivals, the latency from the
  // actual send, and the schedule's figures.
  bool open_loop = false;
  double rate = 0;
  Arrivals arrivals = Arrivals::Constant;
  Histogram latency_sent;
  OpenLoopStats ol;
  // Request/response protocols: request size, connections reopened, and (http) replies completed in
  // the window by status class 1xx..5xx.
  Protocol protocol = Protocol::Echo;
  size_t request_bytes = 0;
  uint64_t reconnects = 0;
  std::array<uint64_t, 5> status{};
  double setup_s = 0, warmup_s = 0;
  // warmup_after "served" (reported when the request asked for it): the connections whose first message was
  // answered before the warm-up, those still unanswered when connect_timeout ran out, and the seconds the
  // first exchange took (part of setup_s).
  bool has_served_first = false;
  long first_served = 0, first_unserved = 0;
  double first_s = 0;
  double user_s = 0, sys_s = 0, cpu_frac = 0;
  double t_start = 0, t_stop = 0;
  bool aborted = false;
  // Probe phases: reported when the request gave probe_share.
  bool has_phases = false;
  double probe_share = 1.0, probe_guard = 0;
  double probe_t_start = 0, probe_t_stop = 0, guard_t_start = 0, guard_t_stop = 0;
  PerPhase<PhaseStats> phases;
  // The unprobed phase whole: its two parts (kUnprobed, kUnprobedAfter) added up.
  PhaseStats unprobed() const;
  // The window in `timeline` equal slices of `timeline_slice_ns`, each with the latency of the messages
  // completed in it (PROTOCOL.md, "Timeline"); empty when the request did not ask.
  std::vector<Histogram> timeline;
  int64_t timeline_slice_ns = 0;
  // Turns (PROTOCOL.md, "Turns"); empty when the request had no `alternate`: the targets, the turn's length,
  // per turn of the window the messages sent in it and answered in the window with their latency summed
  // (ns), and per target the window's latency (its messages: the histogram's count).
  std::vector<std::string> turn_targets;
  int64_t turn_ns = 0;
  std::vector<uint64_t> turn_messages;
  std::vector<double> turn_latency_ns;
  std::vector<Histogram> target_latency;
  // Left waiting at the window's end, longer than its slowest answered message: messages, connections
  // with one, age of the oldest (ns).
  uint64_t unanswered = 0;
  int unanswered_conns = 0;
  int64_t unanswered_max_age_ns = 0;

  // Counting, shared by both engines: size the per-connection lists for n connections, then add each
  // connection's window messages by phase and each latency histogram by phase. The whole-window
  // figures are the sums of the phases.
  void init_counts(int n);
  void add_conn(uint32_t conn, const PerPhase<uint64_t>& messages_by_phase);
  void add_latency(const PerPhase<Histogram>& by_phase);
  void add_latency_sent(const PerPhase<Histogram>& by_phase);  // open loop: from the actual send
  // One thread's timeline slices (empty: none asked) over a window of `duration_ns`.
  void add_timeline(const std::vector<Histogram>& slices, int64_t duration_ns);
  // One thread's turns (empty vectors: none asked).
  void add_turns(const std::vector<uint64_t>& messages, const std::vector<double>& latency_ns,
                 const std::vector<Histogram>& by_target);
  // The messages waiting at the window's end `stop` (of all threads): those already older then than the
  // window's slowest answered message (`latency`, so call after add_latency) are `unanswered`.
  void set_unanswered(const std::vector<WaitingMsg>& waiting, int64_t stop);
};

json stats_json(const Stats& s, bool histograms = false);
json event(const char* name);               // {"event": name}
json event_at(const char* name, double t);  // {"event": name, "t": t}
double r6(double x);                        // rounded to 6 decimals: every time (s) in events and stats
json error_event(const char* kind, const std::string& message);

}  // namespace netprof
