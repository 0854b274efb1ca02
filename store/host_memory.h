// HostMemory: an owned host allocation for the host tier — CUDA pinned memory (cudaHostAlloc) when
// the build has CUDA and a device is present, page-aligned host memory (AlignedBuffer) otherwise.
//
// Pinned memory lets device↔host copies run as DMA at full PCIe speed and asynchronously; on the
// CPU backend there is nothing to pin for. kAuto picks pinned when it can and falls back quietly
// (one info log); kPinned insists (kNotSupported without CUDA or a device, kCudaError when the
// allocation fails); kAligned never pins.
//
// Move-only RAII: the destructor frees with the matching call (cudaFreeHost or free). With
// `prefault`, every page is written once at allocation so that the first use does not pay page
// faults (cudaHostAlloc memory is already resident).
//
// Thread safety: externally synchronised, like any owned buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "common/aligned_buffer.h"
#include "common/result.h"

namespace kvmesh {

enum class HostMemoryKind : std::uint8_t { kAuto = 0, kPinned = 1, kAligned = 2 };

// "auto", "pinned", "aligned".
std::string_view HostMemoryKindName(HostMemoryKind kind);

class HostMemory {
 public:
  HostMemory() = default;
  static Result<HostMemory> Allocate(std::size_t size, HostMemoryKind kind, bool prefault);

  HostMemory(HostMemory&& other) noexcept
      : aligned_(std::move(other.aligned_)),
        pinned_(std::exchange(other.pinned_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  HostMemory& operator=(HostMemory&& other) noexcept {
    if (this != &other) {
      Reset();
      aligned_ = std::move(other.aligned_);
      pinned_ = std::exchange(other.pinned_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  ~HostMemory() { Reset(); }

  std::byte* data() { return pinned_ != nullptr ? pinned_ : aligned_.data(); }
  [[nodiscard]] const std::byte* data() const {
    return pinned_ != nullptr ? pinned_ : aligned_.data();
  }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] bool pinned() const { return pinned_ != nullptr; }

 private:
  void Reset();

  AlignedBuffer aligned_;
  std::byte* pinned_ = nullptr;  // from cudaHostAlloc
  std::size_t size_ = 0;
};

}  // namespace kvmesh
