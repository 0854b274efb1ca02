// QuietProtobuf(): turns off protobuf's own log messages (an invalid UTF-8 string field logs an
// error line per parse), which would flood the fuzzer's output and slow it down. Parse failures
// still show as ParseFromArray returning false. Call it first in a target's entry point; cheap
// after the first call. Not thread-safe the first time (protobuf's SetLogHandler is not).
#pragma once

#include <google/protobuf/stubs/logging.h>

namespace kvmesh::fuzz {

inline void QuietProtobuf() {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
}

}  // namespace kvmesh::fuzz
