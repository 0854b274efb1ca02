// The engine API of a real kvnode process through its real sockets: reuse across requests and
// engines, salt isolation, attach and shared memory, lookups by tier, events, the synthetic engine
// (every check passes; a corrupted block fails its check), tensor parallelism, and what a crashed
// engine leaves behind; the host tier's eviction order follows kv_cache.eviction_policy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "node/attached_pools.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {
namespace {

using ::testing::HasSubstr;

constexpr std::int32_t kT = 16;  // tokens per block in TestConfig

std::vector<Token> Prompt(std::uint32_t seed, std::size_t n) {
  std::vector<Token> t(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& v : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<Token>(x % 50000);
  }
  return t;
}

// Admits, stores and releases a prompt; returns the reused tokens.
std::int64_t AdmitStoreRelease(NodeClient& c, std::uint64_t id, const std::vector<Token>& p,
                               const SequenceOptions& o = {}) {
  auto a = c.Admit(id, p, o);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return -1;
  EXPECT_TRUE(c.StoreFullBlocks(id).ok());
  EXPECT_TRUE(c.Release(id).ok());
  return a->result.reused_tokens;
}

class KvnodeEngineApiTest : public ::testing::Test {
 protected:
  void StartNode(const std::string& extra = "", const std::string& kv_cache_extra = "") {
    auto n = KvnodeProcess::Start(
        dir_.path(), TestConfig(dir_.path(), 4096, "8MiB", "64MiB", extra, "", kv_cache_extra));
    ASSERT_TRUE(n.ok()) << n.status();
    node_ = std::move(n).value();
  }
  ScratchDir dir_;
  std::unique_ptr<KvnodeProcess> node_;
};

TEST_F(KvnodeEngineApiTest, ReuseAcrossRequestsAndEngines) {
  StartNode();
  auto a = node_->Connect("engine-a");
  auto b = node_->Connect("engine-b");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<Token> p = Prompt(1, 10 * kT + 5);
  EXPECT_EQ(AdmitStoreRelease(**a, 1, p), 0);
  // The same prompt again on the same connection, then on another: 10 full blocks reused.
  EXPECT_EQ(AdmitStoreRelease(**a, 2, p), 10 * kT);
  EXPECT_EQ(AdmitStoreRelease(**b, 1, p), 10 * kT);  // ids are per connection
  // A prompt that shares 4 blocks then differs.
  std::vector<Token> q = p;
  q.resize(4 * kT);
  const std::vector<Token> tail = Prompt(2, 3 * kT);
  q.insert(q.end(), tail.begin(), tail.end());
  EXPECT_EQ(AdmitStoreRelease(**b, 2, q), 4 * kT);
  auto status = (*a)->GetStatus();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->admissions(), 4);
  EXPECT_EQ(status->sequences(), 0);
  EXPECT_EQ(status->pool_hit_blocks(), 24);
}

TEST_F(KvnodeEngineApiTest, SaltsNeverShareBlocks) {
  StartNode();
  auto c = node_->Connect();
  ASSERT_TRUE(c.ok());
  SequenceOptions tenant_a;
  tenant_a.domain.salt = "tenant-a";
  SequenceOptions tenant_b;
  tenant_b.domain.salt = "tenant-b";
  std::int64_t cross = 0;
  std::int64_t same = 0;
  std::int64_t possible = 0;
  for (std::uint32_t i = 0; i < 8; ++i) {
    const std::vector<Token> p = Prompt(100 + i, 6 * kT + 3);
    EXPECT_EQ(AdmitStoreRelease(**c, 3 * i, p, tenant_a), 0);
    cross += AdmitStoreRelease(**c, 3 * i + 1, p, tenant_b);
    same += AdmitStoreRelease(**c, 3 * i + 2, p, tenant_a);
    possible += 6 * kT;
  }
  EXPECT_EQ(cross, 0);        // 0 cross-tenant hits
  EXPECT_EQ(same, possible);  // 100% same-tenant hits on repeated prompts
}

TEST_F(KvnodeEngineApiTest, AttachMapsThePoolsTheNodeWrites) {
  StartNode();
  auto c = node_->Connect();
  ASSERT_TRUE(c.ok());
  std::vector<int> fds;
  auto attach = (*c)->Attach(&fds);
  ASSERT_TRUE(attach.ok()) << attach.status();
  ASSERT_EQ(attach->pools_size(), 1);
  EXPECT_EQ(attach->tokens_per_block(), kT);
  EXPECT_EQ(attach->model_name(), "Qwen/Qwen2.5-0.5B");
  ASSERT_EQ(fds.size(), 1u);
  auto pools = AttachedPools::Map(*attach, std::move(fds));
  ASSERT_TRUE(pools.ok()) << pools.status();
  EXPECT_EQ(pools->view(0).layout.data().num_layers, 24);
  EXPECT_EQ(pools->view(0).layout.BytesPerBlock(), 24 * 2 * 2 * kT * 64 * 2);
  // Over TCP the pools cannot be shared.
  auto tcp = node_->Connect("tcp-engine", /*tcp=*/true);
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  std::vector<int> none;
  EXPECT_EQ((*tcp)->Attach(&none).status().code(), StatusCode::kFailedPrecondition);
  // A description that lies about its memory is refused before it is used as an address.
  rpc::AttachResponse bad = *attach;
  bad.mutable_pools(0)->mutable_components(0)->set_offset(1ull << 40);
  std::vector<int> fds2;
  ASSERT_TRUE((*c)->Attach(&fds2).ok());
  EXPECT_TRUE(AttachedPools::Map(bad, std::move(fds2)).status().IsCorruption());
}

TEST_F(KvnodeEngineApiTest, RequestErrorsAreClearAndChangeNothing) {
  StartNode();
  auto c = node_->Connect();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->StoreFullBlocks(77).status().IsNotFound());
  EXPECT_TRUE((*c)->Release(77).IsNotFound());
  const std::vector<Token> p = Prompt(3, 40);
  ASSERT_TRUE((*c)->Admit(5, p).ok());
  EXPECT_TRUE((*c)->Admit(5, p).status().IsInvalidArgument());  // already running
  SequenceOptions bad;
  bad.retention.push_back(RetentionRange{0, 10, 101, std::nullopt});  // priority out of range
  EXPECT_TRUE((*c)->Admit(6, p, bad).status().IsInvalidArgument());
  EXPECT_TRUE((*c)->Admit(7, {}).status().IsInvalidArgument());
  // A prompt larger than the whole pool.
  auto huge = (*c)->Admit(8, Prompt(4, 5000));
  EXPECT_TRUE(huge.status().IsResourceExhausted()) << huge.status();
  ASSERT_TRUE((*c)->Release(5).ok());
  auto s = (*c)->GetStatus();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->sequences(), 0);
  EXPECT_EQ(s->pools(0).pinned_blocks(), 0);
}

TEST_F(KvnodeEngineApiTest, LookupSaysWhereAPrefixIsAndEventsFollowTheCache) {
  StartNode("", "  eviction_policy: lru\n");  // so that the filler below evicts p's blocks
  auto c = node_->Connect();
  ASSERT_TRUE(c.ok());
  const std::vector<Token> p = Prompt(5, 8 * kT + 1);
  auto before = (*c)->Lookup(p);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->pool_tokens() + before->host_tokens() + before->disk_tokens(), 0);
  AdmitStoreRelease(**c, 1, p);
  auto after = (*c)->Lookup(p);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->prompt_tokens(), 8 * kT + 1);
  EXPECT_EQ(after->pool_tokens(), 8 * kT);
  auto events = (*c)->PollEvents(1);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->events.size(), 8u);  // one stored event per block
  EXPECT_EQ(events->events[0].type, KvEventType::kStored);
  EXPECT_EQ(events->next_seq, 9u);
  // Fill the pool (256 blocks) with other prompts: p's blocks move down to the tiers.
  for (std::uint32_t i = 0; i < 40; ++i) AdmitStoreRelease(**c, 10 + i, Prompt(200 + i, 12 * kT));
  auto moved = (*c)->Lookup(p);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->pool_tokens() + moved->host_tokens() + moved->disk_tokens(), 8 * kT);
  EXPECT_LT(moved->pool_tokens(), 8 * kT);
  // Admit restores them from the tiers, as Lookup said.
  auto again = (*c)->Admit(99, p);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->result.reused_tokens, 8 * kT);
  EXPECT_EQ(again->host_hit_blocks + again->disk_hit_blocks, 8 - moved->pool_tokens() / kT);
}

