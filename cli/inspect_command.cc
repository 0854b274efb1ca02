// kvctl inspect BLOCK: every component of one cached block of a running node — shape, bytes,
// value ranges (scales), a checksum — and whether each tier copy decodes and agrees byte for
// byte with the pool block (docs/kvctl.md). --json: kvmesh.inspect/1.
#include <cstdio>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

struct InspectOptions {
  NodeConnectionFlags node;
  std::string block;
  bool json = false;
};

std::string Shape(const rpc::ComponentShape& c) {
  const bool nhd = c.order() == "NHD";
  return StrCat("[", c.num_layers(), ",", c.kv_factor(), ",",
                nhd ? c.tokens_per_block() : c.num_heads(), ",",
                nhd ? c.num_heads() : c.tokens_per_block(), ",", c.inner(), "] ", c.order());
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string Range(const rpc::ComponentReport& c) {
  if (!c.has_range()) return "-";
  std::string s = StrCat("[", Number(c.min()), ", ", Number(c.max()), "]");
  if (c.zeros() > 0) s += StrCat(" zeros ", c.zeros());
  if (c.non_finite() > 0) s += StrCat(" non-finite ", c.non_finite());
  return s;
}

std::string Verdict(const rpc::TierCopyReport& t) {
  if (!t.present()) return "no copy";
  if (!t.decodes()) return StrCat("CORRUPT: ", t.error());
  if (!t.matches()) return StrCat("DIFFERS: ", t.error());
  return "agrees (verified, byte for byte)";
}

void PrintTable(const rpc::InspectBlockResponse& r) {
  std::printf("block       %s\n", r.content_id().c_str());
  std::printf("parent      %s\n", r.parent_id().c_str());
  std::printf("position    block %d of its prompts, %d tokens, priority %d\n", r.depth(),
              r.tokens(), r.priority());
  for (const rpc::PoolBlockReport& p : r.pools()) {
    std::printf("\npool %d      %s: ", p.pool(), p.key().c_str());
    if (p.block_id() < 0) {
      std::printf("no block (outside this pool's window)\n");
      continue;
    }
    std::printf("block %d, %u pins, %s, %s", p.block_id(), p.pins(), p.dtype().c_str(),
                FormatBytes(p.bytes()).c_str());
    if (p.dtype() == "nvfp4" || p.dtype() == "fp8_per_tensor") {
      std::printf(", pool scale %s", Number(p.pool_scale()).c_str());
    }
    std::printf("\n");
    Table t({"COMPONENT", "SHAPE [l,kv,h,t,d]", "BITS", "BYTES", "SHA-256/128", "VALUES"},
            {false, false, true, true, false, false});
    for (const rpc::ComponentReport& c : p.components()) {
      t.AddRow({c.shape().name(), Shape(c.shape()), StrCat(c.shape().bits()),
                FormatBytes(c.shape().bytes_per_block()), c.checksum(), Range(c)});
    }
    t.Print();
    for (const rpc::TierCopyReport& tier : p.tiers()) {
      std::printf("%-5s copy  %s\n", tier.tier().c_str(), Verdict(tier).c_str());
    }
  }
  std::printf("\nverdict     %s\n", r.all_copies_agree()
                                        ? "every tier copy agrees with the pool block"
                                        : "a tier copy is corrupt or differs from the pool block");
}

Status Run(const InspectOptions& o) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  rpc::Request req;
  req.mutable_inspect_block()->set_content_id(o.block);
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, c->Call(std::move(req)));
  if (o.json) {
    PrintDocument("kvmesh.inspect/1", ProtoToJson(r.inspect_block()));
  } else {
    PrintTable(r.inspect_block());
  }
  return Status::Ok();
}

}  // namespace

void RegisterInspectCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "one cached block: every component, scales, checksums, and its tier copies");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("block", o->block, "content id, or a unique prefix of one")->required();
  cmd->add_flag("--json", o->json, "print kvmesh.inspect/1 JSON");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
