// kvmesh-synth: the synthetic engine as a command (node/synthetic_engine.h). It attaches to a
// running kvnode over its Unix socket, replays a Mooncake trace or a synthetic multi-turn workload
// through it — prefill into the shared pools, checked decode — and prints what it saw.
//
//   kvmesh-synth --socket .kvmesh/node/kvnode.sock --synthetic --conversations 48 --turns 4
//   kvmesh-synth --socket /run/kvnode.sock --trace conversation_trace.jsonl --limit 200 --json
//
// Disaggregated (node/synthetic_handoff.h): with --decode-socket, --decode-node-id and
// --decode-address each request is prefilled on the node of --socket, handed off to the decode
// node (with --stream-layers: layer by layer as prefill writes them), and decoded (every step
// checked) there:
//
//   kvmesh-synth --socket prefill/kvnode.sock --decode-socket decode/kvnode.sock
//       --decode-node-id decode-1 --decode-address 127.0.0.1:7421 --synthetic --conversations 8
//
// Exit code: 0 when every request ran and every check passed; 1 when a request failed or a check
// did not match (disaggregated: or a handoff failed); 2 for a bad command line; 3 when a node
// could not be reached or attached.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "node/secret.h"
#include "node/synthetic_engine.h"
#include "node/synthetic_handoff.h"
#include "node/synthetic_stats_json.h"

namespace {

using kvmesh::StrCat;

struct Flags {
  std::string socket = ".kvmesh/node/kvnode.sock";
  kvmesh::SecretSource secret;
  std::string trace;
  bool synthetic = false;
  std::int64_t limit = 0;
  kvmesh::SyntheticTraceOptions gen;
  kvmesh::SyntheticEngineOptions engine;
  bool json = false;
  bool progress = false;
  std::int64_t spin_wait_us = 0;       // NodeClientOptions::spin_wait
  std::int64_t admit_wait_ms = 30000;  // SyntheticEngineOptions::admit_wait
  std::string decode_socket;           // disaggregated: the decode node
  std::string decode_node_id;
  std::string decode_address;
  std::uint32_t handoff_deadline_ms = 5000;
  bool stream_layers = false;  // disaggregated: stream the layers as prefill writes them
  std::int32_t layer_group = 1;
};

void PrintText(const kvmesh::SyntheticWorkloadStats& s, const Flags& f) {
  const double secs = std::max(s.seconds, 1e-9);
  std::printf(
      "synthetic engine  %lld requests over %d connections in %.2f s (%.1f requests/s, "
      "%.0f prompt tokens/s)\n",
      static_cast<long long>(s.requests), f.engine.concurrency, s.seconds,
      static_cast<double>(s.requests) / secs, static_cast<double>(s.prompt_tokens) / secs);
  std::printf("prompt tokens     %lld: reused %lld, computed %lld\n",
              static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.reused_tokens),
              static_cast<long long>(s.computed_tokens));
  std::printf("hit rate          %s\n", kvmesh::HitRateText(s).c_str());
  std::printf(
      "checks            %lld decode outputs against the dense reference, %lld failed "
      "(max error %.2e); %lld decode tokens\n",
      static_cast<long long>(s.checks), static_cast<long long>(s.check_failures), s.worst_error,
      static_cast<long long>(s.decode_tokens));
  if (s.admit_waits > 0) {
    std::printf("waited for room   %lld requests, %.2f s in all (refused while others ran)\n",
                static_cast<long long>(s.admit_waits), s.admit_wait_seconds);
  }
  if (s.failed_requests > 0 || !s.first_error.empty()) {
    std::printf("failures          %lld requests; first: %s\n",
                static_cast<long long>(s.failed_requests), s.first_error.c_str());
  }
}

void PrintJson(const kvmesh::SyntheticWorkloadStats& s, const Flags& f) {
  nlohmann::json j = kvmesh::WorkloadStatsJson(s);
  j["schema"] = "kvmesh.synthetic/1";
  j["concurrency"] = f.engine.concurrency;
  j["seconds"] = s.seconds;
  std::cout << j.dump(2) << "\n";
}

