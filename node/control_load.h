// RunControlLoad: a control-plane load of a kvnode — `clients` connections, each a thread sending
// one request after the other for `duration` — for `kvctl bench` and bench/node_control_bench.
//
// Each client runs the mix below in turn, so every kind of request is measured under the same
// load: Lookup of a cached prompt of prompt_tokens tokens, Lookup of a prompt that misses, and
// Status. The cached prompt is written once before the run by one warm-up connection (admitted
// and stored at priority 0, so that it is the first to be evicted afterwards, and below the default
// offload_min_priority, so that no tier takes a copy: on a live node it displaces as little of the
// real cache as it can). With
// admit_release, each client also admits and releases its own prompt (the engine path; blocks
// are allocated and freed). Latency is per request, from send to response, in the client.
// With rate_per_client, each client sends on a schedule instead of back to back: a load of a
// known rate, under which latency is the node's and not the queue of a saturated run.
// A request the node refuses (kResourceExhausted over the in-flight limits, a deadline) counts as
// an error with its code; the run goes on. A client whose connection the node closed (it stopped
// or died) stops there; the run ends early once every client stopped, and `seconds` is the time
// until the last one did, so that the rate counts only the time the node was answering.
//
// Thread safety: RunControlLoad may be called from any thread; it blocks for `duration`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/client.h"

namespace kvmesh {

struct ControlLoadOptions {
  NodeClientOptions client;  // address, secret, role
  int clients = 64;
  std::chrono::milliseconds duration{5000};
  std::int64_t prompt_tokens = 16384;
  bool admit_release = false;
  // Requests per second of each client (0: back to back, as fast as the node answers). Paced
  // clients send on a fixed schedule from the start; a client that falls behind sends at once.
  double rate_per_client = 0;
  // Called about every 100 ms with the elapsed time and the requests done so far.
  std::function<void(std::chrono::milliseconds, std::int64_t)> progress;
};

struct ControlLoadOp {
  std::string name;                  // "lookup_hit", "lookup_miss", "status", "admit_release"
  std::vector<double> latencies_us;  // successful requests
  std::int64_t errors = 0;
};

struct ControlLoadResult {
  double seconds = 0;
  std::int64_t requests = 0;  // answered, errors included
  std::int64_t errors = 0;
  std::map<std::string, std::int64_t> errors_by_code;  // "resource_exhausted" -> n
  std::vector<ControlLoadOp> ops;
  std::int64_t cached_tokens = 0;  // of the hit prompt, as the warm-up Lookup saw it
  std::string first_error;
  int clients_lost = 0;  // clients whose connection the node closed before the end

  [[nodiscard]] double ops_per_s() const {
    return seconds > 0 ? static_cast<double>(requests) / seconds : 0;
  }
};

// q-quantile (0..1) of latencies (sorted or not), 0 when empty.
double LatencyQuantile(std::vector<double> us, double q);

// Errors: the warm-up connection or admission fails, or no client could connect.
Result<ControlLoadResult> RunControlLoad(const ControlLoadOptions& options);

// A deterministic prompt of n tokens; different seeds give prompts with no common prefix.
std::vector<Token> LoadPrompt(std::int64_t n, std::uint64_t seed);

}  // namespace kvmesh
