// The ZeroMQ load engine (`"transport": "zmq"`): N DEALER sockets connected to tcp://target play
// ping-pong with a ROUTER backend; same events and stats as the TCP engine (PROTOCOL.md, "ZeroMQ mode").
#pragma once

#include "engine.hpp"

namespace netprof {

// Same contract as run_load(); run_load() hands zmq requests to it.
RunOutcome run_zmq_load(const RunRequest& req, const EngineConfig& cfg, const Emit& emit, const Watch& watch);

}  // namespace netprof
