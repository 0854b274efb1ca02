// Internals of node_config.cc and node_config_yaml.cc, shared by the two; not part of the API.
//
// Thread-safe (pure functions).
#pragma once

#include <optional>
#include <string>

#include "node/node_config.h"

namespace kvmesh::node_config_internal {

// One thing wrong with a configuration: the key as a dotted path ("kv_cache.pool_shares[1]") and
// what is wrong with it, without the key ("0 must be a finite number greater than 0").
struct ConfigProblem {
  std::string key;
  std::string message;
};

// The first problem of `config` (the checks of NodeConfig::Validate), or nullopt.
std::optional<ConfigProblem> FindConfigProblem(const NodeConfig& config);

// Makes every relative path of `config` (data_dir, model.hf_config, disk_tier.path,
// control.unix_socket, control.secret_file) relative to `base_dir` instead; empty paths stay empty,
// and an empty base_dir changes nothing.
void ResolveConfigPaths(const std::string& base_dir, NodeConfig* config);

}  // namespace kvmesh::node_config_internal
