// kvctl blocks: the cached blocks of a running node, a page at a time, filtered by pool and
// priority (docs/kvctl.md). --json: kvmesh.blocks/1.
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

struct BlocksOptions {
  NodeConnectionFlags node;
  std::optional<int> pool;
  std::optional<int> priority;
  std::optional<int> min_priority;
  std::optional<int> max_priority;
  std::uint32_t limit = 50;
  std::uint64_t cursor = 0;
  bool all = false;
  bool no_tiers = false;
  bool json = false;
  bool progress = false;
  bool no_progress = false;
};

std::string Joined(const google::protobuf::RepeatedField<std::int32_t>& v) {
  std::string s;
  for (const std::int32_t x : v)
    s += (s.empty() ? "" : ",") + (x < 0 ? std::string("-") : StrCat(x));
  return s;
}

std::string Pins(const google::protobuf::RepeatedField<std::uint32_t>& v) {
  std::string s;
  for (const std::uint32_t x : v) s += (s.empty() ? "" : ",") + StrCat(x);
  return s;
}

// "yes" when every pool's block has a copy, "-" when none, else the pools that do ("0,2").
std::string Copies(const google::protobuf::RepeatedField<bool>& v) {
  if (v.empty()) return "?";
  int n = 0;
  std::string which;
  for (int p = 0; p < v.size(); ++p) {
    if (!v[p]) continue;
    ++n;
    which += (which.empty() ? "" : ",") + StrCat(p);
  }
  if (n == 0) return "-";
  return n == v.size() ? "yes" : which;
}

std::string Expires(std::int64_t ms) {
  return ms < 0 ? std::string("-") : FormatAge(static_cast<double>(ms) / 1000.0);
}

Status Validate(const BlocksOptions& o) {
  if (o.priority && (o.min_priority || o.max_priority)) {
    return Status::InvalidArgument("give --priority or --min-priority/--max-priority, not both");
  }
  if (o.limit == 0 || o.limit > 10000) {
    return Status::InvalidArgument(StrCat("--limit ", o.limit, " is not within 1..10000"));
  }
  if (o.all && o.cursor != 0)
    return Status::InvalidArgument("--all lists from the start: no --cursor");
  return Status::Ok();
}

Status Run(const BlocksOptions& o) {
  KVMESH_RETURN_IF_ERROR(Validate(o));
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  rpc::ListBlocksRequest base;
  if (o.pool) base.set_pool(*o.pool);
  if (o.priority) {
    base.set_min_priority(*o.priority);
    base.set_max_priority(*o.priority);
  }
  if (o.min_priority) base.set_min_priority(*o.min_priority);
  if (o.max_priority) base.set_max_priority(*o.max_priority);
  base.set_limit(o.limit);
  base.set_tiers(!o.no_tiers);
  rpc::ListBlocksResponse all;
  std::int64_t scanned = 0;
  std::uint64_t cursor = o.cursor;
  ProgressLine progress(o.all && ProgressEnabled(o.progress, o.no_progress), "blocks");
  // One page, or with --all every page (a page that scanned its limit of nodes without a match
  // continues too).
  do {
    rpc::Request req;
    *req.mutable_list_blocks() = base;
    req.mutable_list_blocks()->set_cursor(cursor);
    KVMESH_ASSIGN_OR_RETURN(rpc::Response r, c->Call(std::move(req)));
    rpc::ListBlocksResponse& page = *r.mutable_list_blocks();
    for (rpc::BlockEntry& b : *page.mutable_blocks()) *all.add_blocks() = std::move(b);
    scanned += page.scanned();
    all.set_total_blocks(page.total_blocks());
    cursor = page.next_cursor();
    all.set_next_cursor(cursor);
    progress.Update(scanned, page.total_blocks(), StrCat(all.blocks_size(), " listed"));
  } while (cursor != 0 && (o.all || all.blocks_size() == 0));
  progress.Finish();
  all.set_scanned(scanned);
  if (o.json) {
    PrintDocument("kvmesh.blocks/1", ProtoToJson(all));
    return Status::Ok();
  }
  Table t({"CONTENT ID", "DEPTH", "PRIO", "EXPIRES", "BLOCKS", "PINS", "HOST", "DISK", "AGE"},
          {false, true, true, true, false, false, false, false, true});
  for (const rpc::BlockEntry& b : all.blocks()) {
    t.AddRow({ShortId(b.content_id()), StrCat(b.depth()), StrCat(b.priority()),
              Expires(b.priority_expires_in_ms()), Joined(b.block_ids()), Pins(b.pins()),
              o.no_tiers ? "?" : Copies(b.host()), o.no_tiers ? "?" : Copies(b.disk()),
              FormatAge(b.age_s())});
  }
  t.Print();
  std::printf("%d blocks listed of %lld cached (%lld looked at)", all.blocks_size(),
              static_cast<long long>(all.total_blocks()), static_cast<long long>(scanned));
  if (all.next_cursor() != 0) {
    std::printf("; next page: --cursor %llu\n", static_cast<unsigned long long>(all.next_cursor()));
  } else {
    std::printf("; end of the listing\n");
  }
  return Status::Ok();
}

}  // namespace

void RegisterBlocksCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<BlocksOptions>();
  CLI::App* cmd = app.add_subcommand(
      "blocks",
      "a running node's cached blocks: priority, pins and blocks per pool, tier copies, "
      "age; a page at a time");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_option("--pool", o->pool, "only blocks holding a block in this pool");
  cmd->add_option("--priority", o->priority, "only blocks of this priority");
  cmd->add_option("--min-priority", o->min_priority, "only blocks of this priority or above");
  cmd->add_option("--max-priority", o->max_priority, "only blocks of this priority or below");
  cmd->add_option("--limit", o->limit, "blocks per page (1..10000)")->capture_default_str();
  cmd->add_option("--cursor", o->cursor, "continue a listing (the last page says from where)");
  cmd->add_flag("--all", o->all, "every page, not only the first");
  cmd->add_flag("--no-tiers", o->no_tiers, "do not look up tier copies");
  cmd->add_flag("--json", o->json, "print kvmesh.blocks/1 JSON");
  cmd->add_flag("--progress", o->progress,
                "progress on stderr with --all even when not a terminal");
  cmd->add_flag("--no-progress", o->no_progress, "no progress line");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
