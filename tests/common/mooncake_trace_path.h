// Where the tests and benchmarks that replay the Mooncake conversation trace find it:
// $KVMESH_MOONCAKE_TRACE when set, else the path the build configured into the target
// (KVMESH_MOONCAKE_TRACE_DEFAULT: ../shared/data/mooncake/conversation_trace.jsonl beside the
// source tree), else "" (the caller then skips). Header-only: the default is the including
// target's.
#pragma once

#include <cstdlib>
#include <string>

namespace kvmesh {

inline std::string MooncakeTracePath() {
  if (const char* env = std::getenv("KVMESH_MOONCAKE_TRACE"); env != nullptr && *env != '\0') {
    return env;
  }
#ifdef KVMESH_MOONCAKE_TRACE_DEFAULT
  return KVMESH_MOONCAKE_TRACE_DEFAULT;
#else
  return "";
#endif
}

}  // namespace kvmesh