// kv_cache.eviction_policy orders the host tier's victims too (docs/kvnode-config.md, "Eviction
// policy"). A prompt H of priority 90 goes into the host tier first (kvctl evict moves every pool
// block there), then four times the host tier's capacity of default-priority blocks follows it the
// same way. The policies that honour priorities keep H in the host tier and spill the newer
// priority-35 blocks to the disk tier; lru spills H, the least recently used.
struct HostTierOutcome {
  std::int64_t h_host_tokens = -1;
  std::int64_t h_disk_tokens = -1;
  std::int64_t last_host_tokens = -1;  // the last flood prompt
};

HostTierOutcome FloodTheHostTier(const std::string& policy) {
  HostTierOutcome out;
  ScratchDir dir;
  // 192 KiB blocks (qwen2.5-0.5b, bf16, 16 tokens): a 2 MiB host tier holds 10 of them.
  auto node = KvnodeProcess::Start(dir.path(), TestConfig(dir.path(), 4096, "2MiB", "64MiB", "", "",
                                                          "  eviction_policy: " + policy + "\n"));
  EXPECT_TRUE(node.ok()) << node.status();
  if (!node.ok()) return out;
  auto c = (*node)->Connect();
  EXPECT_TRUE(c.ok());
  if (!c.ok()) return out;
  const auto evict_all = [&] {
    rpc::Request evict;
    evict.mutable_evict()->set_below_priority(101);
    Result<rpc::Response> r = (*c)->Call(std::move(evict));
    EXPECT_TRUE(r.ok()) << r.status();
  };
  const std::vector<Token> h = Prompt(300, 2 * kT + 1);  // 2 reusable blocks
  SequenceOptions high;
  high.retention.push_back(RetentionRange{0, 2 * kT + 1, 90, std::nullopt});
  AdmitStoreRelease(**c, 1, h, high);
  evict_all();
  std::vector<Token> last;
  for (std::uint32_t i = 0; i < 10; ++i) {
    last = Prompt(400 + i, 4 * kT + 1);
    AdmitStoreRelease(**c, 10 + i, last);
    evict_all();
  }
  auto lh = (*c)->Lookup(h);
  auto ll = (*c)->Lookup(last);
  EXPECT_TRUE(lh.ok() && ll.ok());
  if (!lh.ok() || !ll.ok()) return out;
  EXPECT_EQ(lh->pool_tokens() + ll->pool_tokens(), 0);  // everything was evicted from the pool
  out.h_host_tokens = lh->host_tokens();
  out.h_disk_tokens = lh->disk_tokens();
  out.last_host_tokens = ll->host_tokens();
  return out;
}

TEST(KvnodeHostTierPolicyTest, PriorityPoliciesKeepTheHighPriorityPromptInTheHostTier) {
  for (const char* policy : {"priority-lru", "learned"}) {
    SCOPED_TRACE(policy);
    const HostTierOutcome o = FloodTheHostTier(policy);
    EXPECT_EQ(o.h_host_tokens, 2 * kT);
    EXPECT_EQ(o.h_disk_tokens, 0);
    // priority-lru keeps the newest default-priority prompt too; learned orders those by what it
    // has seen of them, not by age alone.
    if (std::string(policy) == "priority-lru") {
      EXPECT_EQ(o.last_host_tokens, 4 * kT);
    }
  }
}

TEST(KvnodeHostTierPolicyTest, LruSpillsTheOldestBlocksWhateverTheirPriority) {
  const HostTierOutcome o = FloodTheHostTier("lru");
  EXPECT_EQ(o.h_host_tokens, 0);
  EXPECT_EQ(o.h_disk_tokens, 2 * kT);  // spilled into RocksDB, not lost
  EXPECT_EQ(o.last_host_tokens, 4 * kT);
}

TEST_F(KvnodeEngineApiTest, SyntheticEngineChecksPassAndCatchACorruptBlock) {
  StartNode();
  const std::vector<std::string> workload = {
      "--socket",    node_->unix_socket(),     "--secret", kTestSecret,
      "--synthetic", "--conversations",        "6",        "--turns",
      "2",           "--block-tokens",         "32",       "--system-prompts",
      "2",           "--system-prompt-blocks", "2",        "--turn-blocks-max",
      "3",           "--concurrency",          "2",        "--decode-tokens",
      "1",           "--check-all-layers"};
  RunOutput ok = RunToCompletion(SynthPath(), workload, dir_.path() / "synth1");
  ASSERT_TRUE(ok.status.exited) << ok.err;
  EXPECT_EQ(ok.status.code, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr(", 0 failed"));
  // Corrupt every cached block's first K values through a second mapping of the pool, as a
  // faulty engine or memory would; the same workload's checks must now fail.
  auto c = node_->Connect();
  ASSERT_TRUE(c.ok());
  std::vector<int> fds;
  auto attach = (*c)->Attach(&fds);
  ASSERT_TRUE(attach.ok());
  auto pools = AttachedPools::Map(*attach, std::move(fds));
  ASSERT_TRUE(pools.ok());
  const KvPoolView& v = pools->view(0);
  for (std::int64_t b = 0; b < v.num_blocks; ++b) {
    auto* bytes = v.BlockBytes(KvComponent::kData, b);
    for (int i = 0; i < 64; ++i) bytes[i] ^= 0x40;
  }
  RunOutput bad = RunToCompletion(SynthPath(), workload, dir_.path() / "synth2");
  EXPECT_EQ(bad.status.code, 1) << bad.out << bad.err;
  EXPECT_THAT(bad.out, HasSubstr("check failed"));
}

// Two connections whose requests each need 151 of the pool's 256 blocks: while one runs, the
// other's Admit is refused for room. kvmesh-synth waits for the running one to finish, as an
// engine's scheduler queues a request, so every request runs (before, every refused one failed);
// with --admit-wait-ms 0 the refused ones fail. A prompt longer than the pool fails at once: no
// running request can make room for it.
TEST_F(KvnodeEngineApiTest, SyntheticEngineWaitsForRoomWhileOtherRequestsRun) {
  StartNode();  // 4096 tokens: 256 blocks of 16
  const auto workload = [&](const std::string& blocks, const std::string& wait_ms) {
    return std::vector<std::string>{
        "--socket",    node_->unix_socket(),     "--secret", kTestSecret,
        "--synthetic", "--conversations",        "6",        "--turns",
        "1",           "--block-tokens",         "16",       "--system-prompts",
        "1",           "--system-prompt-blocks", "1",        "--turn-blocks-min",
        blocks,        "--turn-blocks-max",      blocks,     "--concurrency",
        "2",           "--decode-tokens",        "1",        "--admit-wait-ms",
        wait_ms};
  };
  RunOutput waited = RunToCompletion(SynthPath(), workload("150", "30000"), dir_.path() / "s1");
  ASSERT_TRUE(waited.status.exited) << waited.err;
  EXPECT_EQ(waited.status.code, 0) << waited.out << waited.err;
  EXPECT_THAT(waited.out, HasSubstr("6 requests over 2 connections"));
  EXPECT_THAT(waited.out, HasSubstr(", 0 failed"));
  EXPECT_THAT(waited.out, HasSubstr("waited for room"));
  EXPECT_THAT(waited.out, ::testing::Not(HasSubstr("failures")));

  RunOutput refused = RunToCompletion(SynthPath(), workload("150", "0"), dir_.path() / "s2");
  ASSERT_TRUE(refused.status.exited) << refused.err;
  EXPECT_EQ(refused.status.code, 1) << refused.out << refused.err;
  EXPECT_THAT(refused.out, HasSubstr("resource_exhausted"));

  const auto start = std::chrono::steady_clock::now();
  RunOutput too_long = RunToCompletion(SynthPath(), workload("300", "30000"), dir_.path() / "s3");
  ASSERT_TRUE(too_long.status.exited) << too_long.err;
  EXPECT_EQ(too_long.status.code, 1) << too_long.out << too_long.err;
  EXPECT_THAT(too_long.out, HasSubstr("failures          6 requests"));
  EXPECT_THAT(too_long.out, HasSubstr("resource_exhausted"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25))
      << "a prompt longer than the pool waited for room";

  // A negative wait is refused before anything runs.
  RunOutput bad = RunToCompletion(SynthPath(), workload("150", "-1"), dir_.path() / "s4");
  ASSERT_TRUE(bad.status.exited) << bad.err;
  EXPECT_EQ(bad.status.code, 2);  // a bad command line, as for kvctl: not CLI11's own codes
  EXPECT_THAT(bad.err + bad.out, HasSubstr("--admit-wait-ms"));
  EXPECT_THAT(bad.out, ::testing::Not(HasSubstr("synthetic engine")));
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--bogus"},
                                               {"--synthetic", "--conversations", "abc"},
                                               {"--synthetic", "--stream-layers"}}) {
    RunOutput r = RunToCompletion(SynthPath(), args, dir_.path() / "s5");
    EXPECT_EQ(r.status.code, 2) << args[0] << ": " << r.err;
  }
}

TEST_F(KvnodeEngineApiTest, TensorParallelRanksShareOneHit) {
  StartNode("tensor_parallel_size: 2\n");
  auto c = node_->Connect();
  ASSERT_TRUE(c.ok());
  auto s = (*c)->GetStatus();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->pools_size(), 2);  // one pool per rank, each with 1 of the 2 KV heads
  EXPECT_EQ(s->pools(0).rank(), 0);
  EXPECT_EQ(s->pools(1).rank(), 1);
  const std::vector<Token> p = Prompt(7, 5 * kT + 2);
  AdmitStoreRelease(**c, 1, p);
  auto again = (*c)->Admit(2, p);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->result.reused_tokens, 5 * kT);  // one hit ...
  ASSERT_EQ(again->result.tables.size(), 2u);      // ... serves both ranks' tables
  for (const BlockTable& t : again->result.tables) EXPECT_EQ(t.block_ids.size(), 6u);
  ASSERT_TRUE((*c)->Release(2).ok());
  RunOutput synth = RunToCompletion(
      SynthPath(),
      {"--socket", node_->unix_socket(), "--secret", kTestSecret, "--synthetic", "--conversations",
       "4", "--turns", "2", "--block-tokens", "32", "--decode-tokens", "1", "--check-all-layers"},
      dir_.path() / "synth");
  EXPECT_EQ(synth.status.code, 0) << synth.out << synth.err;
}

TEST_F(KvnodeEngineApiTest, AKilledEngineLeavesNoSequenceOrPinBehind) {
  StartNode();
  auto engine = ChildProcess::Spawn(
      SynthPath(),
      {"--socket", node_->unix_socket(), "--secret", kTestSecret, "--synthetic", "--conversations",
       "2000", "--turns", "4", "--block-tokens", "32", "--concurrency", "2"},
      dir_.path() / "engine");
  ASSERT_TRUE(engine.ok());
  auto c = node_->Connect("observer");
  ASSERT_TRUE(c.ok());
  bool busy = false;
  for (int i = 0; i < 400 && !busy; ++i) {
    auto s = (*c)->GetStatus();
    ASSERT_TRUE(s.ok());
    busy = s->sequences() > 0;
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(busy) << "the engine never had a sequence running";
  (*engine)->Signal(SIGKILL);
  ASSERT_TRUE((*engine)->Wait(std::chrono::seconds(10)).has_value());
  bool clean = false;
  for (int i = 0; i < 200 && !clean; ++i) {
    auto s = (*c)->GetStatus();
    ASSERT_TRUE(s.ok());
    clean = s->sequences() == 0 && s->pools(0).pinned_blocks() == 0 &&
            s->pools(0).private_blocks() == 0 && s->connections() == 1;
    if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(clean) << "sequences, pins or connections left after the engine died";
}

}  // namespace
}  // namespace kvmesh::node_test
