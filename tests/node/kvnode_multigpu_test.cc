// kvnode for a tensor-parallel group on two GPUs (labels gpu, multigpu): rank r's pools on CUDA
// device r, one block manager for the group, the synthetic engine decoding each rank on its own
// device and checking every output. Skips with fewer than two CUDA devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/node/gpu_node_util.h"

namespace kvmesh::node_test {
namespace {

// One kvnode for a tensor-parallel group of two GPUs: rank r's pools on device r; one Admit
// serves both ranks; the synthetic engine decodes each rank on its own device.
TEST(KvnodeMultiGpuTest, TensorParallelRanksLiveOnTheirOwnDevices) {
  SKIP_WITH_FEWER_DEVICES(2);
  ScratchDir dir;
  auto node =
      KvnodeProcess::Start(dir.path(), GpuConfig(dir.path(), "cuda:0", 2, 2048, "2MiB", "64MiB"));
  ASSERT_TRUE(node.ok()) << node.status();
  auto client = (*node)->Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<int> fds;
  auto response = (*client)->Attach(&fds);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_GE(response->pools_size(), 2);  // a rank pool per rank of each plan pool
  for (const rpc::PoolDescriptor& d : response->pools()) EXPECT_EQ(d.device(), d.rank());
  const nlohmann::json report = RunSynth(dir.path(), "tp2", 16);
  EXPECT_GT(report["checks"].get<std::int64_t>(), 0);
  EXPECT_EQ(report["check_failures"].get<std::int64_t>(), 0) << report.dump();
}

}  // namespace
}  // namespace kvmesh::node_test
