#include "node/synthetic_handoff.h"

#include <memory>

#include "common/strings.h"
#include "node/client.h"

namespace kvmesh {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<DisaggregatedStats> RunDisaggregated(const DisaggregatedOptions& options,
                                            std::span<const TraceRequest> requests) {
  if (options.decode_node_id.empty() || options.decode_address.empty()) {
    return Status::InvalidArgument(
        "disaggregated run: the decode node's id and address are needed");
  }
  if (options.handoff_deadline.count() <= 0 || options.handoff_deadline.count() > 600000) {
    return Status::InvalidArgument("disaggregated run: the handoff deadline must be 1 ms..600 s");
  }
  if (options.layer_group < 1) {
    return Status::InvalidArgument("disaggregated run: the layer group must be at least 1");
  }
  SyntheticEngineOptions prefill = options.prefill;
  prefill.decode_tokens = 0;
  prefill.concurrency = 1;
  prefill.progress = nullptr;
  SyntheticEngineOptions decode = options.decode;
  decode.concurrency = 1;
  decode.progress = nullptr;
  NodeClientOptions control = options.prefill.client;
  control.client_name = StrCat(options.prefill.client.client_name, "-handoff");
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> client, NodeClient::Connect(control));
  SequenceOptions sequence;
  sequence.domain.salt = options.prefill.salt;
  sequence.domain.lora_id = options.prefill.lora_id;
  DisaggregatedStats out;
  out.streamed = options.stream_layers;
  // Streaming: the prefill engine's hooks (node/synthetic_engine.h) run the handoff on its own
  // connection; the request's answer (or its first error) lands here.
  Result<rpc::HandoffResponse> streamed = Status::NotFound("no handoff");
  std::uint64_t stream_id = 0;
  std::int32_t written = 0;  // model layers announced
  if (options.stream_layers) {
    prefill.layer_major = true;
    prefill.layer_group = options.layer_group;
    prefill.hooks.admitted = [&](NodeClient& c, std::uint64_t request,
                                 std::span<const Token> prompt) {
      const auto t = std::chrono::steady_clock::now();
      stream_id = 0;
      written = 0;
      streamed =
          c.HandOffStream(request, options.decode_node_id, options.decode_address, prompt, sequence,
                          static_cast<std::uint32_t>(options.handoff_deadline.count()));
      out.handoff_seconds += Since(t);
      if (streamed.ok() && streamed->streaming()) stream_id = streamed->handoff_id();
    };
    prefill.hooks.layers_written = [&](NodeClient& c, std::uint64_t, std::int32_t n) {
      if (stream_id == 0) return;
      const auto t = std::chrono::steady_clock::now();
      Result<rpc::HandoffResponse> r = c.HandOffLayers(stream_id, n);
      out.handoff_seconds += Since(t);
      written = n;
      ++out.announcements;
      if (!r.ok()) {
        streamed = r.status();
        stream_id = 0;
      }
    };
    prefill.hooks.prefilled = [&](NodeClient& c, std::uint64_t) {
      if (stream_id == 0) return;
      const auto t = std::chrono::steady_clock::now();
      streamed = c.HandOffLayers(stream_id, written, /*wait=*/true);
      out.wait_seconds += Since(t);
      out.handoff_seconds += Since(t);
    };
  }
  const auto start = std::chrono::steady_clock::now();
  const auto total = static_cast<std::int64_t>(requests.size());
  for (std::int64_t i = 0; i < total; ++i) {
    const std::span<const TraceRequest> one = requests.subspan(static_cast<std::size_t>(i), 1);
    streamed = Status::NotFound("the prefill engine started no handoff");
    KVMESH_ASSIGN_OR_RETURN(const SyntheticWorkloadStats p, RunSyntheticWorkload(prefill, one));
    MergeWorkloadStats(p, out.prefill);
    out.prefill.seconds += p.seconds;
    const std::vector<Token> tokens = TraceTokens(one.front(), prefill.block_tokens);
    Result<rpc::HandoffResponse> h = std::move(streamed);
    if (!options.stream_layers) {
      const auto handoff_start = std::chrono::steady_clock::now();
      h = client->HandOffTo(options.decode_node_id, options.decode_address, tokens, sequence,
                            static_cast<std::uint32_t>(options.handoff_deadline.count()));
      out.handoff_seconds += Since(handoff_start);
    }
    if (h.ok()) {
      ++out.handoffs;
      out.wanted_blocks += h->wanted_blocks();
      out.had_blocks += h->had_blocks();
      out.moved_blocks += h->moved_blocks();
      out.held_blocks += h->held_blocks();
    } else {
      ++out.failed_handoffs;
      if (out.first_handoff_error.empty()) out.first_handoff_error = h.status().ToString();
    }
    KVMESH_ASSIGN_OR_RETURN(const SyntheticWorkloadStats d, RunSyntheticWorkload(decode, one));
    MergeWorkloadStats(d, out.decode);
    out.decode.seconds += d.seconds;
    if (options.progress) options.progress(i + 1, total);
  }
  out.seconds = Since(start);
  return out;
}

}  // namespace kvmesh
