// FaultInjectionFs: a RocksDB FileSystem that forwards to the real one until told to fail, and
// that can simulate a power loss (STYLE rule 12: the file system is injected, so I/O errors, a
// full disk and a lost page cache are tested deterministically).
//
//   FailReads / FailWrites   every read (or write, sync, file creation) fails with an I/O error;
//   FailWritesNoSpace        writes and file creation fail with "no space left on device", as on
//                            a full file system;
//   DropUnsyncedData         what a power loss does to files written through this file system:
//                            each is cut back to the length its last Sync/Fsync covered, and a
//                            file never synced is deleted. Call it after the database is closed
//                            (or its writes are failing), then reopen.
//
// Every file opened through it consults the switches on each call, so a file opened before a
// switch is flipped fails too. Thread-safe (atomic switches; the sync table has a mutex).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kvmesh::store_test {

class FaultInjectionFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultInjectionFs(const std::shared_ptr<rocksdb::FileSystem>& base)
      : rocksdb::FileSystemWrapper(base) {}
  const char* Name() const override { return "FaultInjectionFs"; }

  void FailReads(bool fail) { fail_reads_.store(fail); }
  void FailWrites(bool fail) { fail_writes_.store(fail); }
  void FailWritesNoSpace(bool fail) { no_space_.store(fail); }
  bool fail_reads() const { return fail_reads_.load(); }
  // The error a write gets now (OK when writes work).
  rocksdb::IOStatus WriteError() const;

  // Power loss: see above. Returns how many files were cut or deleted.
  int DropUnsyncedData();

  // Called by the files this file system opened.
  void Appended(const std::string& fname, std::uint64_t bytes);
  void Synced(const std::string& fname);

  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& o,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override;

 private:
  struct FileState {
    std::uint64_t size = 0;
    std::uint64_t synced = 0;
    bool ever_synced = false;
  };

  std::atomic<bool> fail_reads_{false};
  std::atomic<bool> fail_writes_{false};
  std::atomic<bool> no_space_{false};
  std::mutex mu_;
  std::map<std::string, FileState> files_;  // written through this file system
};

// An Env over a FaultInjectionFs, for RocksDbTierOptions::env.
struct FaultInjectionEnv {
  FaultInjectionEnv();
  std::shared_ptr<FaultInjectionFs> fs;
  std::unique_ptr<rocksdb::Env> env;
};

}  // namespace kvmesh::store_test
