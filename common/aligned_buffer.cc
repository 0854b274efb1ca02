#include "common/aligned_buffer.h"

#include <cstdlib>

#include "common/strings.h"

namespace kvmesh {

Result<AlignedBuffer> AlignedBuffer::Allocate(std::size_t size, std::size_t alignment) {
  KVMESH_CHECK(alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0)
      << "alignment " << alignment;
  if (size == 0) return AlignedBuffer();
  const std::size_t rounded = (size + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    return Status::ResourceExhausted(StrCat("cannot allocate ", size, " bytes of host memory"));
  }
  return AlignedBuffer(static_cast<std::byte*>(p), size);
}

void AlignedBuffer::Reset() {
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvmesh
