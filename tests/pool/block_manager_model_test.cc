// Randomised comparison of the BlockManager with a small, obviously-correct model.
//
// The model keeps every cached block as the full token prefix it ends (salt tag + all tokens up
// to the block's end) with its priority, expiry, last-use stamp and pin count, and evicts by a
// linear scan over the unpinned blocks that no cached block extends. Thousands of random
// operations (add, store, append, remove, clock advances, lookups) must give the same reuse
// counts, the same successes and failures, and the same victims in the same order.
//
// The learned policy's order depends on what it learned, which the model does not predict: there
// the model takes each victim from the manager and checks that it was allowed — an unpinned leaf
// of the lowest priority among unpinned leaves — then goes on from the same state.
//
// One full-attention pool, metadata-only (no partial reuse), every policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "block_manager_test_util.h"
#include "common/strings.h"
#include "pool/block_manager.h"

namespace kvmesh {
namespace {

constexpr std::int32_t kT = 4;
constexpr std::int64_t kNoExpiryRef = std::numeric_limits<std::int64_t>::max();

using Key = std::vector<Token>;  // salt tag, then every token through the block's end

class ReferenceModel {
 public:
  // `ns` as the manager completes it (tokens_per_block filled in).
  ReferenceModel(std::int64_t capacity, EvictionPolicyKind policy, KeyNamespace ns)
      : free_(capacity), policy_(policy) {
    ns.tokens_per_block = kT;
    ns_digest_ = NamespaceDigest(ns);
  }

  struct Entry {
    int priority = kDefaultPriority;
    std::int64_t expiry = kNoExpiryRef;
    std::uint64_t last_use = 0;
    int pins = 0;
    std::uint64_t uid = 0;
    ContentId id;
  };
  struct Seq {
    std::string salt;
    Key tokens;  // without the tag
    std::int64_t prompt_positions = 0;
    std::vector<RetentionRange> retention;
    int decode_priority = kDefaultPriority;
    std::optional<Nanos> decode_duration;
    std::vector<bool> cached_ref;     // [position]: this position's block is the cached entry
    std::vector<std::uint64_t> uids;  // [position < stored]: the entry with this key
    std::int64_t stored = 0;
    bool broken = false;
  };

  // Returns reused tokens, or nullopt when the pool cannot supply the blocks.
  std::optional<std::int64_t> Add(std::uint64_t id, const Key& tokens, const SequenceOptions& o,
                                  std::int64_t now) {
    Expire(now);
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t k = Match(o.domain.salt, tokens, o.reuse_last_token);
    const std::int64_t positions = (n + kT - 1) / kT;
    std::int64_t unavailable = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      unavailable += Removable(KeyOf(o.domain.salt, tokens, j)) ? 1 : 0;
    }
    if (positions - k > free_ + CountRemovable() - unavailable) return std::nullopt;
    Seq s;
    s.salt = o.domain.salt;
    s.tokens = tokens;
    s.prompt_positions = positions;
    s.retention = o.retention;
    s.decode_priority = o.decode_priority;
    s.decode_duration = o.decode_duration;
    for (std::int64_t j = 0; j < k; ++j) {
      Entry& e = entries_.at(KeyOf(s.salt, tokens, j));
      ++e.pins;
      s.cached_ref.push_back(true);
      s.uids.push_back(e.uid);
      if (auto r = Retention(o.retention, j)) {
        e.priority = r->priority;
        e.expiry = r->duration ? now + r->duration->count() : kNoExpiryRef;
      }
    }
    s.stored = k;
    for (std::int64_t j = k; j < positions; ++j) {
      TakeBlock();
      s.cached_ref.push_back(false);
    }
    seqs_[id] = std::move(s);
    return k * kT;
  }

