// Multi-threaded stress of the BlockManager (run under ThreadSanitizer by the tsan pass).
//
// Worker threads play engines: they admit prompts with shared prefixes (salts, retention, partial
// reuse by copy and by claim with real pool memory, a full and a sliding-window pool), write
// their fresh blocks, store, append, pin for "transfers" and remove. Every block a worker wrote
// must still hold its pattern when the worker later reads it back (no block is ever handed to two
// owners or rewritten under a pin). A tier thread follows the events and pins stored blocks by
// content id; an observer thread checks the manager's invariants and statistics meanwhile.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "block_manager_test_util.h"
#include "common/thread_pool.h"
#include "pool/block_manager.h"
#include "pool/pool_storage.h"

namespace kvmesh {
namespace {

constexpr std::int32_t kT = 4;

class Stress {
 public:
  Stress() {
    KvPoolGeometry g;
    g.num_layers = 1;
    g.num_kv_heads = 1;
    g.tokens_per_block = kT;
    g.head_dim = 8;
    layout_ = *MakeKvPoolLayout(g);
    std::vector<PoolMemorySpec> specs{{layout_, 96, 1.0f}, {layout_, 64, 1.0f}};
    storage_ = std::move(PoolStorage::Allocate(specs)).value();
    BlockManagerConfig c;
    c.tokens_per_block = kT;
    c.pools = {{"full", 96, 0}, {"sliding", 64, 8}};
    c.event_capacity = 256;  // small: the tier thread sees overflows
    BlockManagerEnv env;
    env.pool_memory = storage_.views();
    env.copy_executor = &copy_pool_;
    manager_ = testing::MakeManager(c, env);
    std::mt19937 rng(3);
    for (auto& b : bases_) {
      b.resize(40);
      for (Token& t : b) t = Token(rng() % 4);
    }
  }

  void Worker(int thread, int iterations) {
    std::mt19937 rng(100 + thread);
    for (int i = 0; i < iterations; ++i) {
      const std::uint64_t id = static_cast<std::uint64_t>(thread) * 1'000'000 + i;
      OneRequest(RequestId{id}, rng);
      if (::testing::Test::HasFailure()) return;
    }
  }

  void Tier(const std::atomic<bool>& stop) {
    std::uint64_t next = 1;
    while (!stop.load()) {
      KvEventBatch b = manager_->PollEvents(next, 64);
      next = b.next_seq;
      if (b.lost) ++overflows_;
      for (const KvEvent& e : b.events) {
        if (e.type != KvEventType::kStored) continue;
        auto pin = manager_->PinByContentId(e.content_id);  // may be gone already
        if (pin.ok()) {
          for (const PinnedBlockRef& r : pin->blocks()) Read(r.pool.value, r.block.value);
          manager_->ReportTierChange(e.pool, e.content_id, KvTier::kPrimary, KvTier::kHost);
        }
      }
      std::this_thread::yield();
    }
  }

  void Observer(const std::atomic<bool>& stop) {
    while (!stop.load()) {
      const Status s = manager_->CheckInvariants();
      ASSERT_TRUE(s.ok()) << s;
      const BlockManagerStats st = manager_->GetStats();
      for (const PoolStats& p : st.pools) {
        ASSERT_LE(p.pinned_blocks + p.free_blocks, p.num_blocks);
        ASSERT_GE(p.free_blocks, 0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  BlockManager& manager() { return *manager_; }
  int overflows() const { return overflows_; }

 private:
  std::uint8_t* Bytes(int pool, std::int32_t block) {
    return storage_.view(pool).BlockBytes(KvComponent::kData, block);
  }
  void Write(int pool, std::int32_t block, std::uint8_t value) {
    std::memset(Bytes(pool, block), value, layout_.data().BytesPerBlock());
  }
  std::uint8_t Read(int pool, std::int32_t block) {
    std::uint8_t sum = 0;
    const std::uint8_t* p = Bytes(pool, block);
    for (std::int64_t k = 0; k < layout_.data().BytesPerBlock(); ++k) sum ^= p[k];
    return sum;
  }
  bool Holds(int pool, std::int32_t block, std::uint8_t value) {
    const std::uint8_t* p = Bytes(pool, block);
    for (std::int64_t k = 0; k < layout_.data().BytesPerBlock(); ++k) {
      if (p[k] != value) return false;
    }
    return true;
  }

  void OneRequest(RequestId id, std::mt19937& rng) {
    const auto& base = bases_[rng() % bases_.size()];
    std::vector<Token> prompt(base.begin(), base.begin() + 1 + rng() % base.size());
    for (int k = static_cast<int>(rng() % 6); k > 0; --k) prompt.push_back(Token(rng() % 4));
    SequenceOptions o;
    if (rng() % 4 == 0) o.domain.salt = "tenant";
    o.reuse_last_token = rng() % 4 == 0;
    if (rng() % 3 == 0) o.retention = {{0, 8, static_cast<int>(rng() % 101), {}}};
    auto added = manager_->AddSequence(id, prompt, o);
    if (!added.ok()) {
      ASSERT_TRUE(added.status().IsResourceExhausted()) << added.status();
      return;
    }
    const std::uint8_t mark = static_cast<std::uint8_t>(1 + id.value % 251);
    // "Prefill": write the blocks this request computes (from the first fresh position on).
    std::vector<std::pair<int, std::int32_t>> mine;
    const std::int64_t first_fresh = added->reused_blocks;
    for (int p = 0; p < 2; ++p) {
      const auto& ids = added->tables[p].block_ids;
      for (std::size_t pos = 0; pos < ids.size(); ++pos) {
        if (ids[pos] < 0) continue;
        if (static_cast<std::int64_t>(pos) >= first_fresh) {
          Write(p, ids[pos], mark);
          mine.push_back({p, ids[pos]});
        } else {
          Read(p, ids[pos]);  // reused: read only
        }
      }
    }
    ASSERT_TRUE(manager_->StoreFullBlocks(id).ok());
    if (rng() % 2 == 0) {
      std::vector<Token> more(1 + rng() % 9, Token(rng() % 4));
      auto app = manager_->AppendTokens(id, more);
      if (app.ok()) {
        for (int p = 0; p < 2; ++p) {
          for (std::int32_t b : app->new_blocks[p]) {
            Write(p, b, mark);
            mine.push_back({p, b});
          }
        }
        ASSERT_TRUE(manager_->StoreFullBlocks(id).ok());
      } else {
        ASSERT_TRUE(app.status().IsResourceExhausted()) << app.status();
      }
    }
    // Blocks still in this request's tables must still hold what it wrote.
    auto tables = manager_->GetBlockTables(id);
    ASSERT_TRUE(tables.ok());
    for (const auto& [p, b] : mine) {
      const auto& held = (*tables)[p].block_ids;
      if (std::find(held.begin(), held.end(), b) == held.end()) continue;  // window-released
      ASSERT_TRUE(Holds(p, b, mark)) << "pool " << p << " block " << b << " was rewritten";
    }
    PinnedBlocks transfer;
    if (rng() % 4 == 0) transfer = std::move(manager_->PinSequenceBlocks(id)).value();
    ASSERT_TRUE(manager_->RemoveSequence(id).ok());
    for (const PinnedBlockRef& r : transfer.blocks()) Read(r.pool.value, r.block.value);
    transfer.Release();
  }

  ThreadPool copy_pool_{2};
  KvPoolLayout layout_;
  PoolStorage storage_;
  std::unique_ptr<BlockManager> manager_;
  std::vector<std::vector<Token>> bases_ = std::vector<std::vector<Token>>(4);
  int overflows_ = 0;
};

TEST(BlockManagerStressTest, ConcurrentSequencesKeepTheLedgerConsistent) {
  Stress stress;
  constexpr int kWorkers = 4;
  constexpr int kIterations = 600;
  std::atomic<bool> stop{false};
  std::thread tier([&] { stress.Tier(stop); });
  std::thread observer([&] { stress.Observer(stop); });
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&stress, t] { stress.Worker(t, kIterations); });
  }
  for (auto& w : workers) w.join();
  stop.store(true);
  tier.join();
  observer.join();
  BlockManager& m = stress.manager();
  EXPECT_CONSISTENT(m);
  EXPECT_EQ(m.num_sequences(), 0);
  const BlockManagerStats s = m.GetStats();
  EXPECT_EQ(s.pools[0].pinned_blocks, 0);
  EXPECT_EQ(s.pools[1].pinned_blocks, 0);
  // The run exercised reuse, partial reuse and eviction.
  EXPECT_GT(s.pools[0].reused_blocks, 0u);
  EXPECT_GT(s.pools[0].partial_reused_blocks, 0u);
  EXPECT_GT(s.pools[0].evicted_blocks, 0u);
  EXPECT_GT(s.counters.sequences_added, static_cast<std::uint64_t>(kWorkers * kIterations / 2));
}

}  // namespace
}  // namespace kvmesh