void PrintDisaggregatedText(const kvmesh::DisaggregatedStats& s, const Flags& f) {
  std::printf("disaggregated     %lld requests in %.2f s: prefill on %s, decode on %s (%s)\n",
              static_cast<long long>(s.decode.requests), s.seconds, f.socket.c_str(),
              f.decode_node_id.c_str(), f.decode_socket.c_str());
  std::printf("prefill           %lld prompt tokens: reused %lld, computed %lld\n",
              static_cast<long long>(s.prefill.prompt_tokens),
              static_cast<long long>(s.prefill.reused_tokens),
              static_cast<long long>(s.prefill.computed_tokens));
  std::printf(
      "handoff           %lld answered, %lld failed: %lld full blocks wanted, %lld had, %lld "
      "moved (verified), %lld held; %.3f s in handoffs\n",
      static_cast<long long>(s.handoffs), static_cast<long long>(s.failed_handoffs),
      static_cast<long long>(s.wanted_blocks), static_cast<long long>(s.had_blocks),
      static_cast<long long>(s.moved_blocks), static_cast<long long>(s.held_blocks),
      s.handoff_seconds);
  if (s.streamed) {
    std::printf(
        "                  streamed layer by layer: %lld announcements; %.3f s waiting for the "
        "answers after prefill\n",
        static_cast<long long>(s.announcements), s.wait_seconds);
  }
  if (!s.first_handoff_error.empty()) {
    std::printf("                  first failed handoff: %s\n", s.first_handoff_error.c_str());
  }
  std::printf(
      "decode            %lld prompt tokens: reused %lld, computed %lld; hits pool %lld, "
      "remote %lld of %lld block positions\n",
      static_cast<long long>(s.decode.prompt_tokens),
      static_cast<long long>(s.decode.reused_tokens),
      static_cast<long long>(s.decode.computed_tokens),
      static_cast<long long>(s.decode.pool_hit_blocks),
      static_cast<long long>(s.decode.remote_hit_blocks),
      static_cast<long long>(s.decode.input_blocks));
  std::printf(
      "checks            %lld decode outputs against the dense reference, %lld failed "
      "(max error %.2e); %lld decode tokens\n",
      static_cast<long long>(s.decode.checks), static_cast<long long>(s.decode.check_failures),
      s.decode.worst_error, static_cast<long long>(s.decode.decode_tokens));
  const std::int64_t failed = s.prefill.failed_requests + s.decode.failed_requests;
  if (failed > 0) {
    std::printf(
        "failures          %lld requests; first: %s\n", static_cast<long long>(failed),
        (s.prefill.first_error.empty() ? s.decode.first_error : s.prefill.first_error).c_str());
  }
}

