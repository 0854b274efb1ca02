// The CPU backend: every kernel's CPU twin, run on the backend's ThreadPool. Calls return when
// their output is written, so Synchronize() has nothing to wait for. Its memory is aligned host
// memory; Upload and Download are memcpys that complete before they return.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "common/strings.h"
#include "kernels/backend.h"

namespace kvmesh {
namespace {

constexpr std::size_t kCpuBufferAlignment = 64;  // a cache line; covers every kernel's vector loads

void FreeHost(void* data, int /*device*/) noexcept { std::free(data); }

Status CheckCopy(std::string_view what, const void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) {
    return Status::InvalidArgument(StrCat(what, " of ", bytes, " bytes with a null pointer"));
  }
  return Status::Ok();
}

class CpuBackend final : public KernelBackend {
 public:
  explicit CpuBackend(ThreadPool* executor) : executor_(executor) {}

  [[nodiscard]] BackendKind kind() const override { return BackendKind::kCpu; }
  [[nodiscard]] bool host_addressable() const override { return true; }

  Result<BackendBuffer> Allocate(std::size_t bytes) override {
    if (bytes == 0) return BackendBuffer();
    if (bytes > std::numeric_limits<std::size_t>::max() - kCpuBufferAlignment) {
      return Status::ResourceExhausted(StrCat("cpu backend: cannot allocate ", bytes, " bytes"));
    }
    const std::size_t rounded =
        (bytes + kCpuBufferAlignment - 1) / kCpuBufferAlignment * kCpuBufferAlignment;
    void* p = std::aligned_alloc(kCpuBufferAlignment, rounded);
    if (p == nullptr) {
      return Status::ResourceExhausted(
          StrCat("cpu backend: cannot allocate ", bytes, " bytes of host memory"));
    }
    return BackendBuffer(p, bytes, &FreeHost, -1);
  }
  Status Upload(void* dst, const void* src, std::size_t bytes) override {
    KVMESH_RETURN_IF_ERROR(CheckCopy("cpu backend upload", dst, src, bytes));
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
    return Status::Ok();
  }
  Status Download(void* dst, const void* src, std::size_t bytes) override {
    KVMESH_RETURN_IF_ERROR(CheckCopy("cpu backend download", dst, src, bytes));
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
    return Status::Ok();
  }

  Status AppendKv(const AppendKvArgs& args) override { return cpu::AppendKv(args, executor_); }
  Status AppendIndexK(const AppendIndexKArgs& args) override {
    return cpu::AppendIndexK(args, executor_);
  }
  Status DecodeAttention(const DecodeAttentionArgs& args, Workspace workspace) override {
    return cpu::DecodeAttention(args, workspace, executor_);
  }
  Status MlaDecode(const MlaDecodeArgs& args, Workspace workspace) override {
    return cpu::MlaDecode(args, workspace, executor_);
  }
  Status BlockCopy(const BlockCopyArgs& args) override { return cpu::BlockCopy(args, executor_); }
  Status Synchronize() override { return Status::Ok(); }

 private:
  ThreadPool* executor_;  // not owned; may be null
};

}  // namespace

std::unique_ptr<KernelBackend> MakeCpuBackend(ThreadPool* executor) {
  return std::make_unique<CpuBackend>(executor);
}

}  // namespace kvmesh