  void Store(std::uint64_t id, std::int64_t computed, std::int64_t now) {
    Expire(now);
    Seq& s = seqs_.at(id);
    for (std::int64_t i = s.stored; !s.broken && (i + 1) * kT <= computed; ++i) {
      if (i > 0 && !LiveUid(KeyOf(s.salt, s.tokens, i - 1), s.uids[i - 1])) {
        s.broken = true;
        break;
      }
      const Key key = KeyOf(s.salt, s.tokens, i);
      auto it = entries_.find(key);
      if (it == entries_.end()) {
        Entry e;
        RetentionRange r{0, 0, kDefaultPriority, std::nullopt};
        if (i < s.prompt_positions) {
          if (auto c = Retention(s.retention, i)) r = *c;
        } else {
          r.priority = s.decode_priority;
          r.duration = s.decode_duration;
        }
        e.priority = r.priority;
        e.expiry = r.duration ? now + r.duration->count() : kNoExpiryRef;
        e.pins = 1;
        e.uid = ++uid_;
        const ContentId parent =
            i == 0 ? DomainId(s.salt) : entries_.at(KeyOf(s.salt, s.tokens, i - 1)).id;
        e.id = BlockContentId(parent, DomainId(s.salt),
                              std::span<const Token>(s.tokens).subspan(i * kT, kT), {});
        s.cached_ref[i] = true;
        s.uids.push_back(e.uid);
        entries_.emplace(key, e);
      } else {
        s.uids.push_back(it->second.uid);
      }
      s.stored = i + 1;
    }
  }

  bool Append(std::uint64_t id, const Key& tokens, std::int64_t now) {
    Expire(now);
    Seq& s = seqs_.at(id);
    const std::int64_t len = static_cast<std::int64_t>(s.tokens.size() + tokens.size());
    const std::int64_t add = std::max<std::int64_t>(
        0, (len + kT - 1) / kT - static_cast<std::int64_t>(s.cached_ref.size()));
    if (add > free_ + CountRemovable()) return false;
    for (std::int64_t j = 0; j < add; ++j) {
      TakeBlock();
      s.cached_ref.push_back(false);
    }
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    return true;
  }

  void Remove(std::uint64_t id, std::int64_t now) {
    Expire(now);
    Seq& s = seqs_.at(id);
    for (std::size_t i = 0; i < s.cached_ref.size(); ++i) {
      if (!s.cached_ref[i]) {
        ++free_;
        continue;
      }
      Entry& e = entries_.at(KeyOf(s.salt, s.tokens, static_cast<std::int64_t>(i)));
      if (--e.pins == 0) e.last_use = ++stamp_;
    }
    seqs_.erase(id);
  }

  std::int64_t Lookup(const std::string& salt, const Key& tokens, bool whole) const {
    return Match(salt, tokens, whole) * kT;
  }

  const std::vector<ContentId>& victims() const { return victims_; }
  // The learned policy: victims come from here, in order, and are checked instead of chosen.
  void set_external_victims(const std::vector<EvictedBlock>* v) { external_ = v; }
  std::int64_t free_blocks() const { return free_; }
  std::int64_t cached_blocks() const { return static_cast<std::int64_t>(entries_.size()); }
  std::int64_t evictable() const { return CountRemovable(); }
  const std::map<std::uint64_t, Seq>& seqs() const { return seqs_; }

 private:
  static Key KeyOf(const std::string& salt, const Key& tokens, std::int64_t block) {
    Key k{salt.empty() ? 0 : 1};
    k.insert(k.end(), tokens.begin(), tokens.begin() + (block + 1) * kT);
    return k;
  }
  ContentId DomainId(const std::string& salt) const {
    return DomainContentId(ns_digest_, CacheDomain{salt, 0});
  }
  static std::optional<RetentionRange> Retention(const std::vector<RetentionRange>& ranges,
                                                 std::int64_t block) {
    std::optional<RetentionRange> best;
    for (const RetentionRange& r : ranges) {
      if (r.end_token <= block * kT || r.begin_token >= (block + 1) * kT) continue;
      if (!best || r.priority > best->priority) best = r;
    }
    return best;
  }
  std::int64_t Match(const std::string& salt, const Key& tokens, bool whole) const {
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t limit = whole ? n : n - 1;
    std::int64_t k = 0;
    while ((k + 1) * kT <= limit && entries_.contains(KeyOf(salt, tokens, k))) ++k;
    return k;
  }
  bool LiveUid(const Key& key, std::uint64_t uid) const {
    auto it = entries_.find(key);
    return it != entries_.end() && it->second.uid == uid;
  }
  static bool Extends(const Key& longer, const Key& shorter) {
    return longer.size() > shorter.size() &&
           std::equal(shorter.begin(), shorter.end(), longer.begin());
  }
  // Keys are ordered lexicographically, so the keys extending `key` (its descendants) are exactly
  // the entries that follow it while they start with it.
  template <typename F>
  void ForEachDescendant(const Key& key, F&& f) const {
    for (auto it = entries_.upper_bound(key); it != entries_.end() && Extends(it->first, key);
         ++it) {
      f(it->first, it->second);
    }
  }
  // Unpinned, and nothing that extends it is pinned.
  bool Removable(const Key& key) const {
    if (entries_.at(key).pins > 0) return false;
    bool pinned_below = false;
    ForEachDescendant(key, [&](const Key&, const Entry& e) { pinned_below |= e.pins > 0; });
    return !pinned_below;
  }
  std::int64_t CountRemovable() const {
    std::int64_t n = 0;
    for (const auto& [k, e] : entries_) n += Removable(k) ? 1 : 0;
    return n;
  }
  // No cached block extends it by one block.
  bool IsLeaf(const Key& key) const {
    bool child = false;
    ForEachDescendant(key,
                      [&](const Key& k, const Entry&) { child |= k.size() == key.size() + kT; });
    return !child;
  }
  void TakeBlock() {
    if (free_ > 0) {
      --free_;
      return;
    }
    if (external_ != nullptr) {
      TakeExternalVictim();
      return;
    }
    const Key* victim = nullptr;
    std::pair<int, std::uint64_t> best{std::numeric_limits<int>::max(), 0};
    for (const auto& [k, e] : entries_) {
      if (e.pins > 0 || !IsLeaf(k)) continue;
      const std::pair<int, std::uint64_t> order{
          policy_ == EvictionPolicyKind::kLru ? 0 : e.priority, e.last_use};
      if (victim == nullptr || order < best) {
        victim = &k;
        best = order;
      }
    }
    KVMESH_CHECK(victim != nullptr) << "model: nothing to evict";
    victims_.push_back(entries_.at(*victim).id);
    entries_.erase(*victim);
  }
  void TakeExternalVictim() {
    KVMESH_CHECK(consumed_ < external_->size()) << "model: the manager evicted less";
    const ContentId id = (*external_)[consumed_++].content_id;
    int lowest = std::numeric_limits<int>::max();
    for (const auto& [k, e] : entries_) {
      if (e.pins == 0 && IsLeaf(k)) lowest = std::min(lowest, e.priority);
    }
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.id != id) continue;
      EXPECT_EQ(it->second.pins, 0) << "evicted a pinned block";
      EXPECT_TRUE(IsLeaf(it->first)) << "evicted a parent before its children";
      EXPECT_EQ(it->second.priority, lowest) << "evicted above the lowest evictable priority";
      victims_.push_back(id);
      entries_.erase(it);
      return;
    }
    ADD_FAILURE() << "evicted a block that is not cached: " << id.ToHex();
  }
  void Expire(std::int64_t now) {
    for (auto& [k, e] : entries_) {
      if (e.expiry <= now) {
        e.priority = kDefaultPriority;
        e.expiry = kNoExpiryRef;
      }
    }
  }

  std::int64_t free_;
  EvictionPolicyKind policy_;
  ContentId ns_digest_;
  std::map<Key, Entry> entries_;
  std::map<std::uint64_t, Seq> seqs_;
  std::vector<ContentId> victims_;
  const std::vector<EvictedBlock>* external_ = nullptr;
  std::size_t consumed_ = 0;
  std::uint64_t stamp_ = 0;
  std::uint64_t uid_ = 0;
};

