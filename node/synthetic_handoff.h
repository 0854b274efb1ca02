// Disaggregated prefill -> decode with the synthetic engine (node/synthetic_engine.h) across two
// kvnodes: what a serving fleet with prefill and decode nodes does with each request, run and
// checked from one command (kvmesh-synth --decode-socket ...).
//
// For each request, one after the other:
//   1. prefill on the prefill node: the synthetic engine admits the prompt there, writes its K/V
//      with the append kernel into the prefill node's pools and stores its full blocks (no decode
//      step);
//   2. handoff: HandOffTo(decode node) on the prefill node (node/handoff.h) — the decode node
//      pulls the blocks it lacks, verified against content id and geometry, converted when the
//      two nodes' layouts differ;
//   3. decode on the decode node: the synthetic engine admits the same prompt there — the
//      handed-off blocks are pool hits — and runs its decode steps, each checked against the
//      dense reference computed from the prompt alone.
// A failed handoff is counted, not fatal: the decode node then computes what it lacks, and its
// checks still decide whether the data is right.
// Streaming (stream_layers, kvmesh-synth --stream-layers; node/handoff.h "Streaming"): the
// prefill engine starts a streaming handoff of its request right after Admit (HandOffStream on
// its own connection), prefills layer-major and announces every `layer_group` layers as they are
// written (HandOffLayers), and after StoreFullBlocks waits for the decode node's answer
// (HandOffLayers with wait) before its Release; then step 3 as above.
//
// Thread safety: RunDisaggregated is a blocking call; it holds no shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "node/synthetic_engine.h"

namespace kvmesh {

struct DisaggregatedOptions {
  SyntheticEngineOptions prefill;  // client: the prefill node; its decode_tokens are ignored (0)
  SyntheticEngineOptions decode;   // client: the decode node; concurrency is ignored (1)
  std::string decode_node_id;      // as the prefill node will know it
  std::string decode_address;      // the decode node's TCP control address, as the prefill node
                                   // reaches it
  std::chrono::milliseconds handoff_deadline{5000};  // of each handoff, on the decode node
  bool stream_layers = false;    // stream each request's layers as prefill writes them
  std::int32_t layer_group = 1;  // layers per announcement when streaming
  // Called after each request with (done, total).
  std::function<void(std::int64_t, std::int64_t)> progress;
};

struct DisaggregatedStats {
  SyntheticWorkloadStats prefill;  // the prefill node's side (no decode steps)
  SyntheticWorkloadStats decode;   // the decode node's side: hits, decode steps and checks
  std::int64_t handoffs = 0;       // answered
  std::int64_t failed_handoffs = 0;
  std::int64_t wanted_blocks = 0;  // HandoffResponse fields, summed
  std::int64_t had_blocks = 0;
  std::int64_t moved_blocks = 0;
  std::int64_t held_blocks = 0;
  double handoff_seconds = 0;  // summed over the handoffs (streaming: start, announcements, wait)
  bool streamed = false;       // layer by layer (options.stream_layers)
  std::int64_t announcements = 0;  // streaming: layer groups announced
  // Streaming: summed over the handoffs, the prefill engine's wait for the answer after its
  // prefill ended (the layers still on the wire then).
  double wait_seconds = 0;
  double seconds = 0;  // the whole run
  std::string first_handoff_error;
};

// Errors: a node could not be reached or attached (nothing ran), a bad option. Single requests,
// handoffs and checks that fail are counted in the stats.
Result<DisaggregatedStats> RunDisaggregated(const DisaggregatedOptions& options,
                                            std::span<const TraceRequest> requests);

}  // namespace kvmesh
