// AlignedBuffer: an owned, aligned, uninitialised host allocation (RAII).
//
// Used for the CPU backend's pools, staging buffers and the host tier when CUDA pinned memory is
// not available. Move-only. Alignment defaults to 4 KiB (a page: suits DMA, O_DIRECT and AVX
// stores).
//
// Thread safety: externally synchronised, like any owned buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/result.h"

namespace kvmesh {

class AlignedBuffer {
 public:
  static constexpr std::size_t kDefaultAlignment = 4096;

  AlignedBuffer() = default;
  // Allocates `size` bytes (0 gives an empty buffer). kResourceExhausted when the allocation fails.
  // REQUIRES: alignment is a power of two and a multiple of sizeof(void*).
  static Result<AlignedBuffer> Allocate(std::size_t size,
                                        std::size_t alignment = kDefaultAlignment);

  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { Reset(); }

  std::byte* data() { return data_; }
  [[nodiscard]] const std::byte* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }

 private:
  AlignedBuffer(std::byte* data, std::size_t size) : data_(data), size_(size) {}
  void Reset();

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvmesh
