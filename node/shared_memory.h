// SharedMemory: memory two processes map at once — a memfd (an anonymous file) mapped MAP_SHARED.
// The node creates one per pool and passes its descriptor to an attaching engine over the Unix
// socket (SCM_RIGHTS); the engine maps the same pages (MapSharedMemory) and reads and writes the
// pool in place, so no KV byte is copied through a socket.
//
// The memfd is sealed against growing and shrinking (F_SEAL_GROW | F_SEAL_SHRINK) before it is
// shared: a client cannot truncate it under the node (which would make the node fault on access).
// Pages are prefaulted at creation when asked (MAP_POPULATE), so the first append does not pay for
// page faults.
//
// Move-only RAII: the destructor unmaps and closes. Thread safety: the object is externally
// synchronised; the memory itself is shared, with the block manager's contracts saying who writes
// which block when (node/engine_service.h).
#pragma once

#include <cstddef>
#include <string>

#include "common/result.h"

namespace kvmesh {

class SharedMemory {
 public:
  // A new memfd of `bytes` (> 0) bytes named `name` (shown in /proc/PID/fd), mapped read-write.
  // kResourceExhausted when the memory cannot be had (the message gives the bytes), kIoError
  // for other failures.
  static Result<SharedMemory> Create(const std::string& name, std::size_t bytes, bool prefault);
  // Maps a received descriptor (taking ownership of `fd`). kInvalidArgument when the object is
  // smaller than `bytes`; kIoError when it cannot be mapped.
  static Result<SharedMemory> Map(int fd, std::size_t bytes);

  SharedMemory() = default;
  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] int fd() const { return fd_; }

 private:
  SharedMemory(int fd, void* data, std::size_t size) : fd_(fd), data_(data), size_(size) {}
  void Reset();

  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvmesh
