// netprof-loader: command line, signals, and the one-shot mode. See ../PROTOCOL.md.
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "control.hpp"
#include "engine.hpp"

using namespace netprof;

namespace {

const char* kUsage = R"(usage:
  netprof-loader --control 127.0.0.1:PORT [--threads T] [--cpus LIST] [--allow-remote-control]
  netprof-loader --target IP:PORT -c N [-d SECONDS] [-s MSIZE] [--warmup S] [--pipeline K]
                 [--think SPEC] [--connect-timeout S] [--sources IP,IP] [--transport tcp|zmq]
                 [--threads T] [--cpus LIST] [--json]
Control mode serves JSON-lines requests (PROTOCOL.md); one-shot mode runs once and prints the stats.
think SPEC: none | fixed:US | uniform:MIN-MAX | poisson:MEAN (microseconds).
--transport zmq: N ZeroMQ DEALER sockets instead of TCP connections (the backend is a ROUTER).
)";

[[noreturn]] void bad_args(const std::string& msg, bool usage = false) {
  fprintf(stderr, "netprof-loader: %s\n%s", msg.c_str(), usage ? kUsage : "");
  exit(2);
}

bool parse_long(const char* s, long* out) {
  char* end = nullptr;
  errno = 0;
  *out = strtol(s, &end, 10);
  return errno == 0 && end != s && *end == 0;
}

bool parse_double(const char* s, double* out) {
  char* end = nullptr;
  errno = 0;
  *out = strtod(s, &end);
  return errno == 0 && end != s && *end == 0;
}

// "0", "1,2", "1-3" -> CPU list.
bool parse_cpus(const std::string& spec, std::vector<int>* out) {
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string part = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    long lo, hi;
    size_t dash = part.find('-');
    if (dash == std::string::npos) {
      if (!parse_long(part.c_str(), &lo)) return false;
      hi = lo;
    } else if (!parse_long(part.substr(0, dash).c_str(), &lo) || !parse_long(part.substr(dash + 1).c_str(), &hi)) {
      return false;
    }
    if (lo < 0 || hi < lo || hi >= CPU_SETSIZE) return false;
    for (long c = lo; c <= hi; c++) out->push_back(int(c));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return !out->empty();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t i = s.find(sep, pos);
    parts.push_back(s.substr(pos, i == std::string::npos ? std::string::npos : i - pos));
    if (i == std::string::npos) return parts;
    pos = i + 1;
  }
}

