// kvnode with GPU pools (`device: cuda:N`), as an operator and an engine see it: real kvnode and
// kvmesh-synth processes, the pools in device memory exported as CUDA IPC handles and opened by the
// synthetic engine, which writes K/V with the CUDA append kernel and checks every decode output of
// the CUDA decode kernel against the dense reference; evicted blocks go through pinned staging into
// the host tier and RocksDB and come back verified; a warm restart finds them on disk.
//
// Label gpu: every test skips without a CUDA device. The tensor-parallel group on two GPUs is
// kvnode_multigpu_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "node/attached_pools.h"
#include "tests/node/gpu_node_util.h"
#include "tests/node/peer_test_util.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

TEST(KvnodeGpuTest, AttachOpensTheDevicePoolsThroughCudaIpc) {
  SKIP_WITH_FEWER_DEVICES(1);
  ScratchDir dir;
  auto node =
      KvnodeProcess::Start(dir.path(), GpuConfig(dir.path(), "cuda:0", 1, 4096, "8MiB", "64MiB"));
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_THAT((*node)->process().Stdout(), HasSubstr("device     cuda:0: pools in device memory"));
  auto client = (*node)->Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<int> fds;
  auto response = (*client)->Attach(&fds);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_TRUE(fds.empty());  // device pools travel as IPC handles, not descriptors
  // This process is not the node: it opens the handles as an engine does.
  auto attached = AttachedPools::Map(*response, std::move(fds));
  ASSERT_TRUE(attached.ok()) << attached.status();
  const rpc::AttachResponse& a = attached->description();
  ASSERT_GT(a.memory_size(), 0);
  for (const rpc::MemoryObject& m : a.memory()) {
    EXPECT_EQ(m.kind(), rpc::MemoryObject::KIND_CUDA_IPC);
    EXPECT_EQ(m.device(), 0);
    EXPECT_EQ(m.cuda_ipc_handle().size(), 64u);
    EXPECT_EQ(m.device_uuid().size(), 16u);
  }
  for (int p = 0; p < attached->num_pools(); ++p) {
    EXPECT_NE(attached->view(p).base[0], nullptr);
    EXPECT_EQ(a.pools(p).device(), 0);
  }
}

TEST(KvnodeGpuTest, SyntheticEngineChecksPassAndBlocksGoThroughTheTiersAndBack) {
  SKIP_WITH_FEWER_DEVICES(1);
  ScratchDir dir;
  // A pool of 2,048 tokens (128 blocks of 16): the workload does not fit, so blocks are evicted
  // (through pinned staging into the host tier, spilling on to RocksDB) and restored.
  const std::string config = GpuConfig(dir.path(), "cuda:0", 1, 2048, "2MiB", "256MiB");
  {
    auto node = KvnodeProcess::Start(dir.path(), config);
    ASSERT_TRUE(node.ok()) << node.status();
    const nlohmann::json first = RunSynth(dir.path(), "first", 24);
    EXPECT_GT(first["checks"].get<std::int64_t>(), 0);
    EXPECT_EQ(first["check_failures"].get<std::int64_t>(), 0) << first.dump();
    EXPECT_EQ(first["failed_requests"].get<std::int64_t>(), 0) << first.dump();
    EXPECT_GT(first["hits"]["host"].get<std::int64_t>() + first["hits"]["disk"].get<std::int64_t>(),
              0)
        << "no block came back from a tier: " << first.dump();
    auto st = (*node)->Terminate();
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->code, 0);
  }
  // Warm restart on the same device: the first run's blocks are on disk and decode correctly.
  auto node = KvnodeProcess::Start(dir.path(), config);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_THAT((*node)->process().Stdout(),
              ::testing::Not(HasSubstr(", 0 blocks from earlier runs")));
  const nlohmann::json second = RunSynth(dir.path(), "second", 24);
  EXPECT_GT(second["hits"]["disk"].get<std::int64_t>(), 0) << second.dump();
  EXPECT_EQ(second["check_failures"].get<std::int64_t>(), 0) << second.dump();
}

// Two kvnodes with GPU pools on one host (both on cuda:0 here): a prefix prefilled on A is handed
// off to B (HND -> NHD, converted on receipt), staged out of A's device pool and into B's through
// pinned host memory over UCX; B's engine decodes it with every step checked.
TEST(KvnodeGpuTest, HandoffBetweenGpuNodesThroughStaging) {
  SKIP_WITH_FEWER_DEVICES(1);
  ScratchDir dir;
  auto prefill = StartPeerProcess(dir.path() / "p", "prefill-1", "HND", "cuda:0");
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto decode = StartPeerProcess(dir.path() / "d", "decode-1", "NHD", "cuda:0");
  ASSERT_TRUE(decode.ok()) << decode.status();
  const std::vector<std::string> synth = {"--socket",
                                          (*prefill)->unix_socket(),
                                          "--secret",
                                          kTestSecret,
                                          "--decode-socket",
                                          (*decode)->unix_socket(),
                                          "--decode-node-id",
                                          "decode-1",
                                          "--decode-address",
                                          (*decode)->tcp_address(),
                                          "--synthetic",
                                          "--conversations",
                                          "3",
                                          "--turns",
                                          "3",
                                          "--block-tokens",
                                          "16",
                                          "--decode-tokens",
                                          "2",
                                          "--json"};
  RunOutput r = RunToCompletion(SynthPath(), synth, dir.path() / "synth");
  ASSERT_EQ(r.status.code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["handoff"]["failed"], 0);
  EXPECT_GT(j["handoff"]["moved_blocks"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["decode"]["check_failures"], 0) << r.out;
  EXPECT_GT(j["decode"]["checks"].get<std::int64_t>(), 0);
}

}  // namespace
}  // namespace kvmesh::node_test
