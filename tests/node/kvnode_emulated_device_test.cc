// kvnode on `device: emulated` (store/emulated_device.h): the pools live in memory the node's own
// code cannot read (PROT_NONE), so everything the node does with device pools — offload, spill and
// onboard through staging, copy-on-partial-reuse on the "device", the shutdown flush, kvctl inspect
// — runs here exactly as on a GPU, and a host access to a pool would kill the node (SIGSEGV). The
// synthetic engine maps the pools as host memory and checks every decode output. The same checks
// as kvnode_gpu_test.cc, on any machine; the peer data path with device pools is in
// peer_fetch_test.cc and handoff_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/node/gpu_node_util.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

TEST(KvnodeEmulatedDeviceTest, SyntheticEngineChecksPassAndBlocksGoThroughTheTiersAndBack) {
  ScratchDir dir;
  // A pool of 2,048 tokens: the workload does not fit, so blocks are evicted through staging into
  // the host tier (spilling on to RocksDB) and restored through staging. The disk tier holds every
  // spill with room to spare: at 64 MiB its files reached capacity before compaction reclaimed the
  // evicted bundles in 1 run of 2 to 4, and the shutdown flush (checked below) then wrote nothing.
  const std::string config = GpuConfig(dir.path(), "emulated", 1, 2048, "2MiB", "256MiB");
  {
    auto node = KvnodeProcess::Start(dir.path(), config);
    ASSERT_TRUE(node.ok()) << node.status();
    EXPECT_THAT((*node)->process().Stdout(), HasSubstr("device     emulated (a test device)"));
    const nlohmann::json first = RunSynth(dir.path(), "first", 24);
    EXPECT_GT(first["checks"].get<std::int64_t>(), 0);
    EXPECT_EQ(first["check_failures"].get<std::int64_t>(), 0) << first.dump();
    EXPECT_EQ(first["failed_requests"].get<std::int64_t>(), 0) << first.dump();
    EXPECT_GT(first["hits"]["host"].get<std::int64_t>() + first["hits"]["disk"].get<std::int64_t>(),
              0)
        << "no block came back from a tier: " << first.dump();
    auto client = (*node)->Connect();
    ASSERT_TRUE(client.ok()) << client.status();
    auto status = (*client)->GetStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->device(), "emulated");
    client->reset();
    auto st = (*node)->Terminate();
    ASSERT_TRUE(st.has_value());
    EXPECT_TRUE(st->exited) << "killed by signal " << st->signal;  // a host access: SIGSEGV
    EXPECT_EQ(st->code, 0);
    EXPECT_THAT((*node)->process().Stdout(),
                ::testing::ContainsRegex("flushed [1-9][0-9]* blocks"));
  }
  // Warm restart: the first run's blocks (flushed through staging) come back from disk.
  auto node = KvnodeProcess::Start(dir.path(), config);
  ASSERT_TRUE(node.ok()) << node.status();
  const nlohmann::json second = RunSynth(dir.path(), "second", 24);
  EXPECT_GT(second["hits"]["disk"].get<std::int64_t>(), 0) << second.dump();
  EXPECT_EQ(second["check_failures"].get<std::int64_t>(), 0) << second.dump();
}

// kvctl inspect reads the pool block through staging and compares it with the tier copies.
TEST(KvnodeEmulatedDeviceTest, InspectReadsTheBlockThroughStaging) {
  ScratchDir dir;
  auto node =
      KvnodeProcess::Start(dir.path(), GpuConfig(dir.path(), "emulated", 1, 4096, "8MiB", "64MiB"));
  ASSERT_TRUE(node.ok()) << node.status();
  RunSynth(dir.path(), "synth", 4);
  auto client = (*node)->Connect("kvctl", /*tcp=*/true);
  ASSERT_TRUE(client.ok()) << client.status();
  rpc::Request list;
  list.mutable_list_blocks()->set_limit(1);
  auto listed = (*client)->Call(list);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_GT(listed->list_blocks().blocks_size(), 0);
  rpc::Request inspect;
  inspect.mutable_inspect_block()->set_content_id(listed->list_blocks().blocks(0).content_id());
  auto r = (*client)->Call(inspect);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GT(r->inspect_block().pools_size(), 0);
  EXPECT_GT(r->inspect_block().pools(0).components_size(), 0);
  EXPECT_TRUE(r->inspect_block().all_copies_agree());
  EXPECT_TRUE((*node)->process().running());
}

}  // namespace
}  // namespace kvmesh::node_test
