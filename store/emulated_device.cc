#include "store/emulated_device.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "common/strings.h"

namespace kvmesh {

// The emulated CUDA backend: deferred block copies between emulated device memory (through its
// alias) and host memory. See emulated_device.h.
class EmulatedCopyBackend final : public KernelBackend {
 public:
  EmulatedCopyBackend(EmulatedDevice* device, int ordinal) : device_(device), ordinal_(ordinal) {}

  [[nodiscard]] BackendKind kind() const override { return BackendKind::kCuda; }
  [[nodiscard]] bool host_addressable() const override { return false; }

  // Only block copies are emulated.
  Result<BackendBuffer> Allocate(std::size_t /*bytes*/) override { return Unsupported("Allocate"); }
  Status Upload(void* /*dst*/, const void* /*src*/, std::size_t /*bytes*/) override {
    return Unsupported("Upload");
  }
  Status Download(void* /*dst*/, const void* /*src*/, std::size_t /*bytes*/) override {
    return Unsupported("Download");
  }

  Status AppendKv(const AppendKvArgs& /*args*/) override { return Unsupported("AppendKv"); }
  Status AppendIndexK(const AppendIndexKArgs& /*args*/) override {
    return Unsupported("AppendIndexK");
  }
  Status DecodeAttention(const DecodeAttentionArgs& /*args*/, Workspace /*workspace*/) override {
    return Unsupported("DecodeAttention");
  }
  Status MlaDecode(const MlaDecodeArgs& /*args*/, Workspace /*workspace*/) override {
    return Unsupported("MlaDecode");
  }

  Status BlockCopy(const BlockCopyArgs& args) override {
    const Call call(this);
    KVMESH_RETURN_IF_ERROR(CanImplementBlockCopy(args));
    Pending p;
    p.args = args;
    bool src_device = false;
    bool dst_device = false;
    KVMESH_RETURN_IF_ERROR(device_->Translate(ordinal_, p.args.src, &src_device));
    KVMESH_RETURN_IF_ERROR(device_->Translate(ordinal_, p.args.dst, &dst_device));
    EmulatedDevice::FailAt at = EmulatedDevice::FailAt::kLaunch;
    const bool fail = device_->TakeFailure(&at);
    if (fail && at == EmulatedDevice::FailAt::kLaunch) {
      return Status::CudaError("emulated device: injected launch failure");
    }
    p.pairs.assign(args.pairs, args.pairs + args.num_pairs);  // the caller may reuse its array
    p.args.pairs = p.pairs.data();
    p.fail = fail;
    {
      MutexLock lock(&device_->mu_);
      EmulatedDeviceStats& s = device_->stats_;
      ++s.launches;
      const std::int64_t n = args.num_pairs;
      if (src_device && dst_device) {
        s.device_to_device_pairs += n;
      } else if (src_device) {
        s.to_host_pairs += n;
      } else if (dst_device) {
        s.to_device_pairs += n;
      }
    }
    queue_.push_back(std::move(p));
    return Status::Ok();
  }

  Status Synchronize() override {
    const Call call(this);
    {
      MutexLock lock(&device_->mu_);
      ++device_->stats_.synchronizes;
    }
    Status result;
    for (const Pending& p : queue_) {
      if (p.fail) {
        if (result.ok()) result = Status::CudaError("emulated device: injected kernel failure");
        continue;
      }
      Status st = cpu::BlockCopy(p.args, nullptr);
      if (!st.ok() && result.ok()) result = std::move(st);
    }
    queue_.clear();
    return result;
  }

 private:
  struct Pending {
    BlockCopyArgs args;  // translated; pairs point into `pairs`
    std::vector<BlockCopyPair> pairs;
    bool fail = false;
  };
  // Counts calls that overlap on this backend (it is externally synchronised).
  class Call {
   public:
    explicit Call(EmulatedCopyBackend* b) : b_(b) {
      if (b_->busy_.exchange(true)) {
        MutexLock lock(&b_->device_->mu_);
        ++b_->device_->stats_.overlapping_calls;
      }
      std::this_thread::yield();  // a device call takes time: widen the window for a second one
    }
    ~Call() { b_->busy_.store(false); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    EmulatedCopyBackend* b_;
  };

  static Status Unsupported(std::string_view what) {
    return Status::NotSupported(StrCat("emulated device backend: ", what));
  }