void PrintDisaggregatedJson(const kvmesh::DisaggregatedStats& s, const Flags& f) {
  nlohmann::json j = {
      {"schema", "kvmesh.disaggregated/1"},
      {"seconds", s.seconds},
      {"prefill", kvmesh::WorkloadStatsJson(s.prefill)},
      {"decode", kvmesh::WorkloadStatsJson(s.decode)},
      {"decode_node_id", f.decode_node_id},
      {"handoff",
       {{"answered", s.handoffs},
        {"failed", s.failed_handoffs},
        {"wanted_blocks", s.wanted_blocks},
        {"had_blocks", s.had_blocks},
        {"moved_blocks", s.moved_blocks},
        {"held_blocks", s.held_blocks},
        {"seconds", s.handoff_seconds},
        {"streamed", s.streamed},
        {"announcements", s.announcements},
        {"wait_seconds", s.wait_seconds},
        {"first_error", s.first_handoff_error}}},
  };
  std::cout << j.dump(2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app(
      "kvmesh-synth: a synthetic engine that attaches to a kvnode, replays a workload "
      "through its shared pools and checks every decode output");
  app.add_option("--socket", f.socket, "the node's Unix socket")->capture_default_str();
  app.add_option("--secret", f.secret.value,
                 "the shared secret (prefer --secret-file or KVMESH_SECRET)");
  app.add_option("--secret-env", f.secret.env, "environment variable holding the secret");
  app.add_option("--secret-file", f.secret.file, "file holding the secret");
  auto* trace = app.add_option("--trace", f.trace, "a Mooncake-format trace (JSONL)");
  auto* synth = app.add_flag("--synthetic", f.synthetic, "generate a multi-turn workload instead");
  trace->excludes(synth);
  app.add_option("--limit", f.limit, "replay only the first N requests (0: all)");
  app.add_option("--seed", f.gen.seed, "synthetic: seed")->capture_default_str();
  app.add_option("--conversations", f.gen.conversations, "synthetic: conversations")
      ->capture_default_str();
  app.add_option("--turns", f.gen.turns, "synthetic: turns per conversation")
      ->capture_default_str();
  app.add_option("--system-prompts", f.gen.system_prompts, "synthetic: shared system prompts")
      ->capture_default_str();
  app.add_option("--system-prompt-blocks", f.gen.system_prompt_blocks,
                 "synthetic: blocks per system prompt")
      ->capture_default_str();
  app.add_option("--turn-blocks-min", f.gen.turn_blocks_min, "synthetic: new blocks per turn, min")
      ->capture_default_str();
  app.add_option("--turn-blocks-max", f.gen.turn_blocks_max, "synthetic: new blocks per turn, max")
      ->capture_default_str();
  app.add_option("--block-tokens", f.engine.block_tokens,
                 "tokens per trace hash id (512 in the Mooncake traces)")
      ->capture_default_str();
  app.add_option("--concurrency", f.engine.concurrency, "connections (workers)")
      ->capture_default_str();
  app.add_option("--decode-tokens", f.engine.decode_tokens, "checked decode steps per request")
      ->capture_default_str();
  app.add_flag("--check-all-layers", f.engine.check_all_layers,
               "check every layer (default: first, middle and last of each pool)");
  app.add_option("--salt", f.engine.salt, "cache salt (tenant) of every request");
  app.add_option("--admit-wait-ms", f.admit_wait_ms,
                 "a request the node refuses for room while other connections hold requests "
                 "waits for one of them to finish, at most this long (0: fails at once)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  app.add_option("--spin-wait-us", f.spin_wait_us,
                 "each call polls for its answer this long before it sleeps (NodeClientOptions::"
                 "spin_wait; 0: sleeps at once)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  auto* decode_socket = app.add_option(
      "--decode-socket", f.decode_socket,
      "disaggregated: prefill on --socket, hand off, decode (checked) on this node's socket");
  auto* decode_id =
      app.add_option("--decode-node-id", f.decode_node_id, "disaggregated: the decode node's id");
  auto* decode_address = app.add_option(
      "--decode-address", f.decode_address,
      "disaggregated: the decode node's TCP control address (host:port), as the prefill node "
      "reaches it");
  decode_socket->needs(decode_id, decode_address);
  decode_id->needs(decode_socket);
  decode_address->needs(decode_socket);
  app.add_option("--handoff-deadline-ms", f.handoff_deadline_ms,
                 "disaggregated: how long the decode node may fetch each request's blocks")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  auto* stream = app.add_flag(
      "--stream-layers", f.stream_layers,
      "disaggregated: prefill layer by layer and stream each layer to the decode node as it is "
      "written (a streaming handoff started right after admission)");
  stream->needs(decode_socket);
  app.add_option("--layer-group", f.layer_group,
                 "disaggregated with --stream-layers: layers per announcement")
      ->check(CLI::Range(1, 1 << 16))
      ->needs(stream)
      ->capture_default_str();
  app.add_flag("--json", f.json,
               "print kvmesh.synthetic/1 JSON (kvmesh.disaggregated/1 with --decode-socket)");
  app.add_flag("--progress", f.progress, "print progress to stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help, or the error
    return code == 0 ? 0 : 2;      // CLI11's own codes (104, 109, ...) mean nothing to a caller
  }
  if (f.trace.empty() && !f.synthetic) {
    std::fprintf(stderr, "kvmesh-synth: give --trace FILE or --synthetic\n");
    return 2;
  }
  kvmesh::Result<kvmesh::LoadedSecret> secret = kvmesh::LoadSecret(f.secret);
  if (!secret.ok()) {
    std::fprintf(stderr, "kvmesh-synth: %s\n", secret.status().message().c_str());
    return 2;
  }
  std::vector<kvmesh::TraceRequest> requests;
  if (f.synthetic) {
    f.gen.block_tokens = f.engine.block_tokens;
    auto generated = kvmesh::GenerateSyntheticTrace(f.gen);
    if (!generated.ok()) {
      std::fprintf(stderr, "kvmesh-synth: %s\n", generated.status().message().c_str());
      return 2;
    }
    requests = std::move(generated).value();
  } else {
    auto read = kvmesh::ReadTrace(f.trace, f.limit > 0 ? std::optional(f.limit) : std::nullopt);
    if (!read.ok()) {
      std::fprintf(stderr, "kvmesh-synth: %s\n", read.status().message().c_str());
      return 2;
    }
    requests = std::move(read).value();
  }
  if (f.limit > 0 && static_cast<std::int64_t>(requests.size()) > f.limit) {
    requests.resize(static_cast<std::size_t>(f.limit));
  }
  if (requests.empty()) {
    std::fprintf(stderr, "kvmesh-synth: the workload has no requests: nothing to replay\n");
    return 2;
  }
  f.engine.client.address = f.socket;
  f.engine.client.secret = secret->secret;
  f.engine.client.client_name = "kvmesh-synth";
  f.engine.client.spin_wait = std::chrono::microseconds(f.spin_wait_us);
  f.engine.admit_wait = std::chrono::milliseconds(f.admit_wait_ms);
  if (f.progress) {
    f.engine.progress = [](std::int64_t done, std::int64_t total) {
      if (done == total || done % 16 == 0) {
        std::fprintf(stderr, "\rrequests %lld/%lld", static_cast<long long>(done),
                     static_cast<long long>(total));
        if (done == total) std::fprintf(stderr, "\n");
      }
    };
  }
  if (!f.decode_socket.empty()) {
    kvmesh::DisaggregatedOptions d;
    d.prefill = f.engine;
    d.decode = f.engine;
    d.decode.client.address = f.decode_socket;
    d.decode_node_id = f.decode_node_id;
    d.decode_address = f.decode_address;
    d.handoff_deadline = std::chrono::milliseconds(f.handoff_deadline_ms);
    d.stream_layers = f.stream_layers;
    d.layer_group = f.layer_group;
    d.progress = f.engine.progress;
    auto run = kvmesh::RunDisaggregated(d, requests);
    if (!run.ok()) {
      std::fprintf(stderr, "kvmesh-synth: %s\n", run.status().ToString().c_str());
      return 3;
    }
    if (f.json) {
      PrintDisaggregatedJson(*run, f);
    } else {
      PrintDisaggregatedText(*run, f);
    }
    const bool ok = run->decode.check_failures == 0 && run->decode.failed_requests == 0 &&
                    run->prefill.failed_requests == 0 && run->failed_handoffs == 0;
    return ok ? 0 : 1;
  }
  auto stats = kvmesh::RunSyntheticWorkload(f.engine, requests);
  if (!stats.ok()) {
    std::fprintf(stderr, "kvmesh-synth: %s\n", stats.status().ToString().c_str());
    return 3;
  }
  if (f.json) {
    PrintJson(*stats, f);
  } else {
    PrintText(*stats, f);
  }
  return stats->check_failures == 0 && stats->failed_requests == 0 ? 0 : 1;
}