int one_shot(const json& request, const EngineConfig& cfg, bool as_json, int signal_fd) {
  Request req;
  std::string why;
  if (!parse_request_obj(request, &req, &why)) bad_args(why);
  if (!check_fd_limit(req.run.connections, &why)) bad_args(why);
  std::function<bool(const json&)> emit = [](const json&) { return true; };
  RunOutcome out = run_load(req.run, cfg, emit, Watch{-1, nullptr, signal_fd});
  if (out.error_kind && std::string(out.error_kind) == err::kBadRequest) bad_args(out.error_message);  // refused
  const Stats& s = out.stats;
  if (as_json) {
    printf("%s\n", stats_json(s).dump().c_str());
  } else {
    json lat = stats_json(s)["latency_us"];
    printf("%d/%d connected, %llu messages in %.3f s = %.1f msgs/s\n", s.connected, s.connections,
           (unsigned long long)s.messages, s.duration_s, s.duration_s > 0 ? double(s.messages) / s.duration_s : 0.0);
    printf("latency us: p50 %s p99 %s p999 %s max %s\n", lat["p50"].dump().c_str(), lat["p99"].dump().c_str(),
           lat["p999"].dump().c_str(), lat["max"].dump().c_str());
    printf("errors: connect %llu reset %llu timeout %llu mismatch %llu; loader cpu_frac %.3f\n",
           (unsigned long long)s.errors.connect, (unsigned long long)s.errors.reset,
           (unsigned long long)s.errors.timeout, (unsigned long long)s.errors.mismatch, s.cpu_frac);
  }
  fflush(stdout);
  if (out.signalled) return 128 + SIGTERM;
  if (out.error_kind) {
    fprintf(stderr, "netprof-loader: %s: %s\n", out.error_kind, out.error_message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  enum { kControl = 1000, kAllowRemote, kTarget, kWarmup, kPipeline, kThink, kThreads, kCpus, kSources, kCtimeout, kJson, kTransport };
  static const option opts[] = {
      {"control", required_argument, nullptr, kControl},
      {"allow-remote-control", no_argument, nullptr, kAllowRemote},
      {"target", required_argument, nullptr, kTarget},
      {"connections", required_argument, nullptr, 'c'},
      {"duration", required_argument, nullptr, 'd'},
      {"msize", required_argument, nullptr, 's'},
      {"warmup", required_argument, nullptr, kWarmup},
      {"pipeline", required_argument, nullptr, kPipeline},
      {"think", required_argument, nullptr, kThink},
      {"threads", required_argument, nullptr, kThreads},
      {"cpus", required_argument, nullptr, kCpus},
      {"sources", required_argument, nullptr, kSources},
      {"connect-timeout", required_argument, nullptr, kCtimeout},
      {"json", no_argument, nullptr, kJson},
      {"transport", required_argument, nullptr, kTransport},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};

  std::string control, target;
  bool allow_remote = false, as_json = false;
  EngineConfig cfg;
  json request = {{"cmd", "run"}};
  int opt;
  while ((opt = getopt_long(argc, argv, "c:d:s:h", opts, nullptr)) != -1) {
    long l;
    double d;
    auto need_int = [&](const char* name) {
      if (!parse_long(optarg, &l)) bad_args(std::string(name) + " needs an integer, got '" + optarg + "'");
      return l;
    };
    auto need_num = [&](const char* name) {
      if (!parse_double(optarg, &d)) bad_args(std::string(name) + " needs a number, got '" + optarg + "'");
      return d;
    };
    switch (opt) {
      case kControl: control = optarg; break;
      case kAllowRemote: allow_remote = true; break;
      case kTarget: request["target"] = optarg; break;
      case 'c': request["connections"] = need_int("--connections"); break;
      case 'd': request["duration"] = need_num("--duration"); break;
      case 's': request["msize"] = need_int("--msize"); break;
      case kWarmup: request["warmup"] = need_num("--warmup"); break;
      case kPipeline: request["pipeline"] = need_int("--pipeline"); break;
      case kThink: request["think"] = optarg; break;
      case kCtimeout: request["connect_timeout"] = need_num("--connect-timeout"); break;
      case kSources: request["sources"] = split(optarg, ','); break;
      case kThreads:
        cfg.threads = int(need_int("--threads"));
        if (cfg.threads < 1 || cfg.threads > 64) bad_args("--threads must be in 1..64");
        break;
      case kCpus:
        if (!parse_cpus(optarg, &cfg.cpus)) bad_args(std::string("--cpus: bad CPU list '") + optarg + "'");
        break;
      case kJson: as_json = true; break;
      case kTransport: request["transport"] = optarg; break;
      case 'h': fputs(kUsage, stdout); return 0;
      default: bad_args("unknown option", true);
    }
  }
  if (optind < argc) bad_args(std::string("unexpected argument '") + argv[optind] + "'");
  if (control.empty() == !request.contains("target")) bad_args("give exactly one of --control and --target", true);

  // One fd per connection: use all the descriptors we are allowed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (!cfg.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cfg.cpus) CPU_SET(c, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0) bad_args(std::string("--cpus: ") + strerror(errno));
  }
  // Signals arrive through a signalfd watched by whichever loop is running, so a SIGTERM in the
  // middle of a run stops it promptly and every socket is closed on the way out. Blocked before any
  // worker thread exists, so the threads inherit the mask.
  signal(SIGPIPE, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  if (!control.empty()) {
    sockaddr_in addr{};
    if (!parse_hostport(control, &addr)) bad_args("--control needs IPv4:PORT, got '" + control + "'");
    if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127 && !allow_remote)
      bad_args("--control " + control + " is not a loopback address; pass --allow-remote-control to allow it");
    return serve_control(addr, cfg, sfd);
  }
  if (!request.contains("connections")) bad_args("one-shot mode needs -c/--connections");
  return one_shot(request, cfg, as_json, sfd);
}
