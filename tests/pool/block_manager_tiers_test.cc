// BlockManager's API for the tiers: deferred eviction (move-out tickets: the block is neither
// matched nor reused until its ticket completes; other victims are preferred; the manager waits
// when only moving blocks remain; the destructor waits for tickets) and the two-phase restore
// (plan, reserve hidden blocks, publish; duplicates, abandoned reservations, a changed tree,
// capacity, window pools).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "block_manager_test_util.h"
#include "pool/block_manager.h"
#include "pool/pool_storage.h"

namespace kvmesh {
namespace {

using testing::AddStoreRemove;
using testing::Concat;
using testing::MakeManager;
using testing::OnePoolConfig;
using testing::Tokens;

constexpr RequestId R(std::uint64_t v) { return RequestId{v}; }

// Takes the tickets of the first `take` victims (then behaves like a plain listener).
class TicketTaker : public EvictionListener {
 public:
  explicit TicketTaker(int take) : take_(take) {}
  void OnEvict(const EvictedBlock& b) override { plain.push_back(b); }
  void OnEvictDeferrable(const EvictedBlock& b, MoveOutTicket& ticket) override {
    if (static_cast<int>(tickets.size()) >= take_) {
      OnEvict(b);
      return;
    }
    deferred.push_back(b);
    tickets.push_back(std::move(ticket));
  }
  std::vector<EvictedBlock> plain, deferred;
  std::vector<MoveOutTicket> tickets;

 private:
  int take_;
};

// Hands every ticket to a thread that completes it after `delay`.
class SlowMover : public EvictionListener {
 public:
  explicit SlowMover(std::chrono::milliseconds delay) : delay_(delay) {}
  ~SlowMover() override {
    for (auto& t : threads_) t.join();
  }
  void OnEvict(const EvictedBlock&) override {}
  void OnEvictDeferrable(const EvictedBlock& b, MoveOutTicket& ticket) override {
    threads_.emplace_back([this, b, t = std::move(ticket)]() mutable {
      std::this_thread::sleep_for(delay_);
      completed_blocks.fetch_add(1);
      last_completed.store(b.block.value);
      t.Complete();
    });
  }
  std::atomic<int> completed_blocks{0};
  std::atomic<std::int32_t> last_completed{-1};

 private:
  std::chrono::milliseconds delay_;
  std::vector<std::thread> threads_;
};

// Completes the tickets one at a time, in order, `gap` apart, on one thread (a copy worker that
// moves one block at a time).
class SerialMover : public EvictionListener {
 public:
  explicit SerialMover(std::chrono::milliseconds gap) : gap_(gap), worker_([this] { Run(); }) {}
  ~SerialMover() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void OnEvict(const EvictedBlock&) override {}
  void OnEvictDeferrable(const EvictedBlock&, MoveOutTicket& ticket) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(ticket));
    }
    cv_.notify_all();
  }
  std::atomic<int> completed_blocks{0};

 private:
  void Run() {
    for (;;) {
      MoveOutTicket t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, every ticket completed
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_for(gap_);
      completed_blocks.fetch_add(1);
      t.Complete();
    }
  }

  std::chrono::milliseconds gap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MoveOutTicket> queue_;
  bool stop_ = false;
  std::thread worker_;
};

std::int32_t StoreOneBlock(BlockManager& m, std::uint64_t id, Token first) {
  auto r = m.AddSequence(R(id), Tokens(4, first));
  KVMESH_CHECK(r.ok()) << r.status().ToString();
  KVMESH_CHECK(m.StoreFullBlocks(R(id)).ok());
  KVMESH_CHECK(m.RemoveSequence(R(id)).ok());
  return r->tables[0].block_ids[0];
}

