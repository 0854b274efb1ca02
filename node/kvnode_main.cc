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
// SIGHUP re-reads the secret and the second secret (Node::ReloadSecrets: rotating the secret
// without a restart, docs/kvnode.md); nothing else of the config is read again.
//
// Exit codes: 0 clean shutdown; 1 the node could not start (the one-line reason on stderr);
// 2 a bad command line or config.
//
// Under systemd (Type=notify, deploy/systemd/kvnode.service) it tells the service manager
// (sd_notify): READY=1 once it serves, so that units ordered after it (an engine) start only then;
// STOPPING=1 at the signal; and while it shuts down, what it does (STATUS) with
// EXTEND_TIMEOUT_USEC, so that a shutdown flush that makes progress is not killed at the unit's
// TimeoutStopSec, while a stuck one is, a minute after its last progress. Without $NOTIFY_SOCKET
// (not run by systemd) sd_notify does nothing.
#include <fmt/format.h>
#include <pthread.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "common/log.h"
#include "node/logging.h"
#include "node/node.h"
#include "node/node_config.h"
#include "node/secret.h"

namespace {

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// How long systemd waits for the next progress report of a shutdown (EXTEND_TIMEOUT_USEC): the
// flush reports every 5 s, and waits at most 30 s for a full disk tier in between.
constexpr unsigned long long kShutdownProgressUs = 60'000'000;

int WaitForSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

// What the start would refuse about the config itself (kvmesh::CheckConfigForStart): exit 2, or
// 1 when a model file is not there or unreadable (a mount that may come later, as for the secret
// file). 0: nothing to refuse.
int CheckForStart(const std::string& path, const kvmesh::NodeConfig& config) {
  const kvmesh::Status st = kvmesh::CheckConfigForStart(config);
  if (st.ok()) return 0;
  std::fprintf(stderr, "kvnode: %s: %s\n", path.c_str(), st.message().c_str());
  return st.code() == kvmesh::StatusCode::kNotFound || st.code() == kvmesh::StatusCode::kIoError
             ? 1
             : 2;
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
  app.add_option("--check-config", check_path,
                 "validate a config file (without one: the --config file) and exit")
      ->expected(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help, or the error
    return code == 0 ? 0 : 2;      // a bad command line is a bad config: 2 (not restarted)
  }
  if (app.count("--check-config") > 0 && check_path.empty()) {
    if (config_path.empty()) {
      std::fprintf(stderr, "kvnode: --check-config needs a file: give it one, or --config FILE\n");
      return 2;
    }
    check_path = config_path;
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
    if (const int code = CheckForStart(check_path, *checked); code != 0) return code;
    // Secret files are checked as a start would read them (exit codes as the start's). A secret
    // from the environment is not: the check's environment is not the service's.
    const kvmesh::ControlSection& control = checked->control;
    for (const auto& [key, file] :
         {std::pair<std::string_view, std::string>{"control.secret_file", control.secret_file},
          {"control.second_secret_file", control.second_secret_file}}) {
      if (file.empty() || (key == "control.secret_file" &&
                           (!control.secret.empty() || !control.secret_env.empty()))) {
        continue;
      }
      // The second secret's file may be missing or empty (no rotation under way), as at start.
      if (key == "control.second_secret_file") {
        std::error_code ec;
        const auto size = std::filesystem::file_size(file, ec);
        if (ec || size == 0) continue;
      }
      auto secret = kvmesh::LoadSecret({"", "", file});
      if (!secret.ok()) {
        std::fprintf(stderr, "kvnode: %s: %.*s: %s\n", check_path.c_str(),
                     static_cast<int>(key.size()), key.data(), secret.status().message().c_str());
        return secret.status().code() == kvmesh::StatusCode::kInvalidArgument ? 2 : 1;
      }
    }
    std::printf("kvnode: %s is valid\n", check_path.c_str());
    return 0;
  }
  auto config = config_path.empty()
                    ? kvmesh::ParseNodeConfig(kvmesh::DefaultNodeConfigYaml(), "default config")
                    : kvmesh::LoadNodeConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "kvnode: %s\n", config.status().message().c_str());
    return 2;
  }
  if (const int code = CheckForStart(config_path.empty() ? "default config" : config_path, *config);
      code != 0) {
    return code;
  }
  if (auto st = kvmesh::SetupNodeLogging(config->logging.level, config->logging.format); !st.ok()) {
    std::fprintf(stderr, "kvnode: logging: %s\n", st.message().c_str());
    return 2;
  }
  // Every thread the node starts inherits this mask, so the signals reach only sigwait below.
  const sigset_t signals = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto node = kvmesh::Node::Start(*config);
  if (!node.ok()) {
    std::fprintf(stderr, "kvnode: %s\n", node.status().message().c_str());
    return node.status().code() == kvmesh::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << (*node)->Summary() << "kvnode ready" << std::endl;
  sd_notify(0, "READY=1\nSTATUS=serving");
  int sig = 0;
  while ((sig = WaitForSignal(signals)) == SIGHUP) {
    KVMESH_LOG_INFO("signal sighup received: reloading the secrets");
    sd_notify(0, "RELOADING=1\nSTATUS=reloading the secrets");
    const bool reloaded = (*node)->ReloadSecrets().ok();  // logged there
    sd_notify(0, reloaded ? "READY=1\nSTATUS=serving"
                          : "READY=1\nSTATUS=serving; the last secret reload failed (see the log)");
  }
  KVMESH_LOG_INFO("signal {} received: shutting down", sig == SIGTERM ? "sigterm" : "sigint");
  const auto drain_us = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::microseconds>(config->shutdown.drain_timeout)
          .count());
  sd_notifyf(0, "STOPPING=1\nSTATUS=shutting down\nEXTEND_TIMEOUT_USEC=%llu",
             drain_us + kShutdownProgressUs);
  std::thread([signals] {
    while (WaitForSignal(signals) == SIGHUP) {
    }
    std::fprintf(stderr, "kvnode: second signal during shutdown: exiting now\n");
    std::_Exit(130);
  }).detach();
  const kvmesh::ShutdownReport r = (*node)->Shutdown([](std::string_view what) {
    sd_notifyf(0, "STATUS=%.*s\nEXTEND_TIMEOUT_USEC=%llu", static_cast<int>(what.size()),
               what.data(), kShutdownProgressUs);
  });
  node->reset();
  std::cout << "kvnode stopped: released " << r.released_sequences << " sequences, flushed "
            << r.flushed_blocks << " blocks to disk in " << fmt::format("{:.2f}", r.seconds)
            << " s";
  if (r.flush_skipped_full > 0) {
    std::cout << " (" << r.flush_skipped_full
              << " not flushed: beyond the disk tier's capacity; the most valuable were written)";
  }
  if (r.flush_failures > 0)
    std::cout << "; " << r.flush_failures << " flush failures (see the log)";
  std::cout << std::endl;
  return r.flush_failures == 0 ? 0 : 1;
}
