// kvnode: the per-node agent (node/node.h).
//
//   kvnode --config FILE         start with a YAML config (configs/kvnode.yaml documents every key)
//   kvnode                       start with the embedded default config
//   kvnode --print-default-config
//   kvnode --check-config FILE   parse and validate, print nothing else, exit 0 / 2
//
// Prints the start-up summary to stdout, then "kvnode ready", and runs until SIGTERM or SIGINT,
// then shuts down cleanly (node.h: drain, release, flush to disk, close RocksDB) and exits 0. A
// second signal during the shutdown exits at once with status 130 (nothing more is flushed).
//
// Exit codes: 0 clean shutdown; 1 the node could not start (the one-line reason on stderr);
// 2 a bad command line or config.
#include <pthread.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "common/log.h"
#include "node/logging.h"
#include "node/node.h"
#include "node/node_config.h"

namespace {

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

int WaitForSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  std::string check_path;
  bool print_default = false;
  CLI::App app("kvnode: the kvmesh per-node agent (KV pools, tiers, control plane)");
  app.add_option("--config", config_path, "YAML config file (default: the embedded default)");
  app.add_flag("--print-default-config", print_default,
               "print the default config, every key documented, and exit");
  app.add_option("--check-config", check_path, "validate a config file and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (print_default) {
    std::cout << kvmesh::DefaultNodeConfigYaml();
    return 0;
  }
  if (!check_path.empty()) {
    auto checked = kvmesh::LoadNodeConfig(check_path);
    if (!checked.ok()) {
      std::fprintf(stderr, "kvnode: %s\n", checked.status().message().c_str());
      return 2;
    }
    auto valid = checked->Validate();
    if (!valid.ok()) {
      std::fprintf(stderr, "kvnode: %s\n", valid.message().c_str());
      return 2;
    }
    return 0;
  }
  auto config = config_path.empty()
                    ? kvmesh::ParseNodeConfig(kvmesh::DefaultNodeConfigYaml(), "default config")
                    : kvmesh::LoadNodeConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "kvnode: %s\n", config.status().message().c_str());
    return 2;
  }
  if (auto st = kvmesh::SetupNodeLogging(config->logging.level, config->logging.format); !st.ok()) {
    std::fprintf(stderr, "kvnode: logging: %s\n", st.message().c_str());
    return 2;
  }
  // Every thread the node starts inherits this mask, so the signals reach only sigwait below.
  const sigset_t signals = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto node = kvmesh::Node::Start(*config);
  if (!node.ok()) {
    std::fprintf(stderr, "kvnode: %s\n", node.status().message().c_str());
    return node.status().code() == kvmesh::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << (*node)->Summary() << "kvnode ready" << std::endl;
  const int sig = WaitForSignal(signals);
  KVMESH_LOG_INFO("signal {} received: shutting down", sig == SIGTERM ? "sigterm" : "sigint");
  std::thread([signals] {
    WaitForSignal(signals);
    std::fprintf(stderr, "kvnode: second signal during shutdown: exiting now\n");
    std::_Exit(130);
  }).detach();
  const kvmesh::ShutdownReport r = (*node)->Shutdown();
  node->reset();
  std::cout << "kvnode stopped: released " << r.released_sequences << " sequences, flushed "
            << r.flushed_blocks << " blocks to disk in " << r.seconds << " s";
  if (r.flush_skipped_full > 0) {
    std::cout << " (" << r.flush_skipped_full
              << " not flushed: beyond the disk tier's capacity; the most valuable were written)";
  }
  if (r.flush_failures > 0)
    std::cout << "; " << r.flush_failures << " flush failures (see the log)";
  std::cout << std::endl;
  return r.flush_failures == 0 ? 0 : 1;
}
