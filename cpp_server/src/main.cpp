// netprof-loader: command line, signals, and the one-shot mode. See ../PROTOCOL.md.
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "control.hpp"
#include "engine.hpp"
#include "netprof/fd.hpp"

using namespace netprof;

namespace {

const char* kUsage = R"(usage:
  netprof-loader --control-fd N [--threads T] [--cpus LIST]
  netprof-loader --target IP:PORT -c N [-d SECONDS] [-s MSIZE] [--warmup S] [--pipeline K]
                 [--think SPEC] [--connect-timeout S] [--sources IP,IP] [--transport tcp|zmq|zmtp]
                 [--probe-share F [--probe-guard S]] [--protocol echo|http|line] [--request 'METHOD /path']
                 [--header 'Name: value']... [--body TEXT] [--host HOST] [--line TEXT]
                 [--rate R [--arrivals constant|poisson] [--max-connections N]] [--threads T] [--cpus LIST]
                 [--warmup-after connected|served] [--json]
Control mode serves JSON-lines requests (PROTOCOL.md) on the stream socket N its parent passed (one end
of a socketpair) and exits when the parent closes it; one-shot mode runs once and prints the stats.
The loader dies with its parent (SIGKILL) in both modes.
think SPEC: none | fixed:US | uniform:MIN-MAX | poisson:MEAN (microseconds).
--transport zmq: N ZeroMQ DEALER sockets instead of TCP connections (the backend is a ROUTER);
--transport zmtp: the same conversation with the loader speaking ZMTP 3.0 itself (no libzmq thread).
--probe-share F: split the window into a centred probed sub-window (F of it, 0..1) and the rest,
                 and report both phases (stats "phases"); --probe-guard S: S seconds on each side of
                 it count in neither phase (stats phases.guard).
--protocol http: HTTP/1.1 keep-alive exchanges (--request, --header, --body, --host);
--protocol line: send --line and a newline, read one newline-terminated reply.
--rate R: open-loop load, R requests/s over all connections sent on a schedule (latency from each
          request's intended time); --arrivals: constant gaps (default) or poisson; --max-connections N:
          a request due while every connection has --pipeline in flight goes out on a new connection,
          up to N open at once (default: -c, none opened).
--warmup-after served: the warm-up begins once every connection has had one message answered (the
                server has accepted them all); connected (default): once every connection is up.
)";

[[noreturn]] void fatal(const std::string& msg) {
  fprintf(stderr, "netprof-loader: %s\n", msg.c_str());
  exit(1);
}

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
  if (!check_fd_limit(req.run, &why)) bad_args(why);
  Emit emit = [](const json&) { return true; };
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
    if (s.protocol != Protocol::Echo) {
      json j = stats_json(s);
      printf("protocol %s: errors %s, reconnects %llu%s%s\n", protocol_name(s.protocol), j["errors"].dump().c_str(),
             (unsigned long long)s.reconnects, s.protocol == Protocol::Http ? ", status " : "",
             s.protocol == Protocol::Http ? j["status"].dump().c_str() : "");
      if (!s.errors.sample.empty()) printf("first protocol error: %s\n", s.errors.sample.c_str());
    }
    if (s.open_loop) {
      json ol = stats_json(s)["open_loop"];
      printf("open loop %s %g/s: %s\n", arrivals_name(s.arrivals), s.rate, ol.dump().c_str());
      printf("latency from the send us: p50 %s p99 %s\n", stats_json(s)["latency_sent_us"]["p50"].dump().c_str(),
             stats_json(s)["latency_sent_us"]["p99"].dump().c_str());
    }
    if (s.has_phases) {
      auto per_s = [](const PhaseStats& ph) { return ph.duration_s > 0 ? double(ph.messages) / ph.duration_s : 0.0; };
      const PhaseStats unprobed = s.unprobed();
      printf("unprobed: %llu messages in %.3f s = %.1f msgs/s (before the probed part %.1f, after it %.1f)\n",
             (unsigned long long)unprobed.messages, unprobed.duration_s, per_s(unprobed), per_s(s.phases[kUnprobed]),
             per_s(s.phases[kUnprobedAfter]));
      for (int p : {kProbed, kGuard}) {
        if (p == kGuard && s.probe_guard <= 0) continue;
        const PhaseStats& ph = s.phases[p];
        printf("%s: %llu messages in %.3f s = %.1f msgs/s\n", p == kProbed ? "probed" : "guard",
               (unsigned long long)ph.messages, ph.duration_s, per_s(ph));
      }
    }
  }
  if (fflush(stdout) != 0) {
    fprintf(stderr, "netprof-loader: cannot write the result to stdout: %s\n", strerror(errno));
    return 1;
  }
  if (out.signalled) return 128 + SIGTERM;
  if (out.error_kind) {
    fprintf(stderr, "netprof-loader: %s: %s\n", out.error_kind, out.error_message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int run_main(int argc, char** argv) {
  enum {
    kControlFd = 1000,
    kRemoved,
    kTarget,
    kWarmup,
    kPipeline,
    kThink,
    kThreads,
    kCpus,
    kSources,
    kCtimeout,
    kJson,
    kTransport,
    kProbeShare,
    kProbeGuard,
    kProtocol,
    kRequest,
    kHeader,
    kBody,
    kHost,
    kLine,
    kRate,
    kArrivals,
    kMaxConnections,
    kWarmupAfter
  };
  static const option opts[] = {{"control-fd", required_argument, nullptr, kControlFd},
                                {"control", required_argument, nullptr, kRemoved},
                                {"allow-remote-control", no_argument, nullptr, kRemoved},
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
                                {"probe-share", required_argument, nullptr, kProbeShare},
                                {"probe-guard", required_argument, nullptr, kProbeGuard},
                                {"protocol", required_argument, nullptr, kProtocol},
                                {"request", required_argument, nullptr, kRequest},
                                {"header", required_argument, nullptr, kHeader},
                                {"body", required_argument, nullptr, kBody},
                                {"host", required_argument, nullptr, kHost},
                                {"line", required_argument, nullptr, kLine},
                                {"rate", required_argument, nullptr, kRate},
                                {"arrivals", required_argument, nullptr, kArrivals},
                                {"max-connections", required_argument, nullptr, kMaxConnections},
                                {"warmup-after", required_argument, nullptr, kWarmupAfter},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};

  long control_fd = -1;
  bool as_json = false;
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
      case kControlFd:
        control_fd = need_int("--control-fd");
        if (control_fd < 0 || control_fd > INT32_MAX) bad_args("--control-fd needs a descriptor number");
        break;
      case kRemoved:
        bad_args(
            "--control HOST:PORT was removed: the control channel is private now; pass one end of a socketpair "
            "with --control-fd N (PROTOCOL.md)");
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
      case kProbeShare: request["probe_share"] = need_num("--probe-share"); break;
      case kProbeGuard: request["probe_guard"] = need_num("--probe-guard"); break;
      case kProtocol: request["protocol"] = optarg; break;
      case kRequest: request["request"] = optarg; break;
      case kHeader: request["headers"].push_back(optarg); break;
      case kBody: request["body"] = optarg; break;
      case kHost: request["host"] = optarg; break;
      case kLine: request["line"] = optarg; break;
      case kRate: request["rate"] = need_num("--rate"); break;
      case kArrivals: request["arrivals"] = optarg; break;
      case kMaxConnections: request["max_connections"] = need_int("--max-connections"); break;
      case kWarmupAfter: request["warmup_after"] = optarg; break;
      case 'h': fputs(kUsage, stdout); return 0;
      default: bad_args("unknown option", true);
    }
  }
  if (optind < argc) bad_args(std::string("unexpected argument '") + argv[optind] + "'");
  if ((control_fd >= 0) == request.contains("target")) bad_args("give exactly one of --control-fd and --target", true);

  // Die with the parent (netprof): a loader left behind would keep its connections (and, in control
  // mode, wait on a channel nobody writes to). PR_SET_PDEATHSIG fires when the thread that started
  // us exits. If the parent died before prctl() we have been re-parented already: exit now.
  const pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fatal(std::string("prctl(PR_SET_PDEATHSIG): ") + strerror(errno));
  if (getppid() != parent) fatal("the parent exited while the loader was starting");
  // In control mode the channel covers the remaining race (a parent gone before getppid() above):
  // its end is closed, so the first read is EOF and the loader exits.
  std::string why;
  if (control_fd >= 0 && !prepare_channel(int(control_fd), &why)) bad_args(why);

  // One fd per connection: use all the descriptors we are allowed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)  // the fd-limit check before each run names the real limit
      fprintf(stderr, "netprof-loader: cannot raise RLIMIT_NOFILE: %s\n", strerror(errno));
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
  sigset_t mask;
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || sigemptyset(&mask) != 0 || sigaddset(&mask, SIGINT) != 0 ||
      sigaddset(&mask, SIGTERM) != 0 || pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0)
    fatal("cannot set up signal handling");
  Fd signal_fd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd) fatal(std::string("signalfd: ") + strerror(errno));
  const int sfd = signal_fd.get();

  if (control_fd >= 0) return serve_control(Fd(int(control_fd)), cfg, sfd);
  if (!request.contains("connections")) bad_args("one-shot mode needs -c/--connections");
  return one_shot(request, cfg, as_json, sfd);
}

int main(int argc, char** argv) {
  // Anything unexpected ends in one line on stderr and exit code 1, never in std::terminate.
  try {
    return run_main(argc, argv);
  } catch (const std::bad_alloc&) {
    fprintf(stderr, "netprof-loader: internal: out of memory\n");
  } catch (const std::exception& e) {
    fprintf(stderr, "netprof-loader: internal: %s\n", e.what());
  }
  return 1;
}
