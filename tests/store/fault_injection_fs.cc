#include "tests/store/fault_injection_fs.h"

#include <unistd.h>

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
  FaultWriteFile(std::unique_ptr<rocksdb::FSWritableFile>&& f, FaultInjectionFs* fs,
                 std::string name)
      : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs), name_(std::move(name)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    if (auto e = fs_->WriteError(); !e.ok()) return e;
    auto s = target()->Append(data, options, dbg);
    if (s.ok()) fs_->Appended(name_, data.size());
    return s;
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (auto e = fs_->WriteError(); !e.ok()) return e;
    auto s = target()->Append(data, options, info, dbg);
    if (s.ok()) fs_->Appended(name_, data.size());
    return s;
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                     const rocksdb::IOOptions& options,
                                     rocksdb::IODebugContext* dbg) override {
    if (auto e = fs_->WriteError(); !e.ok()) return e;
    auto s = target()->PositionedAppend(data, offset, options, dbg);
    if (s.ok()) fs_->Appended(name_, data.size());
    return s;
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    if (auto e = fs_->WriteError(); !e.ok()) return e;
    auto s = target()->Sync(options, dbg);
    if (s.ok()) fs_->Synced(name_);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* dbg) override {
    if (auto e = fs_->WriteError(); !e.ok()) return e;
    auto s = target()->Fsync(options, dbg);
    if (s.ok()) fs_->Synced(name_);
    return s;
  }

 private:
  FaultInjectionFs* fs_;
  std::string name_;
};

}  // namespace

rocksdb::IOStatus FaultInjectionFs::WriteError() const {
  if (no_space_.load()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
  if (fail_writes_.load()) return rocksdb::IOStatus::IOError("injected write error");
  return rocksdb::IOStatus::OK();
}

void FaultInjectionFs::Appended(const std::string& fname, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[fname].size += bytes;
}

void FaultInjectionFs::Synced(const std::string& fname) {
  std::lock_guard<std::mutex> lock(mu_);
  FileState& f = files_[fname];
  f.synced = f.size;
  f.ever_synced = true;
}

int FaultInjectionFs::DropUnsyncedData() {
  std::lock_guard<std::mutex> lock(mu_);
  int changed = 0;
  for (const auto& [name, f] : files_) {
    if (access(name.c_str(), F_OK) != 0) continue;
    if (!f.ever_synced) {
      changed += unlink(name.c_str()) == 0 ? 1 : 0;
    } else if (f.synced < f.size) {
      changed += truncate(name.c_str(), static_cast<off_t>(f.synced)) == 0 ? 1 : 0;
    }
  }
  files_.clear();
  return changed;
}

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
  if (auto e = WriteError(); !e.ok()) return e;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->NewWritableFile(f, o, &file, dbg);
  if (s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      files_[f] = FileState{};  // created (or truncated) now: nothing of it is synced
    }
    r->reset(new FaultWriteFile(std::move(file), this, f));
  }
  return s;
}

rocksdb::IOStatus FaultInjectionFs::ReopenWritableFile(const std::string& f,
                                                       const rocksdb::FileOptions& o,
                                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                       rocksdb::IODebugContext* dbg) {
  if (auto e = WriteError(); !e.ok()) return e;
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus s = target()->ReopenWritableFile(f, o, &file, dbg);
  if (s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!files_.contains(f)) {  // what is there already is durable
        std::uint64_t size = 0;
        target()->GetFileSize(f, rocksdb::IOOptions(), &size, nullptr).PermitUncheckedError();
        files_[f] = FileState{size, size, true};
      }
    }
    r->reset(new FaultWriteFile(std::move(file), this, f));
  }
  return s;
}

rocksdb::IOStatus FaultInjectionFs::RenameFile(const std::string& src, const std::string& target,
                                               const rocksdb::IOOptions& o,
                                               rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = FileSystemWrapper::RenameFile(src, target, o, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(target);
    if (auto it = files_.find(src); it != files_.end()) {
      files_[target] = it->second;
      files_.erase(src);
    }
  }
  return s;
}

rocksdb::IOStatus FaultInjectionFs::DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                                               rocksdb::IODebugContext* dbg) {
  rocksdb::IOStatus s = FileSystemWrapper::DeleteFile(f, o, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(f);
  }
  return s;
}

FaultInjectionEnv::FaultInjectionEnv()
    : fs(std::make_shared<FaultInjectionFs>(rocksdb::FileSystem::Default())),
      env(rocksdb::NewCompositeEnv(fs)) {}

}  // namespace kvmesh::store_test
