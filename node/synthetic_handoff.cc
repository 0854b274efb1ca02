#include "node/synthetic_handoff.h"

#include <memory>

#include "common/strings.h"
#include "node/client.h"

namespace kvmesh {
namespace {

void Add(const SyntheticWorkloadStats& from, SyntheticWorkloadStats* into) {
  into->requests += from.requests;
  into->failed_requests += from.failed_requests;
  into->prompt_tokens += from.prompt_tokens;
  into->reused_tokens += from.reused_tokens;
  into->computed_tokens += from.computed_tokens;
  into->input_blocks += from.input_blocks;
  into->pool_hit_blocks += from.pool_hit_blocks;
  into->host_hit_blocks += from.host_hit_blocks;
  into->disk_hit_blocks += from.disk_hit_blocks;
  into->remote_hit_blocks += from.remote_hit_blocks;
  into->decode_tokens += from.decode_tokens;
  into->checks += from.checks;
  into->check_failures += from.check_failures;
  into->worst_error = std::max(into->worst_error, from.worst_error);
  into->seconds += from.seconds;
  if (into->first_error.empty()) into->first_error = from.first_error;
}

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
  const auto start = std::chrono::steady_clock::now();
  const auto total = static_cast<std::int64_t>(requests.size());
  for (std::int64_t i = 0; i < total; ++i) {
    const std::span<const TraceRequest> one = requests.subspan(static_cast<std::size_t>(i), 1);
    KVMESH_ASSIGN_OR_RETURN(const SyntheticWorkloadStats p, RunSyntheticWorkload(prefill, one));
    Add(p, &out.prefill);
    const std::vector<Token> tokens = TraceTokens(one.front(), prefill.block_tokens);
    const auto handoff_start = std::chrono::steady_clock::now();
    Result<rpc::HandoffResponse> h =
        client->HandOffTo(options.decode_node_id, options.decode_address, tokens, sequence,
                          static_cast<std::uint32_t>(options.handoff_deadline.count()));
    out.handoff_seconds += Since(handoff_start);
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
    Add(d, &out.decode);
    if (options.progress) options.progress(i + 1, total);
  }
  out.seconds = Since(start);
  return out;
}

}  // namespace kvmesh
