#include "store/device_staging.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

// Each component of each pool starts on this boundary inside an area.
constexpr std::int64_t kComponentAlignment = 256;

std::int64_t AlignUp(std::int64_t n) {
  return (n + kComponentAlignment - 1) / kComponentAlignment * kComponentAlignment;
}

}  // namespace

// ---- Lease

DeviceStaging::Lease::Lease(Lease&& other) noexcept
    : staging_(std::exchange(other.staging_, nullptr)), area_(std::exchange(other.area_, -1)) {}

DeviceStaging::Lease& DeviceStaging::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    staging_ = std::exchange(other.staging_, nullptr);
    area_ = std::exchange(other.area_, -1);
  }
  return *this;
}

DeviceStaging::Lease::~Lease() { Release(); }

void DeviceStaging::Lease::Release() {
  if (staging_ != nullptr) staging_->Release(area_);
  staging_ = nullptr;
  area_ = -1;
}

const KvPoolView& DeviceStaging::Lease::view(int pool) const {
  KVMESH_CHECK(staging_ != nullptr) << "use of a released staging lease";
  KVMESH_CHECK(pool >= 0 && pool < static_cast<int>(staging_->pools_.size())) << "pool " << pool;
  return staging_->areas_[static_cast<std::size_t>(area_)].views[static_cast<std::size_t>(pool)];
}

std::span<const KvPoolView> DeviceStaging::Lease::views() const {
  KVMESH_CHECK(staging_ != nullptr) << "use of a released staging lease";
  return staging_->areas_[static_cast<std::size_t>(area_)].views;
}

std::int64_t DeviceStaging::Lease::capacity() const {
  KVMESH_CHECK(staging_ != nullptr) << "use of a released staging lease";
  return staging_->capacity_;
}

Status DeviceStaging::Lease::ToHost(int pool, std::span<const BlockCopyPair> pairs) {
  if (pairs.empty()) return Status::Ok();
  BlockCopyArgs args;
  args.dst = view(pool);  // checks the lease and the pool
  args.src = staging_->pools_[static_cast<std::size_t>(pool)];
  args.pairs = pairs.data();
  args.num_pairs = static_cast<std::int64_t>(pairs.size());
  return staging_->Copy(pool, args);
}

Status DeviceStaging::Lease::ToDevice(int pool, std::span<const BlockCopyPair> pairs) {
  if (pairs.empty()) return Status::Ok();
  BlockCopyArgs args;
  args.src = view(pool);  // checks the lease and the pool
  args.dst = staging_->pools_[static_cast<std::size_t>(pool)];
  args.pairs = pairs.data();
  args.num_pairs = static_cast<std::int64_t>(pairs.size());
  return staging_->Copy(pool, args);
}

namespace {

// Whether every present component of `cut` (a one-block view) lies inside block `block` of `full`.
bool InsideBlock(const KvPoolView& cut, const KvPoolView& full, std::int64_t block) {
  for (int c = 0; c < kNumKvComponents; ++c) {
    const PagedTensorLayout& t = cut.layout.components[c];
    if (!t.present()) continue;
    const PagedTensorLayout& f = full.layout.components[c];
    if (!f.present() || cut.base[c] == nullptr || full.base[c] == nullptr) return false;
    const auto* lo = static_cast<const std::byte*>(full.base[c]) + block * f.BytesPerBlock();
    const auto* at = static_cast<const std::byte*>(cut.base[c]);
    if (at < lo || at + t.BytesPerBlock() > lo + f.BytesPerBlock()) return false;
  }
  return true;
}

}  // namespace

Status DeviceStaging::Lease::ToDevicePart(int pool, std::int64_t staging_block, std::int64_t block,
                                          const PartOf& part) {
  const KvPoolView& area = view(pool);  // checks the lease and the pool
  const KvPoolView& device = staging_->pools_[static_cast<std::size_t>(pool)];
  if (staging_block < 0 || staging_block >= area.num_blocks || block < 0 ||
      block >= device.num_blocks) {
    return Status::InvalidArgument(StrCat("device staging: part of staging block ", staging_block,
                                          " to block ", block, " of pool ", pool));
  }
  BlockCopyArgs args;
  args.src = part(area, staging_block);
  args.dst = part(device, block);
  if (!InsideBlock(args.src, area, staging_block) || !InsideBlock(args.dst, device, block)) {
    return Status::InvalidArgument(
        StrCat("device staging: a part that is not inside its block (pool ", pool, ")"));
  }
  const BlockCopyPair pair{0, 0};
  args.pairs = &pair;
  args.num_pairs = 1;
  return staging_->Copy(pool, args);
}

// ---- DeviceStaging