TEST(BlockManagerMoveOutTest, MovingBlockIsNeitherMatchedNorReusedUntilItsTicketCompletes) {
  TicketTaker listener(1);
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(4), env);
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(StoreOneBlock(*m, i + 1, 100 * (i + 1)));
  const ContentId first_id =
      m->PlanRestore(Tokens(4, 100), {.reuse_last_token = true})->content_ids[0];
  // One block needed: the oldest victim is deferred (moving out), so the next one is evicted too.
  auto r = m->AddSequence(R(10), Tokens(4, 1000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(listener.deferred.size(), 1u);
  EXPECT_EQ(listener.deferred[0].block.value, ids[0]);
  ASSERT_EQ(listener.plain.size(), 1u);
  EXPECT_EQ(r->tables[0].block_ids[0], ids[1]);
  EXPECT_EQ(m->FindBlock(first_id).status().code(), StatusCode::kNotFound);
  BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].moving_out_blocks, 1);
  EXPECT_EQ(s.pools[0].moved_out_blocks, 1u);
  EXPECT_EQ(s.pools[0].free_blocks, 0);
  EXPECT_EQ(s.pools[0].private_blocks, 1);
  EXPECT_EQ(s.pools[0].evicted_blocks, 2u);
  EXPECT_CONSISTENT(*m);
  // Another block: not the moving one.
  auto r2 = m->AddSequence(R(11), Tokens(4, 2000));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->tables[0].block_ids[0], ids[2]);
  EXPECT_CONSISTENT(*m);
  // Completed: the block is free again and is the next one handed out.
  listener.tickets[0].Complete();
  s = m->GetStats();
  EXPECT_EQ(s.pools[0].moving_out_blocks, 0);
  EXPECT_EQ(s.pools[0].free_blocks, 1);
  auto r3 = m->AddSequence(R(12), Tokens(4, 3000));
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->tables[0].block_ids[0], ids[0]);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerMoveOutTest, AllocationWaitsForTheMoveWhenNoOtherVictimIsAllowed) {
  SlowMover listener(std::chrono::milliseconds(30));
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  BlockManagerConfig c = OnePoolConfig(2);
  c.max_moving_out_blocks = 0;  // wait for each deferred victim
  auto m = MakeManager(c, env);
  const std::int32_t a = StoreOneBlock(*m, 1, 100);
  StoreOneBlock(*m, 2, 200);
  auto r = m->AddSequence(R(3), Tokens(4, 300));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(listener.completed_blocks.load(), 1);  // waited for it
  EXPECT_EQ(r->tables[0].block_ids[0], a);
  EXPECT_EQ(m->GetStats().pools[0].cached_blocks, 1);  // the other victim was not taken
  EXPECT_CONSISTENT(*m);
}

// An admission short of many blocks, each of which must move out first, waits for them in batches
// (the blocks still missing, at most half of those moving out), not once per completed move —
// each wait is followed by planning the whole admission again. 48 blocks, 8 moving out at a time:
// 12 waits (52 victims); waking for each completion took 48 (55 victims).
TEST(BlockManagerMoveOutTest, AnAdmissionShortOfManyBlocksWaitsForThemInBatches) {
  SerialMover listener(std::chrono::milliseconds(2));
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  BlockManagerConfig c = OnePoolConfig(64);
  c.max_moving_out_blocks = 8;
  auto m = MakeManager(c, env);
  for (int i = 0; i < 64; ++i) StoreOneBlock(*m, i + 1, 10 * (i + 1));
  auto r = m->AddSequence(R(100), Tokens(48 * 4, 100000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tables[0].block_ids.size(), 48u);
  const BlockManagerStats s = m->GetStats();
  EXPECT_GE(listener.completed_blocks.load(), 48 - 8);
  EXPECT_GE(s.counters.move_out_waits, 10u);
  EXPECT_LE(s.counters.move_out_waits, 16u);
  // At least 40 moves of 2 ms each, one at a time, nearly all of them waited for: their time is
  // counted (at least 30 of them, for the planning between the waits).
  EXPECT_GE(s.counters.move_out_wait_ns, 30u * 2'000'000u);
  // Victims are evicted ahead while fewer than 8 move (another victim rather than a wait), so
  // up to 8 more than the admission needed.
  EXPECT_LE(s.pools[0].evicted_blocks, 48u + 8u);
  EXPECT_CONSISTENT(*m);
  ASSERT_TRUE(m->RemoveSequence(R(100)).ok());
}

// Queues every ticket and has no worker: a ticket completes only when a waiting manager call
// helps (HelpMoveOut), or when the test completes the rest (Release).
class HelpOnlyMover : public EvictionListener {
 public:
  void OnEvict(const EvictedBlock&) override {}
  void OnEvictDeferrable(const EvictedBlock&, MoveOutTicket& ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(ticket));
  }
  bool HelpMoveOut() override {
    MoveOutTicket t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return false;
      t = std::move(queue_.front());
      queue_.pop_front();
      if (std::this_thread::get_id() != caller) helped_elsewhere = true;
    }
    helped.fetch_add(1);
    t.Complete();
    return true;
  }
  void Release() {
    std::deque<MoveOutTicket> rest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rest.swap(queue_);
    }
  }
  // Destroyed before the manager (declare it after), whose destructor waits for every ticket:
  // completes what is left also when a check returns early.
  struct ReleaseAtEnd {
    HelpOnlyMover& l;
    ~ReleaseAtEnd() { l.Release(); }
  };
  // Whether `call` returned within 10 s; then (without the help it would wait for ever) completes
  // the tickets it waits for until it has returned.
  template <typename T>
  bool ReturnedWithin10s(std::future<T>& call) {
    const bool returned = call.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    while (call.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) Release();
    return returned;
  }
  std::thread::id caller;
  std::atomic<int> helped{0};
  bool helped_elsewhere = false;  // guarded by mu_ (read after the calls returned)

 private:
  std::mutex mu_;
  std::deque<MoveOutTicket> queue_;
};

