#include "protocol.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "line.hpp"

namespace netprof {

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::Http: return "http";
    case Protocol::Line: return "line";
    default: return "echo";
  }
}

const char* arrivals_name(Arrivals a) { return a == Arrivals::Poisson ? "poisson" : "constant"; }

void Errors::add(const Errors& o) {
  connect += o.connect;
  reset += o.reset;
  timeout += o.timeout;
  mismatch += o.mismatch;
  malformed += o.malformed;
  unframed += o.unframed;
  truncated += o.truncated;
  http_3xx += o.http_3xx;
  http_4xx += o.http_4xx;
  http_5xx += o.http_5xx;
  if (sample.empty()) sample = o.sample;
}

bool parse_ipv4(const std::string& s, in_addr* out) { return inet_pton(AF_INET, s.c_str(), out) == 1; }

bool parse_hostport(const std::string& s, sockaddr_in* out) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size() || s.size() - colon - 1 > 5) return false;
  std::string host = s.substr(0, colon), port = s.substr(colon + 1);
  for (char c : port)
    if (c < '0' || c > '9') return false;
  long p = std::stol(port);
  in_addr a{};
  if (p < 0 || p > 65535 || !parse_ipv4(host, &a)) return false;
  *out = sockaddr_in{};
  out->sin_family = AF_INET;
  out->sin_port = htons(uint16_t(p));
  out->sin_addr = a;
  return true;
}

namespace {

// Each field checker returns false with *why set; all messages name the field and the rule.
bool get_int(const json& o, const char* key, long lo, long hi, int* out, std::string* why) {
  auto it = o.find(key);
  if (it == o.end()) return true;
  if (!it->is_number_integer()) {
    *why = std::string(key) + " must be an integer";
    return false;
  }
  long v =
      it->is_number_unsigned() ? long(std::min<uint64_t>(it->get<uint64_t>(), uint64_t(LONG_MAX))) : it->get<long>();
  if (v < lo || v > hi) {
    *why = std::string(key) + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + it->dump();
    return false;
  }
  *out = int(v);
  return true;
}

bool get_num(const json& o, const char* key, double lo, double hi, double* out, std::string* why) {
  auto it = o.find(key);
  if (it == o.end()) return true;
  if (!it->is_number()) {
    *why = std::string(key) + " must be a number";
    return false;
  }
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    json lo_j = lo, hi_j = hi;
    *why = std::string(key) + " must be in " + lo_j.dump() + ".." + hi_j.dump() + ", got " + it->dump();
    return false;
  }
  *out = v;
  return true;
}

