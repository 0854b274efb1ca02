// kvnode's log output: spdlog's default logger to stderr, as text or as JSON lines.
//
//   text  "2026-12-01 21:24:30.123 info  session opened id 3 client vllm role ENGINE peer unix"
//   json  {"ts":"2026-12-01T21:24:30.123Z","level":"info","msg":"session opened id 3 ..."}
// Messages are lower case `key value` pairs (common/log.h); in JSON they are escaped as JSON
// strings, one object per line, so that log shippers can parse every line.
//
// Not thread-safe: call once at start-up, before other threads log.
#pragma once

#include <string_view>

#include "common/status.h"

namespace kvmesh {

// kInvalidArgument for an unknown level or format ("text", "json").
Status SetupNodeLogging(std::string_view level, std::string_view format);

}  // namespace kvmesh