Result<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(std::vector<KvPoolView> pools,
                                                             const DevicePoolsOptions& options,
                                                             int areas) {
  if (pools.empty()) return Status::InvalidArgument("device staging: no pools");
  if (options.device.size() != pools.size()) {
    return Status::InvalidArgument(StrCat("device_pools.device has ", options.device.size(),
                                          " entries for ", pools.size(), " pools"));
  }
  if (!options.make_backend) {
    return Status::InvalidArgument("device_pools.make_backend is empty");
  }
  if (options.staging_area_bytes <= 0) {
    return Status::InvalidArgument(
        StrCat("device_pools.staging_area_bytes ", options.staging_area_bytes, " is not positive"));
  }
  if (areas < 1) return Status::InvalidArgument(StrCat("device staging: ", areas, " areas"));
  std::unique_ptr<DeviceStaging> s(new DeviceStaging());
  std::int64_t block_bytes = 0;
  for (std::size_t p = 0; p < pools.size(); ++p) {
    const int device = options.device[p];
    if (device < 0) {
      return Status::InvalidArgument(
          StrCat("device_pools.device[", p, "] is ", device, " (negative)"));
    }
    block_bytes += pools[p].layout.BytesPerBlock();
    auto it = std::find_if(s->devices_.begin(), s->devices_.end(),
                           [&](const auto& d) { return d->device == device; });
    if (it == s->devices_.end()) {
      auto d = std::make_unique<Device>();
      d->device = device;
      Result<std::unique_ptr<KernelBackend>> backend = options.make_backend(device);
      if (!backend.ok()) {
        return backend.status().WithContext(StrCat("copy backend of device ", device));
      }
      if (*backend == nullptr) {
        return Status::InvalidArgument(
            StrCat("device_pools.make_backend gave no backend for device ", device));
      }
      {
        MutexLock lock(&d->mu);
        d->backend = std::move(backend).value();
      }
      s->devices_.push_back(std::move(d));
      it = s->devices_.end() - 1;
    }
    s->device_index_.push_back(static_cast<int>(it - s->devices_.begin()));
  }
  s->capacity_ = std::max<std::int64_t>(1, options.staging_area_bytes / block_bytes);
  std::int64_t area_bytes = 0;
  for (const KvPoolView& v : pools) {
    for (const PagedTensorLayout& t : v.layout.components) {
      if (t.present()) area_bytes += AlignUp(s->capacity_ * t.BytesPerBlock());
    }
  }
  for (int a = 0; a < areas; ++a) {
    Area area;
    KVMESH_ASSIGN_OR_RETURN(area.memory,
                            HostMemory::Allocate(static_cast<std::size_t>(area_bytes),
                                                 options.staging_memory, /*prefault=*/true));
    std::int64_t offset = 0;
    for (const KvPoolView& pool : pools) {
      KvPoolView v;
      v.layout = pool.layout;
      v.pool_scale = pool.pool_scale;
      v.num_blocks = s->capacity_;
      for (int c = 0; c < kNumKvComponents; ++c) {
        const PagedTensorLayout& t = pool.layout.components[c];
        if (!t.present()) continue;
        v.base[c] = area.memory.data() + offset;
        offset += AlignUp(s->capacity_ * t.BytesPerBlock());
      }
      area.views.push_back(v);
    }
    s->areas_.push_back(std::move(area));
  }
  s->pools_ = std::move(pools);
  {
    MutexLock lock(&s->mu_);
    s->free_.reserve(static_cast<std::size_t>(areas));
    for (int a = areas - 1; a >= 0; --a) s->free_.push_back(a);
  }
  KVMESH_LOG_INFO("device staging areas {} blocks per pool {} bytes {} memory {} devices {}", areas,
                  s->capacity_, area_bytes, HostMemoryKindName(options.staging_memory),
                  s->devices_.size());
  return s;
}

DeviceStaging::~DeviceStaging() {
  MutexLock lock(&mu_);
  if (free_.size() != areas_.size()) {
    KVMESH_LOG_ERROR("device staging destroyed with {} leases outstanding",
                     areas_.size() - free_.size());
  }
}

DeviceStaging::Lease DeviceStaging::Acquire() {
  MutexLock lock(&mu_);
  AwaitCondition(cv_, mu_, [this]() KVMESH_NO_THREAD_SAFETY_ANALYSIS { return !free_.empty(); });
  const int area = free_.back();
  free_.pop_back();
  return Lease(this, area);
}

int DeviceStaging::free_areas() const {
  MutexLock lock(&mu_);
  return static_cast<int>(free_.size());
}

void DeviceStaging::Release(int area) {
  {
    MutexLock lock(&mu_);
    free_.push_back(area);  // never allocates: reserved for every area
  }
  cv_.notify_one();
}

Status DeviceStaging::Copy(int pool, const BlockCopyArgs& args) {
  Device& d = *devices_[static_cast<std::size_t>(device_index_[static_cast<std::size_t>(pool)])];
  // The device's mutex is held across the launch and the wait: the backend is one stream, used by
  // one caller at a time. No other lock is taken under it.
  MutexLock lock(&d.mu);
  Status launched = d.backend->BlockCopy(args);
  // Waited for even when the launch failed: part of a copy may have been enqueued, and nothing may
  // still write the destination (or read the source) once this returns.
  Status waited = d.backend->Synchronize();
  if (!launched.ok()) return launched;
  return waited;
}

Status DeviceStaging::CopyBlocks(const BlockCopyArgs& args) {
  for (std::size_t p = 0; p < pools_.size(); ++p) {
    const KvPoolView& v = pools_[p];
    if (args.src.base[0] == v.base[0] && args.dst.base[0] == v.base[0]) {
      return Copy(static_cast<int>(p), args);
    }
  }
  return Status::InvalidArgument("device staging: a block copy between views of no single pool");
}

}  // namespace kvmesh
