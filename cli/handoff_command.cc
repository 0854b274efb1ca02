// kvctl handoff: ask a prefill node to hand a prompt's blocks to a decode node (the HandOffTo
// request, node/handoff.h and docs/handoff.md) — what an engine or a router does after prefill,
// for an operator moving a request by hand or checking that two nodes can hand off at all. The
// decode node says which blocks it has already; only the rest move, verified against content id
// and geometry, converted between HND and NHD when the two nodes differ. Prints what was wanted,
// had, moved and held on the decode node; --json prints kvmesh.handoff/1.
//
// The prompt: cli/prompt_tokens.h; --salt and --lora-id must be the engine's, since they are part
// of the blocks' content ids.
#include <cstdio>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "cli/prompt_tokens.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

struct HandoffOptions {
  NodeConnectionFlags node;  // the prefill node
  std::string to_node_id;
  std::string to_address;
  PromptFlags prompt;
  std::string salt;
  std::uint64_t lora_id = 0;
  std::uint32_t deadline_ms = 5000;
  bool json = false;
};

Status Run(const HandoffOptions& o) {
  KVMESH_ASSIGN_OR_RETURN(const std::vector<std::int32_t> tokens, PromptTokens(o.prompt));
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  SequenceOptions options;
  options.domain.salt = o.salt;
  options.domain.lora_id = o.lora_id;
  KVMESH_ASSIGN_OR_RETURN(const rpc::HandoffResponse r,
                          c->HandOffTo(o.to_node_id, o.to_address, tokens, options, o.deadline_ms));
  if (o.json) {
    nlohmann::json doc = ProtoToJson(r);
    doc["to_node_id"] = o.to_node_id;
    doc["to_address"] = o.to_address;
    doc["prompt_tokens"] = tokens.size();
    PrintDocument("kvmesh.handoff/1", doc);
    return Status::Ok();
  }
  const std::string where = o.to_address.empty() ? "" : StrCat(" (", o.to_address, ")");
  std::printf("handoff of %zu tokens to %s%s: %lld full blocks wanted\n", tokens.size(),
              o.to_node_id.c_str(), where.c_str(), static_cast<long long>(r.wanted_blocks()));
  std::printf("  had %lld (not moved), moved %lld (verified), held %lld\n",
              static_cast<long long>(r.had_blocks()), static_cast<long long>(r.moved_blocks()),
              static_cast<long long>(r.held_blocks()));
  if (r.held_blocks() < r.wanted_blocks()) {
    std::printf("  %lld blocks not held on %s: its engine computes them\n",
                static_cast<long long>(r.wanted_blocks() - r.held_blocks()), o.to_node_id.c_str());
  }
  return Status::Ok();
}

}  // namespace

void RegisterHandoffCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<HandoffOptions>();
  CLI::App* cmd = app.add_subcommand(
      "handoff",
      "ask the prefill node (--node) to hand a prompt's blocks to a decode node; only the blocks "
      "the decode node lacks move");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("--to-node-id", o->to_node_id, "the decode node's node id")->required();
  cmd->add_option("--to", o->to_address,
                  "the decode node's TCP control address (host:port); may be left out for a "
                  "member of the prefill node's cluster, and must be its member address if given");
  AddPromptFlags(cmd, &o->prompt);
  cmd->add_option("--salt", o->salt, "the engine's cache salt (tenant) of the prompt");
  cmd->add_option("--lora-id", o->lora_id, "the engine's LoRA adapter id of the prompt (0: none)");
  cmd->add_option("--deadline-ms", o->deadline_ms, "how long the decode node may fetch (ms)")
      ->check(CLI::Range(1u, 600000u))
      ->default_val(5000);
  cmd->add_flag("--json", o->json, "print kvmesh.handoff/1 JSON");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
