// RocksDbLogger: RocksDB's info log routed to spdlog (common/log.h), so that RocksDB never creates
// or writes a LOG file of its own in the tier folder.
//
// Why: RocksDB's own LOG writer (created when DBOptions::info_log is null) aborts the process
// (an assertion in its WritableFileWriter) when a write to a full file system fails and is then
// synced — reopening a tier on a full disk killed the process with SIGABRT instead of returning
// an error. With this logger nothing of RocksDB's logging touches the disk.
//
// Levels: RocksDB's ERROR and FATAL go to spdlog's error, WARN to warn, INFO, DEBUG and HEADER
// to debug (RocksDB logs several lines per flush and compaction at INFO; they are detail, not
// news). Each line is prefixed with "rocksdb " and the tier path.
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
