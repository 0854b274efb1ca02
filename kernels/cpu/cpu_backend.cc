// The CPU backend: every kernel's CPU twin, run on the backend's ThreadPool. Calls return when
// their output is written, so Synchronize() has nothing to wait for.
#include <memory>

#include "kernels/backend.h"

namespace kvmesh {
namespace {

class CpuBackend final : public KernelBackend {
 public:
  explicit CpuBackend(ThreadPool* executor) : executor_(executor) {}

  [[nodiscard]] BackendKind kind() const override { return BackendKind::kCpu; }

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
