// kvctl events: the KV events of a running node (stored, removed, tier changed) — the retained
// ones from a sequence number, or followed as they happen (SubscribeEvents) (docs/kvctl.md).
// --json: one kvmesh.event/1 object per line.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/live_commands.h"
#include "cli/live_output.h"
#include "cli/node_connection.h"
#include "common/strings.h"

namespace kvmesh::cli {
namespace {

using Json = nlohmann::json;

struct EventsOptions {
  NodeConnectionFlags node;
  std::uint64_t from = 0;  // 0: the oldest retained (without --follow) / new ones (with)
  std::int64_t count = 0;  // 0: 100 without --follow, unlimited with
  bool follow = false;
  double duration_s = 0;  // --follow: stop after this long (0: never)
  bool json = false;
};

class Printer {
 public:
  explicit Printer(bool json) : json_(json) {}

  void Event(const KvEvent& e) {
    if (json_) {
      const Json j = {{"schema", "kvmesh.event/1"},
                      {"seq", e.seq},
                      {"type", KvEventTypeName(e.type)},
                      {"pool", e.pool.value},
                      {"block", e.block.value},
                      {"content_id", e.content_id.ToHex()},
                      {"parent_id", e.parent_id.ToHex()},
                      {"tokens", e.num_tokens},
                      {"priority", e.priority},
                      {"tier", KvTierName(e.tier)},
                      {"previous_tier", KvTierName(e.previous_tier)}};
      std::cout << j.dump() << "\n";
    } else {
      if (!header_) {
        std::printf("%-10s %-12s %4s %7s  %-12s  %-12s %6s %4s  %s\n", "SEQ", "TYPE", "POOL",
                    "BLOCK", "CONTENT ID", "PARENT", "TOKENS", "PRIO", "TIER");
        header_ = true;
      }
      const std::string tier = e.type == KvEventType::kTierChanged
                                   ? StrCat(KvTierName(e.previous_tier), " -> ", KvTierName(e.tier))
                                   : std::string(KvTierName(e.tier));
      std::printf("%-10llu %-12s %4d %7d  %-12s  %-12s %6d %4d  %s\n",
                  static_cast<unsigned long long>(e.seq),
                  std::string(KvEventTypeName(e.type)).c_str(), e.pool.value, e.block.value,
                  ShortId(e.content_id.ToHex()).c_str(), ShortId(e.parent_id.ToHex()).c_str(),
                  e.num_tokens, e.priority, tier.c_str());
    }
    std::fflush(stdout);
  }

  void Lost(const KvEventGap& gap) {
    if (json_) {
      std::cout << Json{{"schema", "kvmesh.event/1"},
                        {"type", "lost"},
                        {"lost_first", gap.first},
                        {"lost_last", gap.last}}
                       .dump()
                << "\n";
    } else {
      std::printf("lost events %llu..%llu: the ring overwrote them before they were read\n",
                  static_cast<unsigned long long>(gap.first),
                  static_cast<unsigned long long>(gap.last));
    }
    std::fflush(stdout);
  }

 private:
  bool json_;
  bool header_ = false;
};

Status Retained(NodeClient& c, const EventsOptions& o, Printer& p) {
  const std::int64_t limit = o.count > 0 ? o.count : 100;
  std::int64_t left = limit;
  std::uint64_t from = o.from == 0 ? 1 : o.from;
  std::uint64_t first = 0, last = 0;
  while (left > 0) {
    KVMESH_ASSIGN_OR_RETURN(
        const KvEventBatch batch,
        c.PollEvents(from, static_cast<std::uint32_t>(std::min<std::int64_t>(left, 4096))));
    if (batch.lost && o.from != 0) p.Lost(*batch.lost);  // from 0: the oldest retained, no gap
    for (const KvEvent& e : batch.events) {
      p.Event(e);
      if (first == 0) first = e.seq;
      last = e.seq;
      if (--left == 0) break;
    }
    if (batch.events.empty()) break;
    from = batch.next_seq;
  }
  // The table stopped at the count with newer events retained: say so, and how to see them.
  if (!o.json && left == 0) {
    KVMESH_ASSIGN_OR_RETURN(const KvEventBatch more, c.PollEvents(last + 1, 1));
    if (!more.events.empty()) {
      std::fprintf(stderr,
                   "events %llu..%llu shown (%lld, the count); newer ones are retained: --from "
                   "%llu for the next, -n for more, --follow for new ones\n",
                   static_cast<unsigned long long>(first), static_cast<unsigned long long>(last),
                   static_cast<long long>(limit), static_cast<unsigned long long>(last + 1));
    }
  }
  return Status::Ok();
}

Status Follow(NodeClient& c, const EventsOptions& o, Printer& p) {
  std::uint64_t from = o.from;
  if (from == 0) {  // only new events: after the last one recorded now
    rpc::Request req;
    req.mutable_stats();
    KVMESH_ASSIGN_OR_RETURN(const rpc::Response r, c.Call(std::move(req)));
    from = r.stats().last_event_seq() + 1;
  }
  KVMESH_RETURN_IF_ERROR(c.SubscribeEvents(from));
  const auto start = std::chrono::steady_clock::now();
  std::int64_t seen = 0;
  for (;;) {
    std::chrono::milliseconds wait(500);
    if (o.duration_s > 0) {
      const auto left =
          std::chrono::duration<double>(o.duration_s) - (std::chrono::steady_clock::now() - start);
      if (left.count() <= 0) return Status::Ok();
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(left) +
                                std::chrono::milliseconds(1));
    }
    KVMESH_ASSIGN_OR_RETURN(const std::optional<KvEventBatch> batch, c.NextEvents(wait));
    if (!batch) continue;
    if (batch->lost) p.Lost(*batch->lost);
    for (const KvEvent& e : batch->events) {
      p.Event(e);
      if (o.count > 0 && ++seen >= o.count) return Status::Ok();
    }
  }
}

Status Run(const EventsOptions& o) {
  if (o.count < 0) return Status::InvalidArgument("--count must not be negative");
  if (!o.follow && o.duration_s > 0) return Status::InvalidArgument("--duration needs --follow");
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, ConnectToNode(o.node));
  Printer p(o.json);
  return o.follow ? Follow(*c, o, p) : Retained(*c, o, p);
}

}  // namespace

void RegisterEventsCommand(CLI::App& app, CommandOutcome& outcome) {
  auto o = std::make_shared<EventsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "events", "a running node's KV events (stored, removed, tier changed), retained or followed");
  AddNodeConnectionFlags(cmd, &o->node);
  cmd->add_flag("--follow,-f", o->follow, "wait for new events and print them as they come");
  cmd->add_option("--from", o->from,
                  "first sequence number (default: the oldest retained; with --follow: the next "
                  "new one)");
  cmd->add_option("--count,-n", o->count,
                  "stop after N events (default 100; with --follow: never)");
  cmd->add_option("--duration", o->duration_s, "with --follow: stop after this many seconds");
  cmd->add_flag("--json", o->json, "print one kvmesh.event/1 JSON object per line");
  cmd->callback([o, &outcome] { outcome.Set(Run(*o)); });
}

}  // namespace kvmesh::cli
