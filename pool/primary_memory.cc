#include "pool/primary_memory.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/strings.h"

#if defined(KVMESH_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kvmesh {
namespace {

// The value of "Key:   12345 kB" in bytes.
Result<std::int64_t> MeminfoField(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') {
      continue;
    }
    std::string_view rest = line.substr(key.size() + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    std::int64_t kb = 0;
    const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
    const std::string_view unit(ptr, rest.data() + rest.size() - ptr);
    if (ec != std::errc() || kb < 0 || unit != " kB" ||
        kb > (std::numeric_limits<std::int64_t>::max() >> 10)) {
      return Status::Corruption(StrCat("/proc/meminfo line '", line, "' is malformed"));
    }
    return kb << 10;
  }
  return Status::Corruption(StrCat("/proc/meminfo has no ", key, " line"));
}

}  // namespace

std::string_view PrimaryMemoryKindName(PrimaryMemoryKind k) {
  return k == PrimaryMemoryKind::kGpu ? "gpu" : "host";
}

Result<PrimaryMemory> ParseMeminfo(std::string_view meminfo) {
  PrimaryMemory m;
  m.kind = PrimaryMemoryKind::kHost;
  KVMESH_ASSIGN_OR_RETURN(m.free_bytes, MeminfoField(meminfo, "MemAvailable"));
  KVMESH_ASSIGN_OR_RETURN(m.total_bytes, MeminfoField(meminfo, "MemTotal"));
  m.source = "/proc/meminfo MemAvailable";
  return m;
}

int CudaDeviceCount() {
#if defined(KVMESH_HAVE_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

Result<PrimaryMemory> DetectDeviceMemory(int device) {
#if defined(KVMESH_HAVE_CUDA)
  const int count = CudaDeviceCount();
  if (device < 0 || device >= count) {
    return Status::NotFound(StrCat("CUDA device ", device, " does not exist (this process sees ",
                                   count, count == 1 ? " device)" : " devices)"));
  }
  int previous = -1;
  const bool known = cudaGetDevice(&previous) == cudaSuccess;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (known) (void)cudaSetDevice(previous);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::CudaError(
        StrCat("cudaMemGetInfo(device ", device, ") failed: ", cudaGetErrorString(err)));
  }
  PrimaryMemory m;
  m.kind = PrimaryMemoryKind::kGpu;
  m.device = device;
  m.free_bytes = static_cast<std::int64_t>(free_bytes);
  m.total_bytes = static_cast<std::int64_t>(total_bytes);
  m.source = StrCat("cudaMemGetInfo(device ", device, ")");
  return m;
#else
  return Status::NotSupported(
      StrCat("CUDA device ", device, ": this build of kvmesh has no CUDA (nvcc was not found)"));
#endif
}

Result<PrimaryMemory> DetectPrimaryMemory() {
#if defined(KVMESH_HAVE_CUDA)
  // The current device, when there is one; else the host is the primary.
  int device = 0;
  if (CudaDeviceCount() > 0 && cudaGetDevice(&device) == cudaSuccess) {
    return DetectDeviceMemory(device);
  }
  (void)cudaGetLastError();
#endif
  std::ifstream in("/proc/meminfo");
  if (!in) {
    return Status::IoError(StrCat("cannot read /proc/meminfo: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseMeminfo(text.str());
}

}  // namespace kvmesh
