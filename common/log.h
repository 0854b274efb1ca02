// Logging through spdlog.
//
// Style (docs/architecture.md): lower case, `key value` pairs, logged once where an error is first
// seen, nothing per block on a hot path above debug level.
//
//   KVMESH_LOG_INFO("pool planned pool {} blocks {} bytes_per_block {}", id, blocks, bytes);
//
// kernels/ and pool/ do not log (they return Status and counters); this header is for store/ and
// the folders to its right. Thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "common/status.h"

namespace kvmesh {

// Sets the level of the default logger: trace, debug, info, warn, error, off.
// kInvalidArgument names the accepted levels when `level` is none of them.
Status SetLogLevel(std::string_view level);

}  // namespace kvmesh

#define KVMESH_LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define KVMESH_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define KVMESH_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define KVMESH_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define KVMESH_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
