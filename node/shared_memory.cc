#include "node/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/strings.h"
#include "common/units.h"

namespace kvmesh {

Result<SharedMemory> SharedMemory::Create(const std::string& name, std::size_t bytes,
                                          bool prefault) {
  if (bytes == 0) return Status::InvalidArgument("shared memory of 0 bytes");
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::IoError(StrCat("memfd_create ", name, ": ", std::strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IoError(
        StrCat("ftruncate ", name, " to ", bytes, " bytes: ", std::strerror(err)));
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IoError(StrCat("sealing ", name, ": ", std::strerror(err)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (prefault ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    const std::string what = StrCat("mapping ", FormatBytes(static_cast<std::int64_t>(bytes)),
                                    " of shared memory for ", name, ": ", std::strerror(err));
    return err == ENOMEM ? Status::ResourceExhausted(what) : Status::IoError(what);
  }
  return SharedMemory(fd, p, bytes);
}

Result<SharedMemory> SharedMemory::Map(int fd, std::size_t bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IoError(StrCat("fstat of a received descriptor: ", std::strerror(err)));
  }
  if (static_cast<std::size_t>(st.st_size) < bytes) {
    ::close(fd);
    return Status::InvalidArgument(
        StrCat("shared memory object has ", st.st_size, " bytes, the pool needs ", bytes));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return Status::IoError(StrCat("mapping received shared memory: ", std::strerror(err)));
  }
  return SharedMemory(fd, p, bytes);
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedMemory::~SharedMemory() { Reset(); }

void SharedMemory::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

}  // namespace kvmesh