bool get_str(const json& o, const char* key, std::string* out, std::string* why) {
  auto it = o.find(key);
  if (it == o.end()) return true;
  if (!it->is_string()) {
    *why = std::string(key) + " must be a string";
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

bool get_str_list(const json& o, const char* key, size_t max_items, std::vector<std::string>* out, std::string* why) {
  auto it = o.find(key);
  if (it == o.end()) return true;
  bool ok = it->is_array() && it->size() <= max_items;
  for (size_t i = 0; ok && i < it->size(); i++) ok = (*it)[i].is_string();
  if (!ok) {
    *why = std::string(key) + " must be a list (at most " + std::to_string(max_items) + ") of strings";
    return false;
  }
  out->clear();
  for (auto& v : *it) out->push_back(v.get<std::string>());
  return true;
}

// The protocol fields: `protocol` and the fields of the protocol it names; builds the request bytes.
bool parse_protocol(const json& o, RunRequest* r, std::string* why) {
  std::string name = "echo";
  if (!get_str(o, "protocol", &name, why)) return false;
  if (name == "echo") {
    r->protocol = Protocol::Echo;
  } else if (name == "http") {
    r->protocol = Protocol::Http;
  } else if (name == "line") {
    r->protocol = Protocol::Line;
  } else {
    *why = "protocol must be \"echo\", \"http\" or \"line\", got " + excerpt(name.data(), name.size());
    return false;
  }
  for (const char* f : {"request", "headers", "body", "host"})
    if (o.contains(f) && r->protocol != Protocol::Http) {
      *why = std::string("field '") + f + "' needs protocol \"http\"";
      return false;
    }
  if (o.contains("line") && r->protocol != Protocol::Line) {
    *why = "field 'line' needs protocol \"line\"";
    return false;
  }
  if (r->protocol == Protocol::Http) {
    HttpRequestSpec& h = r->http;
    if (!get_str(o, "request", &h.request, why) || !get_str_list(o, "headers", 256, &h.headers, why) ||
        !get_str(o, "body", &h.body, why) || !get_str(o, "host", &h.host, why))
      return false;
    h.has_body = o.contains("body");
    if (o.contains("host") && h.host.empty()) {
      *why = "host must not be empty";
      return false;
    }
    return build_http_request(h, r->target, &r->request_bytes, &r->head_requests, why);
  }
  if (r->protocol == Protocol::Line) {
    if (!o.contains("line")) {
      *why = "protocol \"line\" needs a line (the request line, without its newline)";
      return false;
    }
    if (!get_str(o, "line", &r->line, why)) return false;
    return build_line_request(r->line, &r->request_bytes, why);
  }
  return true;
}

// Open-loop load: `rate` and `arrivals` (PROTOCOL.md, "Open loop"). Call after think and transport.
bool parse_open_loop(const json& o, RunRequest* r, std::string* why) {
  if (!get_num(o, "rate", 0, kMaxRate, &r->rate, why)) return false;
  if (o.contains("rate") && r->rate <= 0) {  // get_num's range is closed: 0 passes it
    *why = "rate must be in 0..1e7 (exclusive of 0) requests per second, got " + o["rate"].dump();
    return false;
  }
  if (o.contains("arrivals")) {
    std::string a;
    if (!get_str(o, "arrivals", &a, why)) return false;
    if (!o.contains("rate")) {
      *why = "arrivals needs rate (the open-loop schedule's requests per second)";
      return false;
    }
    if (a == "constant") {
      r->arrivals = Arrivals::Constant;
    } else if (a == "poisson") {
      r->arrivals = Arrivals::Poisson;
    } else {
      *why = "arrivals must be \"constant\" or \"poisson\", got " + excerpt(a.data(), a.size());
      return false;
    }
  }
  if (!get_int(o, "max_connections", 1, 1'000'000, &r->max_connections, why)) return false;
  if (o.contains("max_connections")) {
    if (!o.contains("rate")) {
      *why = "max_connections needs rate (connections are opened as requests need them only under open-loop load)";
      return false;
    }
    if (r->max_connections < r->connections) {
      *why = "max_connections " + std::to_string(r->max_connections) + " is below connections " +
             std::to_string(r->connections) + ": the cap counts the connections opened before the load too";
      return false;
    }
  }
  if (!r->open_loop()) return true;
  // The schedule alone starts requests: a pause after each reply would make it closed loop again.
  if (r->think_spec != "none") {
    *why = "rate (open-loop load) cannot be combined with think '" + r->think_spec +
           "': the schedule decides when requests go; use think \"none\" or no rate";
    return false;
  }
  if (r->transport == Transport::Zmq) {
    *why = "rate (open-loop load) needs transport \"tcp\" or \"zmtp\", not \"zmq\"";
    return false;
  }
  return true;
}

}  // namespace

bool parse_request(std::string_view line, Request* out, std::string* why) {
  if (line.size() > kMaxLine) {
    *why = "line too long (limit " + std::to_string(kMaxLine) + " bytes)";
    return false;
  }
  json obj = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) {
    *why = "malformed JSON";
    return false;
  }
  return parse_request_obj(obj, out, why);
}

// "warmup_after": when the connect phase ends (PROTOCOL.md, "Warm-up after").
bool parse_warmup_after(const json& o, RunRequest* r, std::string* why) {
  std::string after = "connected";
  if (!get_str(o, "warmup_after", &after, why)) return false;
  if (after != "connected" && after != "served") {
    *why = "warmup_after must be \"connected\" or \"served\", got '" + after + "'";
    return false;
  }
  r->served_first = after == "served";
  if (r->served_first && r->turns()) {  // a connection's first message would wait for its target's turn
    *why =
        "warmup_after \"served\" goes without alternate (each target serves only in its turns, which begin with the "
        "load)";
    return false;
  }
  return true;
}