// A manager call that must wait for moves out first does the listener's queued move-out work
// itself (HelpMoveOut, without the manager's lock), on its own thread: with no worker at all,
// AddSequence and AppendTokens short of many moving blocks still finish. Without the help they
// would wait for ever (here: the test's 10 s bound, then the tickets are completed to end it).
TEST(BlockManagerMoveOutTest, AManagerCallThatMustWaitHelpsTheListenerMoveBlocksOut) {
  HelpOnlyMover listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  BlockManagerConfig c = OnePoolConfig(64);
  c.max_moving_out_blocks = 8;
  auto m = MakeManager(c, env);
  HelpOnlyMover::ReleaseAtEnd release_at_end{listener};
  for (int i = 0; i < 64; ++i) StoreOneBlock(*m, i + 1, 10 * (i + 1));
  auto call = std::async(std::launch::async, [&] {
    listener.caller = std::this_thread::get_id();
    auto r = m->AddSequence(R(100), Tokens(48 * 4, 100000));
    if (!r.ok()) return r.status();
    // 16 more blocks: AppendTokens waits (and helps) too.
    return m->AppendTokens(R(100), Tokens(16 * 4, 200000)).status();
  });
  ASSERT_TRUE(listener.ReturnedWithin10s(call)) << "the waiting calls did not help";
  const Status st = call.get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(listener.helped.load(), 48 + 16 - 8);
  EXPECT_FALSE(listener.helped_elsewhere);
  const BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].allocation_waits, 0u);
  EXPECT_CONSISTENT(*m);
  ASSERT_TRUE(m->RemoveSequence(R(100)).ok());
}

TEST(BlockManagerMoveOutTest, MovingBlocksCountAsAvailableSoAdmissionsDoNotFail) {
  SlowMover listener(std::chrono::milliseconds(10));
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(3), env);
  for (int i = 0; i < 3; ++i) StoreOneBlock(*m, i + 1, 100 * (i + 1));
  // All three victims are deferred; the third allocation must wait for one.
  auto r = m->AddSequence(R(9), Tokens(12, 1000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(listener.completed_blocks.load(), 1);
  EXPECT_CONSISTENT(*m);
  ASSERT_TRUE(m->RemoveSequence(R(9)).ok());
}

TEST(BlockManagerMoveOutTest, DestructorWaitsForOutstandingTickets) {
  SlowMover listener(std::chrono::milliseconds(20));
  {
    BlockManagerEnv env;
    env.eviction_listener = &listener;
    auto m = MakeManager(OnePoolConfig(1), env);
    StoreOneBlock(*m, 1, 100);
    StoreOneBlock(*m, 2, 200);  // evicts the first: deferred, waited for
    StoreOneBlock(*m, 3, 300);
  }
  EXPECT_EQ(listener.completed_blocks.load(), 2);
}

// ---- nothing waits for a copy under the manager's lock (issue 11, finding 7)

// Takes every ticket (evictions and claims) and completes them only when the test opens the gate.
class GatedMover : public EvictionListener {
 public:
  ~GatedMover() override { Open(); }
  void OnEvict(const EvictedBlock& b) override {
    std::lock_guard<std::mutex> lock(mu_);
    plain.push_back(b);
  }
  void OnEvictDeferrable(const EvictedBlock& b, MoveOutTicket& ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    deferred.push_back(b);
    tickets_.push_back(std::move(ticket));
    taken_.fetch_add(1);
  }
  // Completes every ticket taken so far, and every later one at once.
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : tickets_) t.Complete();
    tickets_.clear();
  }
  bool WaitTaken(int n) const {
    for (int i = 0; i < 400 && taken_.load() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return taken_.load() >= n;
  }
  std::vector<EvictedBlock> plain, deferred;  // guarded by mu_ (read after the calls)

 private:
  std::mutex mu_;
  std::vector<MoveOutTicket> tickets_;
  std::atomic<int> taken_{0};
};

// Another thread's manager call, made while a move out is pending: it cannot complete while the
// waiting call holds the manager's lock. Answered() waits up to 2 s for it; the destructor waits
// for it to end (after the test completed the move, so a test of old code fails, not hangs).
class OtherCall {
 public:
  explicit OtherCall(BlockManager& m)
      : call_(std::async(std::launch::async, [&m] { return m.GetStats().pools[0].num_blocks; })) {}
  bool Answered() { return call_.wait_for(std::chrono::seconds(2)) == std::future_status::ready; }

 private:
  std::future<std::int64_t> call_;
};

TEST(BlockManagerMoveOutTest, AdmissionWaitsForAMoveWithoutTheLock) {
  GatedMover listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  BlockManagerConfig c = OnePoolConfig(2);
  c.max_moving_out_blocks = 0;  // wait for each deferred victim
  auto m = MakeManager(c, env);
  const std::int32_t a = StoreOneBlock(*m, 1, 100);
  StoreOneBlock(*m, 2, 200);
  auto admit = std::async(std::launch::async, [&] { return m->AddSequence(R(3), Tokens(4, 300)); });
  ASSERT_TRUE(listener.WaitTaken(1));
  OtherCall other(*m);
  const bool answered = other.Answered();
  EXPECT_EQ(admit.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "admitted before the move completed";
  listener.Open();
  auto r = admit.get();
  EXPECT_TRUE(answered) << "the manager's lock was held while waiting for the move";
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tables[0].block_ids[0], a);
  EXPECT_EQ(m->GetStats().pools[0].allocation_waits, 0u);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerMoveOutTest, AppendAndRestoreWaitForAMoveWithoutTheLock) {
  GatedMover listener;
  BlockManagerEnv env;
  env.eviction_listener = &listener;
  BlockManagerConfig c = OnePoolConfig(3);
  c.max_moving_out_blocks = 0;
  auto m = MakeManager(c, env);
  StoreOneBlock(*m, 1, 100);
  StoreOneBlock(*m, 2, 200);
  ASSERT_TRUE(m->AddSequence(R(3), Tokens(4, 300)).ok());  // the free block
  auto append = std::async(std::launch::async, [&] { return m->AppendTokens(R(3), Tokens(1, 9)); });
  ASSERT_TRUE(listener.WaitTaken(1));
  OtherCall during_append(*m);
  EXPECT_TRUE(during_append.Answered()) << "append held the lock while waiting";
  listener.Open();
  ASSERT_TRUE(append.get().ok());
  const auto prompt = Tokens(4, 500);
  auto plan = m->PlanRestore(prompt, {.reuse_last_token = true});
  ASSERT_TRUE(plan.ok());
  auto reserve = std::async(std::launch::async, [&] {
    return m->ReserveRestore(prompt, {.reuse_last_token = true}, *plan, 1);
  });
  ASSERT_TRUE(listener.WaitTaken(2));
  OtherCall during_restore(*m);
  EXPECT_TRUE(during_restore.Answered()) << "restore held the lock while waiting";
  listener.Open();
  auto res = reserve.get();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->count(), 1);
  EXPECT_EQ(m->GetStats().pools[0].allocation_waits, 0u);
}

// Pool memory for the claim tests (copy-free partial reuse needs pool memory): 8 blocks of 4
// tokens.
PoolStorage EightBlockPoolMemory() {
  KvPoolGeometry g;
  g.num_layers = 1;
  g.num_kv_heads = 1;
  g.tokens_per_block = 4;
  g.head_dim = 8;
  std::vector<PoolMemorySpec> specs{{*MakeKvPoolLayout(g), 8, 1.0f}};
  return std::move(PoolStorage::Allocate(specs)).value();
}

// A claimed leaf (copy-free partial reuse) is offered to the listener with a ticket like any
// victim; the sequence gets it once the copy out completed, and the lock is not held meanwhile.
TEST(BlockManagerMoveOutTest, ClaimedBlockIsCopiedOutOnTheDeferredPath) {
  PoolStorage storage = EightBlockPoolMemory();
  GatedMover listener;
  BlockManagerEnv env;
  env.pool_memory = storage.views();
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(8), env);
  auto r1 = m->AddSequence(R(1), Tokens(8));
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(m->StoreFullBlocks(R(1)).ok());
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  auto admit = std::async(std::launch::async, [&] {
    return m->AddSequence(R(2), Concat(Tokens(6), {999, 998}));
  });
  ASSERT_TRUE(listener.WaitTaken(1)) << "the claim was not offered on the deferred path";
  OtherCall other(*m);
  const bool answered = other.Answered();
  EXPECT_EQ(admit.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "the claimed block went to its sequence before its copy out completed";
  listener.Open();
  auto r2 = admit.get();
  EXPECT_TRUE(answered) << "the manager's lock was held during the claimed block's copy out";
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->partial, PartialReuse::kClaimed);
  EXPECT_EQ(r2->tables[0].block_ids[1], r1->tables[0].block_ids[1]);
  ASSERT_EQ(listener.deferred.size(), 1u);
  EXPECT_EQ(listener.deferred[0].reason, EvictionReason::kClaimed);
  EXPECT_TRUE(listener.plain.empty());
  EXPECT_EQ(m->GetStats().pools[0].claimed_blocks, 1u);
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());
  EXPECT_CONSISTENT(*m);
}

// The claim's wait helps too: with no worker, the claimed block's copy out is done by the
// admission that claimed it.
TEST(BlockManagerMoveOutTest, AClaimingAdmissionHelpsCopyTheClaimedBlockOut) {
  PoolStorage storage = EightBlockPoolMemory();
  HelpOnlyMover listener;
  BlockManagerEnv env;
  env.pool_memory = storage.views();
  env.eviction_listener = &listener;
  auto m = MakeManager(OnePoolConfig(8), env);
  HelpOnlyMover::ReleaseAtEnd release_at_end{listener};
  auto r1 = m->AddSequence(R(1), Tokens(8));
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(m->StoreFullBlocks(R(1)).ok());
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  auto admit = std::async(std::launch::async, [&] {
    listener.caller = std::this_thread::get_id();
    return m->AddSequence(R(2), Concat(Tokens(6), {999, 998}));
  });
  ASSERT_TRUE(listener.ReturnedWithin10s(admit)) << "the claiming admission did not help";
  auto r2 = admit.get();
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->partial, PartialReuse::kClaimed);
  EXPECT_EQ(listener.helped.load(), 1);
  EXPECT_FALSE(listener.helped_elsewhere);
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());
  EXPECT_CONSISTENT(*m);
}

// ---- restore

SequenceOptions Whole() {
  SequenceOptions o;
  o.reuse_last_token = true;
  return o;
}

TEST(BlockManagerRestoreTest, PlanGivesTheIdsTheManagerStoresUnder) {
  auto m = MakeManager(OnePoolConfig(8));
  const auto prompt = Tokens(13);
  auto plan = m->PlanRestore(prompt);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->pool_blocks, 0);
  ASSERT_EQ(plan->content_ids.size(), 3u);  // 12 of 13 tokens reusable
  AddStoreRemove(*m, 1, prompt);
  const KvEventBatch events = m->PollEvents(1);
  ASSERT_EQ(events.events.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(events.events[i].content_id, plan->content_ids[i]);
  auto again = m->PlanRestore(prompt);
  EXPECT_EQ(again->pool_blocks, 3);
  EXPECT_EQ(again->content_ids, plan->content_ids);
  EXPECT_EQ(m->PlanRestore(Tokens(12), Whole())->content_ids.size(), 3u);
  EXPECT_EQ(m->PlanRestore(Tokens(12))->content_ids.size(), 2u);
  // Another domain: other ids.
  SequenceOptions salted;
  salted.domain.salt = "tenant";
  EXPECT_NE(m->PlanRestore(prompt, salted)->content_ids[0], plan->content_ids[0]);
}

TEST(BlockManagerRestoreTest, ReservedBlocksAreHiddenUntilPublishedThenReused) {
  auto m = MakeManager(OnePoolConfig(4));
  const auto prompt = Tokens(13);
  auto plan = m->PlanRestore(prompt);
  auto res = m->ReserveRestore(prompt, {}, *plan, 3);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  ASSERT_EQ(res->count(), 3);
  EXPECT_EQ(res->first_block(), 0);
  EXPECT_EQ(res->content_id(2), plan->content_ids[2]);
  EXPECT_EQ(m->LookupPrefix(prompt)->cached_blocks, 0);  // hidden
  EXPECT_EQ(m->FindBlock(plan->content_ids[0]).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m->GetStats().pools[0].pinned_blocks, 3);
  EXPECT_CONSISTENT(*m);
  auto pub = m->PublishRestore(std::move(*res), 2, /*keep_pinned=*/true);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ(pub->published, 2);
  EXPECT_EQ(pub->discarded, 1);
  EXPECT_EQ(pub->pins.size(), 2u);
  BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].restored_blocks, 2u);
  EXPECT_EQ(s.pools[0].cached_blocks, 2);
  EXPECT_EQ(s.pools[0].free_blocks, 2);
  EXPECT_EQ(m->FindBlock(plan->content_ids[1])->pins[0], 1u);
  EXPECT_CONSISTENT(*m);
  auto added = m->AddSequence(R(1), prompt);
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->reused_tokens, 8);
  EXPECT_EQ(added->reused_blocks, 2);
  pub->pins.Release();
  EXPECT_CONSISTENT(*m);
  ASSERT_TRUE(m->RemoveSequence(R(1)).ok());
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerRestoreTest, RestoreHangsFromThePooledPrefixAndKeepsItPinned) {
  auto m = MakeManager(OnePoolConfig(4));
  const auto prompt = Tokens(13);
  AddStoreRemove(*m, 1, Tokens(5));  // block 0 of the prompt is cached
  auto plan = m->PlanRestore(prompt);
  ASSERT_EQ(plan->pool_blocks, 1);
  ASSERT_EQ(plan->num_candidates(), 2);
  auto res = m->ReserveRestore(prompt, {}, *plan, 2);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->first_block(), 1);
  EXPECT_EQ(m->FindBlock(plan->content_ids[0])->pins[0], 1u);  // the parent is pinned
  // Fill the rest of the pool: the parent must survive.
  auto other = m->AddSequence(R(2), Tokens(4, 500));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(m->AddSequence(R(3), Tokens(4, 600)).status().code(), StatusCode::kResourceExhausted);
  auto pub = m->PublishRestore(std::move(*res), 2, /*keep_pinned=*/false);
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->published, 2);
  EXPECT_TRUE(pub->pins.empty());
  EXPECT_EQ(m->FindBlock(plan->content_ids[0])->pins[0], 0u);
  EXPECT_EQ(m->LookupPrefix(prompt)->cached_blocks, 3);
  EXPECT_CONSISTENT(*m);
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());
}

TEST(BlockManagerRestoreTest, KeyStoredMeanwhileWinsAndTheRestoredBlockIsFreed) {
  auto m = MakeManager(OnePoolConfig(8));
  const auto prompt = Tokens(9);
  auto plan = m->PlanRestore(prompt);
  auto res = m->ReserveRestore(prompt, {}, *plan, 2);
  ASSERT_TRUE(res.ok());
  AddStoreRemove(*m, 1, Tokens(5));  // stores block 0 of the prompt
  auto pub = m->PublishRestore(std::move(*res), 2, /*keep_pinned=*/true);
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->duplicates, 1);
  EXPECT_EQ(pub->published, 1);
  EXPECT_EQ(pub->pins.size(), 2u);  // the chain, whoever stored it
  EXPECT_EQ(m->GetStats().pools[0].cached_blocks, 2);
  EXPECT_EQ(m->GetStats().pools[0].restored_blocks, 1u);
  EXPECT_CONSISTENT(*m);
}

