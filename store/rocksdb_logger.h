// RocksDbLogger: RocksDB's info log routed to spdlog (common/log.h), so that RocksDB never creates
// or writes a LOG file of its own in the tier folder.
//
// Why: RocksDB's own LOG writer (created when DBOptions::info_log is null) aborts the process
// (an assertion in its WritableFileWriter) when a write to a full file system fails and is then
// synced — reopening a tier on a full disk killed the process with SIGABRT instead of returning
// an error. With this logger nothing of RocksDB's logging touches the disk.
//
// Levels: RocksDB's FATAL goes to spdlog's error, everything else to debug. RocksDB's errors and
// warnings are not news for the operator: every error it has reaches the tier through a call's
// status, and the tier logs it once where it sees it (disabling itself) or returns it (open) — a
// second copy from RocksDB's own log would print each error twice. Write stalls and the like are
// there at debug level. Each line is prefixed with "rocksdb path <tier path>".
//
// Thread safety: thread-safe (RocksDB logs from its background threads; spdlog is thread-safe).
#pragma once

#include <rocksdb/env.h>

#include <memory>
#include <string>

namespace kvmesh {

class RocksDbLogger final : public rocksdb::Logger {
 public:
  explicit RocksDbLogger(std::string path);
  using rocksdb::Logger::Logv;
  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override;

 private:
  const std::string path_;
};

}  // namespace kvmesh