// Turns (PROTOCOL.md, "Turns"): `alternate` targets served in turns with `target`, `turn` seconds each. Runs
// after `target`, `connections`, `duration`, `transport` and `timeline` are read.
bool parse_turns(const json& o, RunRequest* r, std::string* why) {
  r->target_addrs = {r->target_addr};
  if (!o.contains("alternate")) {
    if (o.contains("turn")) {
      *why = "turn needs alternate (the targets that take turns with target)";
      return false;
    }
    return true;
  }
  if (!get_str_list(o, "alternate", kMaxTargets - 1, &r->alternate, why)) return false;
  if (r->alternate.empty()) {
    *why = "alternate must name at least one more target (IPv4:port)";
    return false;
  }
  for (const std::string& t : r->alternate) {
    sockaddr_in a{};
    if (!parse_hostport(t, &a) || ntohs(a.sin_port) == 0) {
      *why = "alternate entry must be IPv4:port with port 1..65535, got '" + t + "'";
      return false;
    }
    r->target_addrs.push_back(a);
  }
  const int n = r->targets();
  if (r->connections % n != 0) {
    *why = "connections " + std::to_string(r->connections) + " is not a multiple of the " + std::to_string(n) +
           " targets (target and alternate): each target gets connections / " + std::to_string(n);
    return false;
  }
  if (!get_num(o, "turn", 0.01, 60, &r->turn, why)) return false;
  const double turns = r->duration / r->turn;
  const int64_t whole = std::llround(turns);
  if (std::fabs(turns - double(whole)) > 1e-6 * turns || whole < n || whole > kMaxTurns) {
    json d = r->duration, t = r->turn;
    *why = "duration " + d.dump() + " must be a whole number of turns of " + t.dump() +
           " s, at least one per target (" + std::to_string(n) + ") and at most " + std::to_string(kMaxTurns);
    return false;
  }
  for (const char* other : {"rate", "timeline"})
    if (o.contains(other)) {
      *why = std::string("alternate does not go with ") + other + " (turns are for closed-loop load)";
      return false;
    }
  if (r->transport == Transport::Zmq) {
    *why = "alternate needs transport \"tcp\" or \"zmtp\", not \"zmq\"";
    return false;
  }
  return true;
}

bool parse_request_obj(const json& o, Request* out, std::string* why) {
  if (!o.is_object()) {
    *why = "request must be a JSON object";
    return false;
  }
  std::string cmd;
  if (!o.contains("cmd")) {
    *why = "missing field cmd (\"run\" or \"ping\")";
    return false;
  }
  if (!get_str(o, "cmd", &cmd, why)) return false;
  static const std::set<std::string> ping_fields{"cmd"};
  // A table is easier to scan than one name per line.
  // clang-format off
  static const std::set<std::string> run_fields{
      "cmd",       "target",      "connections",     "msize",           "duration",
      "warmup",    "pipeline",    "think",           "connect_timeout", "sources",
      "transport", "probe_share", "protocol",        "request",         "headers",
      "body",      "host",        "line",            "progress",        "probe_guard",
      "rate",      "arrivals",    "histograms",      "start_at",        "timeline",
      "alternate", "turn",        "max_connections", "warmup_after",    "hold"};
  // clang-format on
  const std::set<std::string>* allowed;
  if (cmd == "ping") {
    out->cmd = Request::Ping;
    allowed = &ping_fields;
  } else if (cmd == "abort") {
    out->cmd = Request::Abort;
    allowed = &ping_fields;
  } else if (cmd == "release") {
    out->cmd = Request::Release;
    allowed = &ping_fields;
  } else if (cmd == "run") {
    out->cmd = Request::Run;
    allowed = &run_fields;
  } else {
    *why = "unknown cmd '" + cmd + "' (expected run, ping, abort or release)";
    return false;
  }
  for (auto& [k, v] : o.items()) {
    (void)v;
    if (!allowed->count(k)) {
      *why = "unknown field '" + k + "' for cmd " + cmd;
      return false;
    }
  }
  if (out->cmd != Request::Run) return true;

  RunRequest r;
  if (!o.contains("target") || !o.contains("connections")) {
    *why = "run needs target and connections";
    return false;
  }
  if (!get_str(o, "target", &r.target, why)) return false;
  if (!parse_hostport(r.target, &r.target_addr) || ntohs(r.target_addr.sin_port) == 0) {
    *why = "target must be IPv4:port with port 1..65535, got '" + r.target + "'";
    return false;
  }
  if (!get_int(o, "connections", 1, 1'000'000, &r.connections, why) ||
      !get_int(o, "msize", 1, 1 << 20, &r.msize, why) || !get_num(o, "duration", 0.1, 86400, &r.duration, why) ||
      !get_num(o, "warmup", 0, 3600, &r.warmup, why) || !get_int(o, "pipeline", 1, 1024, &r.pipeline, why) ||
      !get_str(o, "think", &r.think_spec, why) || !get_num(o, "connect_timeout", 0.1, 600, &r.connect_timeout, why) ||
      !get_num(o, "probe_share", 0, 1, &r.probe_share, why))
    return false;
  r.probe_share_given = o.contains("probe_share");
  if (!get_num(o, "probe_guard", 0, 60, &r.probe_guard, why)) return false;
  if (o.contains("probe_guard") && !r.probe_share_given) {
    *why = "probe_guard needs probe_share (the guards surround the probed sub-window)";
    return false;
  }
  // Not below 0.05 s: one line per interval, so a tiny interval would flood the client.
  if (!get_num(o, "progress", 0.05, 3600, &r.progress, why)) return false;
  // At most 100 slices: each is a histogram (37 KB) per engine thread.
  if (!get_int(o, "timeline", 0, 100, &r.timeline, why)) return false;
  if (!parse_protocol(o, &r, why)) return false;
  std::string transport = "tcp";
  if (!get_str(o, "transport", &transport, why)) return false;
  if (transport == "zmq") {
    r.transport = Transport::Zmq;
  } else if (transport == "zmtp") {
    r.transport = Transport::Zmtp;
  } else if (transport != "tcp") {
    *why = "transport must be \"tcp\", \"zmq\" or \"zmtp\", got '" + transport + "'";
    return false;
  }
  if (!parse_turns(o, &r, why)) return false;
  if (!parse_warmup_after(o, &r, why)) return false;
  if (!get_num(o, "hold", 0, 60, &r.hold, why)) return false;
  if (r.transport == Transport::Zmq && r.hold > 0) {  // libzmq owns those sockets and their closing
    *why = "hold needs transport \"tcp\" or \"zmtp\", not \"zmq\"";
    return false;
  }
  if (r.transport == Transport::Zmq && r.timeline > 0) {  // the zmq engine keeps no slices
    *why = "timeline needs transport \"tcp\" or \"zmtp\", not \"zmq\"";
    return false;
  }
  if (r.transport != Transport::Tcp && r.protocol != Protocol::Echo) {
    *why = std::string("protocol \"") + protocol_name(r.protocol) + "\" needs transport \"tcp\"";
    return false;
  }
  auto think = Think::parse(r.think_spec, why);
  if (!think) return false;
  r.think = *think;
  if (auto it = o.find("sources"); it != o.end()) {
    if (!it->is_array() || it->empty() || it->size() > 256) {
      *why = "sources must be a non-empty list (at most 256) of IPv4 addresses";
      return false;
    }
    r.sources.clear();
    for (auto& s : *it) {
      in_addr a{};
      if (!s.is_string() || !parse_ipv4(s.get<std::string>(), &a)) {
        *why = "sources entry " + s.dump() + " is not an IPv4 address string";
        return false;
      }
      r.sources.push_back(s.get<std::string>());
    }
  }
  for (auto& s : r.sources) {
    in_addr a{};
    parse_ipv4(s, &a);
    r.source_addrs.push_back(a);
  }
  if (!parse_open_loop(o, &r, why)) return false;
  // With connections as needed the bounds hold for the most that may be open (max_connections).
  const std::string conns_name = r.connection_cap() > r.connections ? "max_connections" : "connections";
  const uint64_t in_flight = uint64_t(r.connection_cap()) * uint64_t(r.pipeline);
  if (in_flight > kMaxInFlightMessages) {
    *why = conns_name + " × pipeline = " + std::to_string(in_flight) + " messages in flight exceeds the limit of " +
           std::to_string(kMaxInFlightMessages) + ": use fewer connections or a shorter pipeline";
    return false;
  }
  const char* size_name = r.protocol == Protocol::Echo ? "msize" : "request bytes";
  if (in_flight * uint64_t(r.message_bytes()) > kMaxInFlightBytes) {
    *why = conns_name + " × pipeline × " + std::string(size_name) + " = " +
           std::to_string(in_flight * uint64_t(r.message_bytes())) + " bytes in flight exceeds the limit of " +
           std::to_string(kMaxInFlightBytes) +
           " (1 GiB): use fewer connections, a shorter pipeline or smaller messages";
    return false;
  }
  if (!get_num(o, "start_at", 0, 1e12, &r.start_at, why)) return false;
  if (auto it = o.find("histograms"); it != o.end()) {
    if (!it->is_boolean()) {
      *why = "histograms must be true or false, got " + it->dump();
      return false;
    }
    r.histograms = it->get<bool>();
  }
  out->run = std::move(r);
  return true;
}

