// The synthetic engine: a stand-in for an inference engine that attaches to a kvnode exactly as a
// real one does and checks everything it reads.
//
// For each request of a workload (Mooncake-format trace requests; their hash_ids become tokens
// through BlockTokens, block_tokens tokens per id):
//   1. Admit the prompt (salt and LoRA id from the options) → block tables, reused tokens by tier.
//      Refused for room (kResourceExhausted: the other workers' running requests pin the pool), it
//      waits, as an engine's scheduler keeps a request queued until running ones finish: it tries
//      again after each Release of another worker, for at most admit_wait. A refusal while no
//      other worker holds a request (the prompt is longer than what the pool can give) fails at
//      once;
//   2. prefill: K/V of every position from reused_tokens on, every layer, every rank pool, written
//      through the append kernel (quantise-on-write) straight into the node's shared pools —
//      with layer_major, model layer by model layer as a forward pass writes them, calling
//      hooks.layers_written after each group (the streaming handoff, node/synthetic_handoff.h);
//   3. StoreFullBlocks;
//   4. decode_tokens decode steps: AppendTokens, append the new position's K/V, then paged decode
//      attention on the pools (q_len 1, the pool's window) for the checked layers, each output
//      compared with the dense float64 reference over regenerated K/V (node/synthetic_kv.h) —
//      a wrong, stale, partial or corrupt block, or one without its scales, is a failed check;
//   5. Release;
//   6. EngineReport: the request's outcome and check counts go to the node, which exports them
//      (kvmesh_engine_checks_total, kvmesh_engine_check_failures_total); best effort, a node that
//      refuses it changes nothing.
// Checked layers: every layer (check_all_layers), or the first, the middle and the last local
// layer of every pool — a check covers every position of the sequence in that layer, reused and
// restored blocks included.
//
// Backends (kernels/backend.h): the kernels run where the pool's memory is, so each worker picks
// one per pool device (AttachedPools::device):
//   host pools (memfd, device -1)  the CPU backend (kernel_threads threads per worker), given the
//                                  worker's host arrays as they are: no copy, no allocation per
//                                  call — the main command and the benchmarks measure this path;
//   device pools (CUDA IPC)        a CUDA backend of that device, made once per worker and device;
//                                  the kernel arguments (K/V rows, queries, block tables,
//                                  cu_tokens, start_pos, kv_lens) are uploaded into backend buffers
//                                  allocated once and grown, the attention output is downloaded.
//                                  Prefill waits for the device before StoreFullBlocks (the node
//                                  publishes the blocks then). Needs a build with CUDA and the
//                                  device (else RunSyntheticWorkload fails: kNotSupported /
//                                  kCudaError).
// Every check runs on the host, against the dense float64 reference, whichever backend ran.
//
// `concurrency` workers, each with its own connection, take requests in trace order. Supported
// models: pools with kv_factor 2 (K and V; full attention and sliding windows, every dtype and
// layout, any tensor_parallel_size); an MLA model is kNotSupported.
//
// Thread safety: RunSyntheticWorkload may be called from any thread; it blocks until done.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/result.h"
#include "node/client.h"
#include "pool/trace.h"

namespace kvmesh {

// Layer-major prefill's calls into its caller (the disaggregated streaming handoff, node/
// synthetic_handoff.h), on the request's own connection (its request id names the sequence there).
// Errors are the caller's to record: prefill goes on.
struct PrefillHooks {
  // After Admit: (connection, engine request id, prompt).
  std::function<void(NodeClient&, std::uint64_t, std::span<const Token>)> admitted;
  // After each group of layers: model layers [0, n) of every computed position are written in
  // every pool (device writes synchronised).
  std::function<void(NodeClient&, std::uint64_t, std::int32_t n)> layers_written;
  // After StoreFullBlocks of the prompt, before any decode step and Release.
  std::function<void(NodeClient&, std::uint64_t)> prefilled;
};

struct SyntheticEngineOptions {
  NodeClientOptions client;      // address and secret of the node (its Unix socket)
  std::int32_t concurrency = 2;  // workers, each with its own connection
  // How long a request refused for room waits for the other workers' requests to release theirs
  // (step 1 above); 0: it fails at once.
  std::chrono::milliseconds admit_wait{30000};
  std::int32_t block_tokens = kMooncakeBlockTokens;  // tokens per trace hash id
  std::int32_t decode_tokens = 2;                    // decode steps (each checked) per request
  bool check_all_layers = false;
  std::string salt;  // cache salt of every request (the tenant)
  std::uint64_t lora_id = 0;
  std::int32_t kernel_threads = 1;  // CPU backend threads per worker (host pools)
  bool report_to_node = true;       // EngineReport after each request
  // Layer-major prefill: every computed position of model layer 0 in every pool, then layer 1,
  // ... (an engine's forward pass), calling hooks.layers_written after every `layer_group`
  // layers. Off: position runs, every layer of a pool, pool after pool.
  bool layer_major = false;
  std::int32_t layer_group = 1;
  PrefillHooks hooks;
  // Called after each request with (done, total); from worker threads, serialised.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

struct SyntheticWorkloadStats {
  std::int64_t requests = 0;
  std::int64_t failed_requests = 0;  // refused by the node or failed locally (error below)
  std::int64_t admit_waits = 0;      // requests refused for room first, then admitted
  double admit_wait_seconds = 0;     // the time those requests waited
  std::int64_t prompt_tokens = 0;
  std::int64_t reused_tokens = 0;    // the node's reused_tokens, summed
  std::int64_t computed_tokens = 0;  // prompt tokens written by prefill
  std::int64_t input_blocks = 0;     // block positions of the prompts
  std::int64_t pool_hit_blocks = 0;
  std::int64_t host_hit_blocks = 0;
  std::int64_t disk_hit_blocks = 0;
  std::int64_t remote_hit_blocks = 0;  // fetched from a peer by the node
  std::int64_t decode_tokens = 0;
  std::int64_t checks = 0;  // decode outputs compared with the reference (per layer, head)
  std::int64_t check_failures = 0;
  double worst_error = 0;  // largest |kernel - reference| seen
  double seconds = 0;
  std::string first_error;  // the first failed request or check, for the report

  [[nodiscard]] double hit_rate() const {
    return input_blocks == 0 ? 0.0
                             : static_cast<double>(pool_hit_blocks + host_hit_blocks +
                                                   disk_hit_blocks + remote_hit_blocks) /
                                   static_cast<double>(input_blocks);
  }
};

// Runs the workload. Errors: connecting or attaching fails (then nothing ran: this includes device
// pools in a build without CUDA or without their device), an unsupported model. Failures of single
// requests and checks are counted in the stats, not returned.
Result<SyntheticWorkloadStats> RunSyntheticWorkload(const SyntheticEngineOptions& options,
                                                    std::span<const TraceRequest> requests);

// Adds `a`'s counts to `into` (the largest worst_error, the first first_error); not seconds.
void MergeWorkloadStats(const SyntheticWorkloadStats& a, SyntheticWorkloadStats& into);

// Changes whenever the values node/synthetic_kv.h generates change: blocks an older kvmesh-synth
// stored (a node's disk tier kept from before an upgrade) then have other content ids than today's
// prompts and are never reused, where their old values would fail today's checks.
inline constexpr std::uint64_t kSyntheticTokensVersion = 0x5eed'0002'0000'0000ull;

// The prompt tokens of a trace request: BlockTokens of each hash id xor kSyntheticTokensVersion
// (block_tokens each), cut to input_length.
std::vector<Token> TraceTokens(const TraceRequest& request, std::int32_t block_tokens);

}  // namespace kvmesh
