// FaultInjectionFs: a RocksDB FileSystem that forwards to the real one until told to fail reads or
// writes (STYLE rule 12: the file system is injected, so the I/O-error path is tested
// deterministically). Every file opened through it consults the switches on each call, so a file
// opened before the switch is flipped fails too. Thread-safe (atomic switches).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>

namespace kvmesh::store_test {

class FaultInjectionFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultInjectionFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : rocksdb::FileSystemWrapper(base) {}
  const char* Name() const override { return "FaultInjectionFs"; }

  void FailReads(bool fail) { fail_reads_.store(fail); }
  void FailWrites(bool fail) { fail_writes_.store(fail); }
  bool fail_reads() const { return fail_reads_.load(); }
  bool fail_writes() const { return fail_writes_.load(); }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& o,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;

 private:
  std::atomic<bool> fail_reads_{false};
  std::atomic<bool> fail_writes_{false};
};

// An Env over a FaultInjectionFs, for RocksDbTierOptions::env.
struct FaultInjectionEnv {
  FaultInjectionEnv();
  std::shared_ptr<FaultInjectionFs> fs;
  std::unique_ptr<rocksdb::Env> env;
};

}  // namespace kvmesh::store_test