double r6(double x) { return std::round(x * 1e6) / 1e6; }

namespace {
double us(double ns) { return std::round(ns) / 1000.0; }  // ns -> µs, 1 ns resolution

json latency_json(const Histogram& h, bool histograms) {
  json j = {{"p50", us(h.quantile(0.50))},   {"p90", us(h.quantile(0.90))},
            {"p95", us(h.quantile(0.95))},   {"p99", us(h.quantile(0.99))},
            {"p999", us(h.quantile(0.999))}, {"max", us(double(h.max()))},
            {"mean", us(h.mean())},          {"count", h.count()}};
  if (histograms) {  // sparse: [index, count] of the non-empty buckets, lowest first
    json buckets = json::array();
    const auto& b = h.buckets();
    for (size_t i = 0; i < b.size(); i++)
      if (b[i]) buckets.push_back({i, b[i]});
    j["hist"] = {{"sub_bits", Histogram::kSubBits},
                 {"min_ns", h.min()},
                 {"max_ns", h.max()},
                 {"sum_ns", h.sum()},
                 {"buckets", buckets}};
  }
  return j;
}

double rate(uint64_t messages, double duration_s) {
  return duration_s > 0 ? std::round(double(messages) / duration_s * 10) / 10 : 0.0;
}

json errors_json(const Stats& s) {
  const Errors& e = s.errors;
  json j = {{"connect", e.connect}, {"reset", e.reset}, {"timeout", e.timeout}, {"mismatch", e.mismatch}};
  if (s.protocol == Protocol::Echo) return j;
  j["malformed"] = e.malformed;
  j["truncated"] = e.truncated;
  if (s.protocol == Protocol::Http) {
    j["unframed"] = e.unframed;
    j["http_3xx"] = e.http_3xx;
    j["http_4xx"] = e.http_4xx;
    j["http_5xx"] = e.http_5xx;
  }
  return j;
}

json phase_json(const PhaseStats& p, bool open_loop, bool histograms) {
  json j = {{"messages", p.messages},
            {"duration_s", r6(p.duration_s)},
            {"msgs_per_sec", rate(p.messages, p.duration_s)},
            {"per_conn_messages", p.per_conn_messages},
            {"latency_us", latency_json(p.latency, histograms)}};
  if (open_loop) j["latency_sent_us"] = latency_json(p.latency_sent, histograms);
  return j;
}

json late_json(const Histogram& h) {
  return {{"p50", us(h.quantile(0.50))}, {"p99", us(h.quantile(0.99))}, {"max", us(double(h.max()))}};
}

json open_loop_json(const Stats& s) {
  const OpenLoopStats& o = s.ol;
  return {{"intended", o.intended},
          {"sent", o.sent},
          {"behind", o.behind},
          {"behind_late_us", late_json(o.behind_late)},
          {"schedule_late_us", late_json(o.schedule_late)},
          {"loader_late", o.loader_late},
          {"loader_late_threshold_us", us(double(loader_late_threshold_ns(s.rate)))},
          {"queued_at_end", o.queued_at_end},
          {"in_flight_at_end", o.in_flight_at_end},
          {"max_connections", o.max_connections},
          {"conns_max", o.conns_max},
          {"conns_opened", o.conns_opened},
          {"waited_connect", o.waited_connect},
          {"waited_slot", o.waited_slot},
          {"connect_us", late_json(o.connect)},
          {"messages_on_opened", o.messages_on_opened}};
}
}  // namespace

PhaseStats Stats::unprobed() const {
  PhaseStats u = phases[kUnprobed];
  const PhaseStats& after = phases[kUnprobedAfter];
  u.messages += after.messages;
  u.duration_s += after.duration_s;
  for (size_t i = 0; i < u.per_conn_messages.size() && i < after.per_conn_messages.size(); i++)
    u.per_conn_messages[i] += after.per_conn_messages[i];
  u.latency.merge(after.latency);
  u.latency_sent.merge(after.latency_sent);
  return u;
}

