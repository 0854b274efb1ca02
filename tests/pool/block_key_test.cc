// Content ids: equal keys give equal ids; any single field changed gives a different id.
#include "pool/block_key.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace kvmesh {
namespace {

KeyNamespace BaseNamespace() {
  KeyNamespace ns;
  ns.model_id = "meta-llama/Meta-Llama-3-8B";
  ns.revision = "main";
  ns.cache_dtype = KvDtype::kBF16;
  ns.layout = KvLayout::kHND;
  ns.tokens_per_block = 64;
  ns.pool_group = "full/8x128";
  ns.shard_rank = 0;
  ns.shard_count = 1;
  return ns;
}

TEST(BlockKeyTest, NamespaceDigestIsDeterministicAndSensitiveToEveryField) {
  const KeyNamespace base = BaseNamespace();
  EXPECT_EQ(NamespaceDigest(base), NamespaceDigest(BaseNamespace()));
  std::vector<KeyNamespace> variants(8, base);
  variants[0].model_id = "meta-llama/Meta-Llama-3-8B-Instruct";
  variants[1].revision = "v2";
  variants[2].cache_dtype = KvDtype::kFP8;
  variants[3].layout = KvLayout::kNHD;
  variants[4].tokens_per_block = 32;
  variants[5].pool_group = "full/8x128+sliding-1024/8x128";
  variants[6].shard_rank = 1;
  variants[7].shard_count = 2;
  std::set<ContentId> ids{NamespaceDigest(base)};
  for (const auto& v : variants) ids.insert(NamespaceDigest(v));
  EXPECT_EQ(ids.size(), variants.size() + 1);
}

TEST(BlockKeyTest, LengthPrefixesKeepFieldBoundaries) {
  KeyNamespace a = BaseNamespace();
  KeyNamespace b = BaseNamespace();
  a.model_id = "ab";
  a.revision = "c";
  b.model_id = "a";
  b.revision = "bc";
  EXPECT_NE(NamespaceDigest(a), NamespaceDigest(b));
}

TEST(BlockKeyTest, DomainIdDependsOnSaltLoraAndNamespace) {
  const ContentId ns = NamespaceDigest(BaseNamespace());
  KeyNamespace other_ns = BaseNamespace();
  other_ns.model_id = "other";
  const ContentId base = DomainContentId(ns, CacheDomain{"tenant-a", 0});
  EXPECT_EQ(base, DomainContentId(ns, CacheDomain{"tenant-a", 0}));
  EXPECT_NE(base, DomainContentId(ns, CacheDomain{"tenant-b", 0}));
  EXPECT_NE(base, DomainContentId(ns, CacheDomain{"", 0}));
  EXPECT_NE(base, DomainContentId(ns, CacheDomain{"tenant-a", 7}));
  EXPECT_NE(base, DomainContentId(NamespaceDigest(other_ns), CacheDomain{"tenant-a", 0}));
}

TEST(BlockKeyTest, BlockIdDependsOnEveryField) {
  const ContentId ns = NamespaceDigest(BaseNamespace());
  const ContentId domain = DomainContentId(ns, CacheDomain{"s", 1});
  const ContentId parent = BlockContentId(domain, domain, std::vector<Token>{9, 9, 9, 9}, {});
  const std::vector<Token> tokens{1, 2, 3, 4};
  ContentId image;
  image.bytes[0] = 0xAB;
  const std::vector<BlockMmRef> mm{{image, 1, 2}};
  const ContentId base = BlockContentId(parent, domain, tokens, mm);
  EXPECT_EQ(base, BlockContentId(parent, domain, tokens, mm));

  std::set<ContentId> ids{base};
  ids.insert(BlockContentId(domain, domain, tokens, mm));  // parent
  ids.insert(BlockContentId(parent, DomainContentId(ns, CacheDomain{"t", 1}), tokens, mm));  // salt
  ids.insert(BlockContentId(parent, DomainContentId(ns, CacheDomain{"s", 2}), tokens, mm));  // lora
  ids.insert(BlockContentId(parent, domain, std::vector<Token>{1, 2, 3, 5}, mm));  // a token
  ids.insert(BlockContentId(parent, domain, tokens, {}));                          // no mm
  ContentId image2 = image;
  image2.bytes[15] = 1;
  ids.insert(BlockContentId(parent, domain, tokens, std::vector<BlockMmRef>{{image2, 1, 2}}));
  ids.insert(BlockContentId(parent, domain, tokens, std::vector<BlockMmRef>{{image, 0, 2}}));
  ids.insert(BlockContentId(parent, domain, tokens, std::vector<BlockMmRef>{{image, 1, 3}}));
  EXPECT_EQ(ids.size(), 9u);
  EXPECT_FALSE(base.IsZero());
}

TEST(BlockKeyTest, HasherMatchesOneShotAndIsReusable) {
  const ContentId domain = DomainContentId(NamespaceDigest(BaseNamespace()), {});
  ContentIdHasher h;
  const std::vector<Token> a{1, 2, 3, 4};
  const std::vector<Token> b{5, 6, 7, 8};
  EXPECT_EQ(h.ForBlock(domain, domain, a, {}), BlockContentId(domain, domain, a, {}));
  EXPECT_EQ(h.ForBlock(domain, domain, b, {}), BlockContentId(domain, domain, b, {}));
  EXPECT_EQ(h.ForBlock(domain, domain, a, {}), BlockContentId(domain, domain, a, {}));
  ContentId image;
  image.bytes[3] = 9;
  const std::vector<BlockMmRef> mm{{image, -3, 7}};
  EXPECT_EQ(h.ForBlock(domain, domain, b, mm), BlockContentId(domain, domain, b, mm));
  const ContentId ns = NamespaceDigest(BaseNamespace());
  EXPECT_EQ(h.ForDomain(ns, CacheDomain{"x", 4}), DomainContentId(ns, CacheDomain{"x", 4}));
}

TEST(BlockKeyTest, MmRefsForBlockSelectsOverlappingItems) {
  ContentId x, y, z;
  x.bytes[0] = 1;
  y.bytes[0] = 2;
  z.bytes[0] = 3;
  const std::vector<MultimodalItem> items{{x, 2, 5}, {y, 8, 1}, {z, 12, 4}};
  std::vector<BlockMmRef> out;
  MmRefsForBlock(items, 4, 4, &out);  // tokens 4..7: x (2..6)
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (BlockMmRef{x, -2, 5}));
  out.clear();
  MmRefsForBlock(items, 8, 4, &out);  // tokens 8..11: y
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (BlockMmRef{y, 0, 1}));
  out.clear();
  MmRefsForBlock(items, 0, 2, &out);  // tokens 0..1: none
  EXPECT_TRUE(out.empty());
}

TEST(BlockKeyTest, KeyHashDependsOnParentTokensAndSeed) {
  const std::vector<Token> a{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<Token> b = a;
  b[8] = 10;
  const std::uint64_t h = BlockKeyHash(42, 7, a, {});
  EXPECT_EQ(h, BlockKeyHash(42, 7, a, {}));
  EXPECT_NE(h, BlockKeyHash(42, 8, a, {}));
  EXPECT_NE(h, BlockKeyHash(43, 7, a, {}));
  EXPECT_NE(h, BlockKeyHash(42, 7, b, {}));
}

}  // namespace
}  // namespace kvmesh
