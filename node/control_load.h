// RunControlLoad: a control-plane load of a kvnode — `clients` connections, each a thread sending
// one request after the other for `duration` — for `kvctl bench` and bench/node_control_bench.
//
// Each client runs the mix below in turn, so every kind of request is measured under the same
// load: Lookup of a cached prompt of prompt_tokens tokens (admitted and stored once before the
// run by one warm-up connection), Lookup of a prompt that misses, and Status. With
// admit_release, each client also admits and releases its own prompt (the engine path; blocks
// are allocated and freed). Latency is per request, from send to response, in the client.
// A request the node refuses (kResourceExhausted over the in-flight limits, a deadline) counts as
// an error with its code; the run goes on.
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
