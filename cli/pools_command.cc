// kvctl pools: the pool plan of a running node, every pool's occupancy by state and by priority,
// and the tiers (docs/kvctl.md). --json: kvmesh.pools/1.
#include <cstdio>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"
#include "common/units.h"

namespace kvmesh::cli {
namespace {

struct PoolsOptions {
  NodeConnectionFlags node;
  bool json = false;
};

std::string Layers(const rpc::PoolDetail& p) {
  if (p.layers().empty()) return "-";
  bool contiguous = true;
  for (int i = 1; i < p.layers_size(); ++i) contiguous &= p.layers(i) == p.layers(i - 1) + 1;
  if (contiguous) return StrCat(p.layers(0), "-", p.layers(p.layers_size() - 1));
  return StrCat(p.layers_size(), " layers");
}

std::string Shape(const rpc::ComponentShape& c) {
  return c.order() == "NHD" ? StrCat("[", c.num_layers(), ",", c.kv_factor(), ",",
                                     c.tokens_per_block(), ",", c.num_heads(), ",", c.inner(), "]")
                            : StrCat("[", c.num_layers(), ",", c.kv_factor(), ",", c.num_heads(),
                                     ",", c.tokens_per_block(), ",", c.inner(), "]");
}

void PrintTable(const rpc::PoolsResponse& r) {
  std::printf("model       %s, %d tokens per block, tensor_parallel_size %d, %lld cached blocks\n",
              r.model_name().c_str(), r.tokens_per_block(), r.tensor_parallel_size(),
              static_cast<long long>(r.tree_nodes()));
  std::printf(
      "budget      %s per rank (%s), %s per token, eviction %s, offload at priority >= %d\n",
      FormatBytes(r.budget_bytes()).c_str(), r.budget_limited_by().c_str(),
      FormatBytes(r.bytes_per_token()).c_str(), r.eviction_policy().c_str(),
      r.offload_min_priority());
  std::printf("\n");
  Table pools({"POOL", "KEY", "RANK", "DTYPE", "LAYERS", "SHARE", "BLOCKS", "BYTES/BLOCK", "FREE",
               "CACHED", "PRIVATE", "PINNED", "EVICTABLE", "MOVING", "USED"},
              {true, false, true, false, false, true, true, true, true, true, true, true, true,
               true, true});
  for (const rpc::PoolDetail& p : r.pools()) {
    const rpc::PoolStatus& s = p.status();
    const double used = s.num_blocks() > 0 ? 1.0 - static_cast<double>(s.free_blocks()) /
                                                       static_cast<double>(s.num_blocks())
                                           : 0;
    pools.AddRow({StrCat(s.pool()), s.key(), StrCat(s.rank()), p.dtype() + " " + p.kv_layout(),
                  Layers(p), FormatFixed(p.share(), 3), StrCat(s.num_blocks()),
                  FormatBytes(s.bytes_per_block()), StrCat(s.free_blocks()),
                  StrCat(s.cached_blocks()), StrCat(s.private_blocks()), StrCat(s.pinned_blocks()),
                  StrCat(s.evictable_blocks()), StrCat(s.moving_out_blocks()), Percent(used)});
  }
  pools.Print();
  std::printf("\n");
  Table comps({"POOL", "COMPONENT", "SHAPE [l,kv,h,t,d]", "ORDER", "BITS", "BYTES/BLOCK"},
              {true, false, false, false, true, true});
  for (const rpc::PoolDetail& p : r.pools()) {
    for (const rpc::ComponentShape& c : p.components()) {
      comps.AddRow({StrCat(p.status().pool()), c.name(), Shape(c), c.order(), StrCat(c.bits()),
                    FormatBytes(c.bytes_per_block())});
    }
  }
  comps.Print();
  std::printf("\n");
  Table prio({"POOL", "PRIORITY", "CACHED", "SHARE"}, {true, true, true, true});
  for (const rpc::PoolDetail& p : r.pools()) {
    for (const rpc::PriorityBlocks& b : p.cached_by_priority()) {
      const double share =
          p.status().cached_blocks() > 0
              ? static_cast<double>(b.blocks()) / static_cast<double>(p.status().cached_blocks())
              : 0;
      prio.AddRow(
          {StrCat(p.status().pool()), StrCat(b.priority()), StrCat(b.blocks()), Percent(share)});
    }
  }
  if (prio.rows() == 0) {
    std::printf("cached by priority: none cached\n");
  } else {
    prio.Print();
  }
  std::printf("\n");
  Table tiers({"TIER", "CAPACITY", "USED", "BLOCKS", "PUTS", "HITS", "MISSES", "CORRUPT",
               "EVICTIONS", "STATE"},
              {false, true, true, true, true, true, true, true, true, false});
  for (const rpc::TierDetail& t : r.tiers()) {
    const rpc::TierStatus& s = t.status();
    if (!s.present()) {
      tiers.AddRow({s.name(), "-", "-", "-", "-", "-", "-", "-", "-", "not configured"});
      continue;
    }
    tiers.AddRow({s.name(), FormatBytes(s.capacity_bytes()), FormatBytes(s.used_bytes()),
                  StrCat(s.entries()), StrCat(t.puts()), StrCat(t.hits()), StrCat(t.misses()),
                  StrCat(t.corrupt()), StrCat(t.evictions()), s.disabled() ? "disabled" : "ok"});
  }
  tiers.Print();
}

Status Run(const PoolsOptions& o) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  rpc::Request req;
  req.mutable_pools();
  KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, c->Call(std::move(req)));
  if (o.json) {
    PrintDocument("kvmesh.pools/1", ProtoToJson(r.pools()));
  } else {
    PrintTable(r.pools());
  }
  return Status::Ok();
}

}  // namespace

void RegisterPoolsCommand(CLI::App& app, CommandOutcome& outcome) {
  auto options = std::make_shared<PoolsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "pools", "a running node's pools: plan, occupancy by state and by priority, tiers");
  AddNodeConnectionFlags(cmd, &options->node);
  cmd->add_flag("--json", options->json, "print kvmesh.pools/1 JSON");
  cmd->callback([options, &outcome] { outcome.Set(Run(*options)); });
}

}  // namespace kvmesh::cli