void Stats::init_counts(int n) {
  per_conn_messages.assign(size_t(n), 0);
  for (auto& p : phases) p.per_conn_messages.assign(size_t(n), 0);
}

void Stats::add_conn(uint32_t conn, const PerPhase<uint64_t>& by_phase) {
  if (conn >= per_conn_messages.size()) {  // opened during the load: counted, but not per connection
    for (int p = 0; p < kPhases; p++) {
      phases[p].messages += by_phase[p];
      messages += by_phase[p];
      ol.messages_on_opened += by_phase[p];
    }
    return;
  }
  for (int p = 0; p < kPhases; p++) {
    phases[p].per_conn_messages[conn] += by_phase[p];
    phases[p].messages += by_phase[p];
    per_conn_messages[conn] += by_phase[p];
    messages += by_phase[p];
  }
}

void Stats::add_latency(const PerPhase<Histogram>& by_phase) {
  for (int p = 0; p < kPhases; p++) {
    phases[p].latency.merge(by_phase[p]);
    latency.merge(by_phase[p]);
  }
}

void Stats::add_timeline(const std::vector<Histogram>& slices, int64_t duration_ns) {
  if (slices.empty()) return;
  if (timeline.size() < slices.size()) timeline.resize(slices.size());
  timeline_slice_ns = std::max<int64_t>(1, duration_ns / int64_t(slices.size()));
  for (size_t i = 0; i < slices.size(); i++) timeline[i].merge(slices[i]);
}

void Stats::add_turns(const std::vector<uint64_t>& messages, const std::vector<double>& latency_ns,
                      const std::vector<Histogram>& by_target) {
  if (messages.empty()) return;
  if (turn_messages.size() < messages.size()) {
    turn_messages.resize(messages.size());
    turn_latency_ns.resize(messages.size());
  }
  if (target_latency.size() < by_target.size()) target_latency.resize(by_target.size());
  for (size_t k = 0; k < messages.size(); k++) {
    turn_messages[k] += messages[k];
    turn_latency_ns[k] += latency_ns[k];
  }
  for (size_t t = 0; t < by_target.size(); t++) target_latency[t].merge(by_target[t]);
}

void Stats::add_latency_sent(const PerPhase<Histogram>& by_phase) {
  for (int p = 0; p < kPhases; p++) {
    phases[p].latency_sent.merge(by_phase[p]);
    latency_sent.merge(by_phase[p]);
  }
}

void Stats::set_unanswered(const std::vector<WaitingMsg>& waiting, int64_t stop) {
  // Their latency, once answered, will exceed every one the window measured: the tail it misses.
  const int64_t slowest = int64_t(latency.max());
  std::vector<bool> seen(size_t(connections), false);
  for (const WaitingMsg& w : waiting) {
    const int64_t age = stop - w.sent;
    if (age <= slowest) continue;
    unanswered++;
    unanswered_max_age_ns = std::max(unanswered_max_age_ns, age);
    if (w.conn >= seen.size()) seen.resize(size_t(w.conn) + 1, false);  // a connection opened during the load
    if (!seen[w.conn]) {
      seen[w.conn] = true;
      unanswered_conns++;
    }
  }
}