class Driver {
 public:
  Driver(std::uint32_t seed, EvictionPolicyKind policy)
      : rng_(seed), model_(kCapacity, policy, Config(policy).key_namespace) {
    BlockManagerEnv env;
    env.clock = &clock_;
    env.eviction_listener = &listener_;
    env.hash_seed = seed + 1;
    manager_ = testing::MakeManager(Config(policy), env);
    if (policy == EvictionPolicyKind::kLearned) {
      model_.set_external_victims(&listener_.evicted);
      manager_first_ = true;
    }
    for (auto& base : bases_) {
      base.resize(24);
      for (Token& t : base) t = Token(1 + rng_() % 3);
    }
  }

  void Run(int steps) {
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE(StrCat("step ", step));
      const int op = static_cast<int>(rng_() % 100);
      if (op < 33) {
        Add();
      } else if (op < 55) {
        Store();
      } else if (op < 68) {
        Append();
      } else if (op < 88) {
        Remove();
      } else if (op < 94) {
        clock_.Advance(std::chrono::milliseconds(500 * (1 + rng_() % 8)));
      } else {
        Lookup();
      }
      ASSERT_EQ(listener_victims(), model_.victims());
      const BlockManagerStats s = manager_->GetStats();
      ASSERT_EQ(s.pools[0].free_blocks, model_.free_blocks());
      ASSERT_EQ(s.pools[0].cached_blocks, model_.cached_blocks());
      ASSERT_EQ(s.pools[0].evictable_blocks, model_.evictable());
      const Status inv = manager_->CheckInvariants();
      ASSERT_TRUE(inv.ok()) << inv;
      if (::testing::Test::HasFatalFailure()) return;
    }
    evictions_ = model_.victims().size();
  }

  std::size_t evictions() const { return evictions_; }
  std::uint64_t reused() const { return reused_; }

 private:
  static constexpr std::int64_t kCapacity = 24;

  static BlockManagerConfig Config(EvictionPolicyKind policy) {
    return testing::OnePoolConfig(kCapacity, kT, policy);
  }
  std::vector<ContentId> listener_victims() const {
    std::vector<ContentId> out;
    for (const auto& e : listener_.evicted) out.push_back(e.content_id);
    return out;
  }
  Key RandomPrompt() {
    const Key& base = bases_[rng_() % bases_.size()];
    Key p(base.begin(), base.begin() + 1 + rng_() % base.size());
    const int extra = static_cast<int>(rng_() % 9);
    for (int i = 0; i < extra; ++i) p.push_back(Token(1 + rng_() % 3));
    return p;
  }
  std::uint64_t RandomRunning() {
    auto it = model_.seqs().begin();
    std::advance(it, rng_() % model_.seqs().size());
    return it->first;
  }
  SequenceOptions RandomOptions(std::int64_t len) {
    static constexpr int kPriorities[] = {0, 10, 35, 50, 90, 100};
    SequenceOptions o;
    if (rng_() % 5 == 0) o.domain.salt = "tenant";
    o.reuse_last_token = rng_() % 3 == 0;
    if (rng_() % 3 == 0) {
      std::int64_t begin = rng_() % len;
      for (int r = 0; r < 2 && begin < len; ++r) {
        const std::int64_t end = begin + 1 + rng_() % 8;
        std::optional<Nanos> duration;
        if (rng_() % 3 == 0) duration = std::chrono::seconds(1 + rng_() % 4);
        o.retention.push_back({begin, end, kPriorities[rng_() % 6], duration});
        begin = end + rng_() % 4;
      }
    }
    o.decode_priority = kPriorities[rng_() % 6];
    if (rng_() % 3 == 0) o.decode_duration = std::chrono::seconds(2);
    return o;
  }
  std::int64_t Now() const { return clock_.Now().time_since_epoch().count(); }

  void Add() {
    if (model_.seqs().size() >= 6) return;
    const Key prompt = RandomPrompt();
    const SequenceOptions o = RandomOptions(static_cast<std::int64_t>(prompt.size()));
    const std::uint64_t id = next_id_++;
    std::optional<Result<AddSequenceResult>> first;
    if (manager_first_) first = manager_->AddSequence(RequestId{id}, prompt, o);
    const auto want = model_.Add(id, prompt, o, Now());
    const auto got = first ? std::move(*first) : manager_->AddSequence(RequestId{id}, prompt, o);
    ASSERT_EQ(got.ok(), want.has_value()) << got.status();
    if (!got.ok()) {
      ASSERT_TRUE(got.status().IsResourceExhausted()) << got.status();
      return;
    }
    ASSERT_EQ(got->reused_tokens, *want);
    reused_ += *want;
  }
  void Store() {
    if (model_.seqs().empty()) return;
    const std::uint64_t id = RandomRunning();
    const std::int64_t len = static_cast<std::int64_t>(model_.seqs().at(id).tokens.size());
    const std::int64_t computed = rng_() % 2 ? len : static_cast<std::int64_t>(rng_() % (len + 1));
    model_.Store(id, computed, Now());
    ASSERT_TRUE(manager_->StoreFullBlocks(RequestId{id}, computed).ok());
  }
  void Append() {
    if (model_.seqs().empty()) return;
    const std::uint64_t id = RandomRunning();
    Key tokens(1 + rng_() % 6);
    for (Token& t : tokens) t = Token(1 + rng_() % 3);
    std::optional<Result<AppendResult>> first;
    if (manager_first_) first = manager_->AppendTokens(RequestId{id}, tokens);
    const bool want = model_.Append(id, tokens, Now());
    const auto got = first ? std::move(*first) : manager_->AppendTokens(RequestId{id}, tokens);
    ASSERT_EQ(got.ok(), want) << got.status();
  }
  void Remove() {
    if (model_.seqs().empty()) return;
    const std::uint64_t id = RandomRunning();
    model_.Remove(id, Now());
    ASSERT_TRUE(manager_->RemoveSequence(RequestId{id}).ok());
  }
  void Lookup() {
    const Key prompt = RandomPrompt();
    SequenceOptions o;
    o.reuse_last_token = rng_() % 2;
    if (rng_() % 5 == 0) o.domain.salt = "tenant";
    ASSERT_EQ(manager_->LookupPrefix(prompt, o)->cached_tokens,
              model_.Lookup(o.domain.salt, prompt, o.reuse_last_token));
  }

  std::mt19937 rng_;
  ManualClock clock_;
  testing::RecordingListener listener_;
  ReferenceModel model_;
  std::unique_ptr<BlockManager> manager_;
  std::vector<Key> bases_ = std::vector<Key>(5);
  std::uint64_t next_id_ = 1;
  bool manager_first_ = false;  // the model checks the manager's victims (learned)
  std::uint64_t reused_ = 0;
  std::size_t evictions_ = 0;
};

class BlockManagerModelTest : public ::testing::TestWithParam<EvictionPolicyKind> {};

TEST_P(BlockManagerModelTest, MatchesTheReferenceModel) {
  std::size_t evictions = 0;
  std::uint64_t reused = 0;
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(StrCat("seed ", seed));
    Driver d(seed, GetParam());
    d.Run(1500);
    if (HasFatalFailure()) return;
    evictions += d.evictions();
    reused += d.reused();
  }
  // The runs must exercise what they compare.
  EXPECT_GT(evictions, 1000u);
  EXPECT_GT(reused, 2000u);
}

INSTANTIATE_TEST_SUITE_P(Policies, BlockManagerModelTest,
                         ::testing::Values(EvictionPolicyKind::kPriorityLru,
                                           EvictionPolicyKind::kLru, EvictionPolicyKind::kLearned),
                         [](const auto& info) {
                           switch (info.param) {
                             case EvictionPolicyKind::kLru: return "Lru";
                             case EvictionPolicyKind::kPriorityLru: return "PriorityLru";
                             case EvictionPolicyKind::kLearned: return "Learned";
                           }
                           return "Unknown";
                         });

}  // namespace
}  // namespace kvmesh