  EmulatedDevice* device_;
  int ordinal_;
  std::atomic<bool> busy_{false};
  std::vector<Pending> queue_;  // launched, not yet run (externally synchronised)
};

EmulatedDevice::~EmulatedDevice() {
  MutexLock lock(&mu_);
  for (const Region& r : regions_) {
    (void)munmap(r.device, r.bytes);
    (void)munmap(r.alias, r.bytes);
    (void)close(r.fd);
  }
}

Result<EmulatedDevice::Memory> EmulatedDevice::Allocate(std::size_t bytes, int ordinal) {
  if (bytes == 0) return Status::InvalidArgument("emulated device: an allocation of 0 bytes");
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  const int fd = memfd_create("kvmesh-emulated-device", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return Status::IoError(StrCat("emulated device: memfd_create: ", std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    (void)close(fd);
    return Status::ResourceExhausted(
        StrCat("emulated device: ", bytes, " bytes: ftruncate: ", std::strerror(err)));
  }
  // Sealed against resizing, as the host pools' memfds: a process it is shared with cannot
  // truncate it under the backend.
  (void)fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  void* device = mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  void* alias = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (device == MAP_FAILED || alias == MAP_FAILED) {
    const int err = errno;
    if (device != MAP_FAILED) (void)munmap(device, bytes);
    if (alias != MAP_FAILED) (void)munmap(alias, bytes);
    (void)close(fd);
    return Status::ResourceExhausted(
        StrCat("emulated device: mapping ", bytes, " bytes: ", std::strerror(err)));
  }
  Memory m{static_cast<std::byte*>(device), static_cast<std::byte*>(alias), bytes, fd};
  MutexLock lock(&mu_);
  regions_.push_back({m.device, m.alias, bytes, ordinal, fd});
  return m;
}

Result<EmulatedDevice::Pool> EmulatedDevice::AllocatePool(const KvPoolLayout& layout,
                                                          std::int64_t blocks, float pool_scale,
                                                          int ordinal) {
  std::size_t bytes = 0;
  std::size_t offsets[kNumKvComponents] = {};
  for (int c = 0; c < kNumKvComponents; ++c) {
    const PagedTensorLayout& t = layout.components[c];
    if (!t.present()) continue;
    offsets[c] = bytes;
    bytes += (static_cast<std::size_t>(blocks * t.BytesPerBlock()) + 255) / 256 * 256;
  }
  KVMESH_ASSIGN_OR_RETURN(const Memory m, Allocate(bytes, ordinal));
  Pool pool;
  pool.device.layout = pool.alias.layout = layout;
  pool.device.num_blocks = pool.alias.num_blocks = blocks;
  pool.device.pool_scale = pool.alias.pool_scale = pool_scale;
  for (int c = 0; c < kNumKvComponents; ++c) {
    if (!layout.components[c].present()) continue;
    pool.device.base[c] = m.device + offsets[c];
    pool.alias.base[c] = m.alias + offsets[c];
  }
  return pool;
}

std::function<Result<std::unique_ptr<KernelBackend>>(int)> EmulatedDevice::BackendFactory() {
  return [this](int ordinal) -> Result<std::unique_ptr<KernelBackend>> {
    {
      MutexLock lock(&mu_);
      ++stats_.backends_made;
    }
    return std::unique_ptr<KernelBackend>(std::make_unique<EmulatedCopyBackend>(this, ordinal));
  };
}

void EmulatedDevice::FailNextCopies(int n, FailAt at) {
  MutexLock lock(&mu_);
  fail_next_ = n;
  fail_at_ = at;
}

bool EmulatedDevice::TakeFailure(FailAt* at) {
  MutexLock lock(&mu_);
  if (fail_next_ <= 0) return false;
  --fail_next_;
  ++stats_.injected_failures;
  *at = fail_at_;
  return true;
}

EmulatedDeviceStats EmulatedDevice::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

const EmulatedDevice::Region* EmulatedDevice::Find(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  for (const Region& r : regions_) {
    if (b >= r.device && b < r.device + r.bytes) return &r;
  }
  return nullptr;
}

Status EmulatedDevice::Translate(int ordinal, KvPoolView& view, bool* on_device) const {
  MutexLock lock(&mu_);
  *on_device = false;
  for (void*& base : view.base) {
    if (base == nullptr) continue;
    const Region* r = Find(base);
    if (r == nullptr) continue;  // host memory
    if (r->ordinal != ordinal) {
      return Status::InvalidArgument(
          StrCat("emulated device ", ordinal, ": an address of device ", r->ordinal));
    }
    base = r->alias + (static_cast<std::byte*>(base) - r->device);
    *on_device = true;
  }
  return Status::Ok();
}

}  // namespace kvmesh