json stats_json(const Stats& s, bool histograms) {
  json j = {{"connections", s.connections},
            {"connected", s.connected},
            {"messages", s.messages},
            {"duration_s", r6(s.duration_s)},
            {"msgs_per_sec", rate(s.messages, s.duration_s)},
            {"msize", s.msize},
            {"pipeline", s.pipeline},
            {"protocol", protocol_name(s.protocol)},
            {"per_conn_messages", s.per_conn_messages},
            {"latency_us", latency_json(s.latency, histograms)},
            {"errors", errors_json(s)},
            {"setup_s", r6(s.setup_s)},
            {"warmup_s", r6(s.warmup_s)},
            {"loader_cpu", {{"user_s", r6(s.user_s)}, {"sys_s", r6(s.sys_s)}, {"cpu_frac", r6(s.cpu_frac)}}},
            {"t_start", r6(s.t_start)},
            {"t_stop", r6(s.t_stop)},
            {"aborted", s.aborted},
            {"unanswered",
             {{"count", s.unanswered},
              {"max_age_us", std::round(double(s.unanswered_max_age_ns) / 1e3 * 10) / 10},
              {"connections", s.unanswered_conns}}}};
  if (s.has_served_first)
    j["served_first"] = {{"served", s.first_served}, {"unserved", s.first_unserved}, {"s", r6(s.first_s)}};
  if (s.protocol != Protocol::Echo) {
    j["request_bytes"] = s.request_bytes;
    j["reconnects"] = s.reconnects;
    if (s.protocol == Protocol::Http)
      j["status"] = {
          {"1xx", s.status[0]}, {"2xx", s.status[1]}, {"3xx", s.status[2]}, {"4xx", s.status[3]}, {"5xx", s.status[4]}};
    if (!s.errors.sample.empty()) j["error_sample"] = s.errors.sample;
  }
  if (s.has_phases) {
    j["probe_share"] = s.probe_share;
    json probed = phase_json(s.phases[kProbed], s.open_loop, histograms);
    probed["t_start"] = r6(s.probe_t_start);
    probed["t_stop"] = r6(s.probe_t_stop);
    json unprobed = phase_json(s.unprobed(), s.open_loop, histograms);
    json parts = json::array();
    for (int p : {kUnprobed, kUnprobedAfter}) {
      const PhaseStats& part = s.phases[p];
      parts.push_back({{"messages", part.messages},
                       {"duration_s", r6(part.duration_s)},
                       {"msgs_per_sec", rate(part.messages, part.duration_s)}});
    }
    unprobed["parts"] = parts;  // before and after the probed sub-window (and its guards)
    j["phases"] = {{"unprobed", unprobed}, {"probed", probed}};
    if (s.probe_guard > 0) {  // only for clients that asked for guards: the others see two phases
      j["probe_guard"] = s.probe_guard;
      json guard = phase_json(s.phases[kGuard], s.open_loop, histograms);
      guard["t_start"] = r6(s.guard_t_start);
      guard["t_stop"] = r6(s.guard_t_stop);
      j["phases"]["guard"] = guard;
    }
  }
  if (!s.timeline.empty()) {  // only for clients that asked for it
    json slices = json::array();
    for (size_t i = 0; i < s.timeline.size(); i++) {
      const Histogram& h = s.timeline[i];
      slices.push_back({{"t_s", r6(double(i) * double(s.timeline_slice_ns) / 1e9)},
                        {"messages", h.count()},
                        {"p50_us", us(h.quantile(0.50))},
                        {"p99_us", us(h.quantile(0.99))},
                        {"max_us", us(double(h.max()))}});
    }
    j["timeline"] = {{"slice_s", r6(double(s.timeline_slice_ns) / 1e9)}, {"slices", slices}};
  }
  if (!s.turn_targets.empty()) {  // only for clients that asked for turns
    const int n = int(s.turn_targets.size());
    json served = json::array(), means = json::array(), by_target = json::array();
    for (size_t k = 0; k < s.turn_messages.size(); k++) {
      served.push_back(turn_target(int64_t(k), n));
      means.push_back(s.turn_messages[k] ? us(s.turn_latency_ns[k] / double(s.turn_messages[k])) : 0.0);
    }
    for (int t = 0; t < n; t++) {
      const Histogram& h = t < int(s.target_latency.size()) ? s.target_latency[size_t(t)] : Histogram();
      by_target.push_back({{"target", s.turn_targets[size_t(t)]},
                           {"messages", h.count()},
                           {"latency_us", latency_json(h, histograms)}});
    }
    j["turns"] = {{"turn_s", r6(double(s.turn_ns) / 1e9)}, {"targets", s.turn_targets}, {"served", served},
                  {"messages", s.turn_messages},           {"latency_mean_us", means},  {"by_target", by_target}};
  }
  if (s.open_loop) {  // only for clients that asked for a rate: closed-loop stats keep their exact shape
    j["rate"] = s.rate;
    j["arrivals"] = arrivals_name(s.arrivals);
    j["latency_sent_us"] = latency_json(s.latency_sent, histograms);
    j["open_loop"] = open_loop_json(s);
  }
  return j;
}

json event(const char* name) { return {{"event", name}}; }
json event_at(const char* name, double t) { return {{"event", name}, {"t", r6(t)}}; }
json error_event(const char* kind, const std::string& message) {
  return {{"event", "error"}, {"error", kind}, {"message", message}};
}

}  // namespace netprof
