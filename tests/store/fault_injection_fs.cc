#include "tests/store/fault_injection_fs.h"

namespace kvmesh::store_test {
namespace {

class FaultReadFile : public rocksdb::FSRandomAccessFileOwnerWrapper {
 public:
  FaultReadFile(std::unique_ptr<rocksdb::FSRandomAccessFile>&& f, const FaultInjectionFs* fs)
      : rocksdb::FSRandomAccessFileOwnerWrapper(std::move(f)), fs_(fs) {}
  rocksdb::IOStatus Read(uint64_t offset, size_t n, const rocksdb::IOOptions& options,
                         rocksdb::Slice* result, char* scratch,
                         rocksdb::IODebugContext* dbg) const override {
    if (fs_->fail_reads()) return rocksdb::IOStatus::IOError("injected read error");
    return target()->Read(offset, n, options, result, scratch, dbg);
  }
  rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs,
                              const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_reads()) return rocksdb::IOStatus::IOError("injected read error");
    return target()->MultiRead(reqs, num_reqs, options, dbg);
  }

 private:
  const FaultInjectionFs* fs_;
};

class FaultWriteFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultWriteFile(std::unique_ptr<rocksdb::FSWritableFile>&& f, const FaultInjectionFs* fs)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_writes()) return rocksdb::IOStatus::IOError("injected write error");
    return target()->Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_writes()) return rocksdb::IOStatus::IOError("injected write error");
    return target()->Append(data, options, info, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_writes()) return rocksdb::IOStatus::IOError("injected sync error");
    return target()->Sync(options, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    if (fs_->fail_writes()) return rocksdb::IOStatus::IOError("injected sync error");
    return target()->Fsync(options, dbg);
  }

 private:
  const FaultInjectionFs* fs_;
};

}  // namespace

rocksdb::IOStatus FaultInjectionFs::NewRandomAccessFile(
    const std::string& f, const rocksdb::FileOptions& o,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* r, rocksdb::IODebugContext* dbg) {
  if (fail_reads()) return rocksdb::IOStatus::IOError("injected open error");
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;
  rocksdb::IOStatus s = target()->NewRandomAccessFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new FaultReadFile(std::move(file), this));
  return s;
}

rocksdb::IOStatus FaultInjectionFs::NewWritableFile(const std::string& f,
                                                    const rocksdb::FileOptions& o,
                                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                    rocksdb::IODebugContext* dbg) {
  if (fail_writes()) return rocksdb::IOStatus::IOError("injected open error");
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
  if (s.ok()) r->reset(new FaultWriteFile(std::move(file), this));
  return s;
}

FaultInjectionEnv::FaultInjectionEnv()
    : fs(std::make_shared<FaultInjectionFs>(rocksdb::FileSystem::Default())),
      env(rocksdb::NewCompositeEnv(fs)) {}

}  // namespace kvmesh::store_test