// A plan made before its first missing block was stored (or restored by a prefetch) is refused:
// reserving for it would restore that block a second time.
TEST(BlockManagerRestoreTest, APlanThatMissesABlockStoredSinceIsRefused) {
  auto m = MakeManager(OnePoolConfig(8));
  const auto prompt = Tokens(9);
  auto plan = m->PlanRestore(prompt);
  ASSERT_EQ(plan->pool_blocks, 0);
  AddStoreRemove(*m, 1, Tokens(5));  // stores block 0 of the prompt
  const Result<RestoreReservation> stale = m->ReserveRestore(prompt, {}, *plan, 2);
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->GetStats().pools[0].pinned_blocks, 0);
  auto fresh = m->PlanRestore(prompt);
  ASSERT_EQ(fresh->pool_blocks, 1);
  auto res = m->ReserveRestore(prompt, {}, *fresh, 1);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->first_block(), 1);
  auto pub = m->PublishRestore(std::move(*res), 1, /*keep_pinned=*/false);
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->duplicates, 0);
  EXPECT_EQ(m->LookupPrefix(prompt)->cached_blocks, 2);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerRestoreTest, AbandonedReservationLeavesNothingBehind) {
  auto m = MakeManager(OnePoolConfig(4));
  AddStoreRemove(*m, 1, Tokens(5));
  const auto prompt = Tokens(13);
  auto plan = m->PlanRestore(prompt);
  {
    auto res = m->ReserveRestore(prompt, {}, *plan, 2);
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(m->GetStats().pools[0].pinned_blocks, 3);
  }
  const BlockManagerStats s = m->GetStats();
  EXPECT_EQ(s.pools[0].pinned_blocks, 0);
  EXPECT_EQ(s.pools[0].free_blocks, 3);
  EXPECT_EQ(s.pools[0].cached_blocks, 1);
  EXPECT_CONSISTENT(*m);
  // Published with nothing ready: the same.
  auto res = m->ReserveRestore(prompt, {}, *m->PlanRestore(prompt), 2);
  auto pub = m->PublishRestore(std::move(*res), 0, true);
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->discarded, 2);
  EXPECT_EQ(m->GetStats().pools[0].free_blocks, 3);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerRestoreTest, ChangedTreeCapacityAndBadArguments) {
  auto m = MakeManager(OnePoolConfig(4));
  AddStoreRemove(*m, 1, Tokens(5));
  const auto prompt = Tokens(13);
  auto plan = m->PlanRestore(prompt);
  ASSERT_EQ(plan->pool_blocks, 1);
  EXPECT_EQ(m->ReserveRestore(prompt, {}, *plan, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m->ReserveRestore(Tokens(9), {}, *plan, 1).status().code(),
            StatusCode::kInvalidArgument);
  // Capacity: 3 of 4 blocks held by a running sequence (evicting the cached one).
  ASSERT_TRUE(m->AddSequence(R(2), Tokens(16, 900)).ok());
  EXPECT_EQ(m->ReserveRestore(prompt, {}, *plan, 2).status().code(),
            StatusCode::kFailedPrecondition);  // block 0 was evicted
  ASSERT_TRUE(m->RemoveSequence(R(2)).ok());
  ASSERT_TRUE(m->AddSequence(R(3), Tokens(12, 900)).ok());  // 3 blocks pinned
  auto fresh = m->PlanRestore(prompt);
  auto res = m->ReserveRestore(prompt, {}, *fresh, 3);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->count(), 1);
  EXPECT_EQ(m->PublishRestore(std::move(*res), 2, false).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(m->PublishRestore(RestoreReservation(), 0, false).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_CONSISTENT(*m);
}

TEST(BlockManagerRestoreTest, WindowPoolsGetTheirBlocksToo) {
  BlockManagerConfig c;
  c.tokens_per_block = 4;
  c.pools = {{"full", 8, 0}, {"sliding", 8, 8}};
  auto m = MakeManager(c);
  const auto prompt = Tokens(17);
  auto plan = m->PlanRestore(prompt);
  ASSERT_EQ(plan->num_candidates(), 4);
  auto res = m->ReserveRestore(prompt, {}, *plan, 4);
  ASSERT_TRUE(res.ok());
  EXPECT_TRUE(res->block(3, 1).valid());
  auto pub = m->PublishRestore(std::move(*res), 4, true);
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->pins.size(), 8u);
  auto added = m->AddSequence(R(1), prompt);
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->reused_tokens, 16);
  pub->pins.Release();
  EXPECT_CONSISTENT(*m);
}

}  // namespace
}  // namespace kvmesh
