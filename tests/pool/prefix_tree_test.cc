// PrefixTree: full-key child lookup (a forced hash collision cannot return a wrong node), content
// id chaining, domain roots, removal and index reuse with generations.
#include "pool/prefix_tree.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvmesh {
namespace {

constexpr std::int32_t kT = 4;

TEST(PrefixTreeTest, ChildrenAreFoundByFullKey) {
  PrefixTree tree(kT, 1, NamespaceDigest({}), 1234);
  const NodeRef root = tree.AcquireRoot({});
  const std::vector<Token> a{1, 2, 3, 4};
  const std::vector<Token> b{1, 2, 3, 5};
  EXPECT_EQ(tree.FindChild(root, a, {}), kNoNode);
  const NodeRef na = tree.AddChild(root, a, {});
  const NodeRef nb = tree.AddChild(root, b, {});
  EXPECT_EQ(tree.FindChild(root, a, {}), na);
  EXPECT_EQ(tree.FindChild(root, b, {}), nb);
  const NodeRef naa = tree.AddChild(na, a, {});
  EXPECT_EQ(tree.FindChild(na, a, {}), naa);
  EXPECT_EQ(tree.FindChild(nb, a, {}), kNoNode);
  EXPECT_EQ(tree.node(naa).depth, 1);
  EXPECT_EQ(tree.node(na).num_children, 1u);
  EXPECT_EQ(tree.num_nodes(), 3u);
  // Content ids chain: the same tokens under another parent get another id.
  EXPECT_NE(tree.node(naa).content_id, tree.node(na).content_id);
  EXPECT_EQ(tree.node(na).content_id,
            BlockContentId(tree.node(root).content_id, tree.node(root).content_id, a, {}));
  EXPECT_EQ(tree.FindByContentId(tree.node(naa).content_id), naa);
  EXPECT_EQ(tree.parent_content_id(naa), tree.node(na).content_id);
}

TEST(PrefixTreeTest, MultimodalRefsArePartOfTheKey) {
  PrefixTree tree(kT, 1, NamespaceDigest({}), 99);
  const NodeRef root = tree.AcquireRoot({});
  const std::vector<Token> a{0, 0, 0, 0};
  ContentId img1, img2;
  img1.bytes[0] = 1;
  img2.bytes[0] = 2;
  const std::vector<BlockMmRef> m1{{img1, 0, 4}};
  const std::vector<BlockMmRef> m2{{img2, 0, 4}};
  const NodeRef n1 = tree.AddChild(root, a, m1);
  EXPECT_EQ(tree.FindChild(root, a, m1), n1);
  EXPECT_EQ(tree.FindChild(root, a, m2), kNoNode);
  EXPECT_EQ(tree.FindChild(root, a, {}), kNoNode);
  const NodeRef n2 = tree.AddChild(root, a, m2);
  EXPECT_NE(tree.node(n1).content_id, tree.node(n2).content_id);
}

TEST(PrefixTreeTest, DomainsHaveSeparateRoots) {
  PrefixTree tree(kT, 1, NamespaceDigest({}), 5);
  const NodeRef r1 = tree.AcquireRoot({"salt-a", 0});
  const NodeRef r2 = tree.AcquireRoot({"salt-b", 0});
  const NodeRef r3 = tree.AcquireRoot({"salt-a", 3});
  EXPECT_NE(r1, r2);
  EXPECT_NE(r1, r3);
  EXPECT_EQ(tree.AcquireRoot({"salt-a", 0}), r1);
  EXPECT_EQ(tree.node(r1).root_refs, 2u);
  const std::vector<Token> a{1, 2, 3, 4};
  tree.AddChild(r1, a, {});
  EXPECT_EQ(tree.FindChild(r2, a, {}), kNoNode);
  tree.ReleaseRoot(r2);
  EXPECT_EQ(tree.FindRoot({"salt-b", 0}), kNoNode);
  EXPECT_EQ(tree.num_roots(), 2u);
}

TEST(PrefixTreeTest, RemovedNodesAreStaleAndIndicesReused) {
  PrefixTree tree(kT, 2, NamespaceDigest({}), 5);
  const NodeRef root = tree.AcquireRoot({});
  const std::vector<Token> a{1, 2, 3, 4};
  const NodeRef n = tree.AddChild(root, a, {});
  const NodeHandle h = tree.handle(n);
  const ContentId id = tree.node(n).content_id;
  EXPECT_TRUE(tree.IsCurrent(h));
  tree.RemoveLeaf(n);
  EXPECT_FALSE(tree.IsCurrent(h));
  EXPECT_EQ(tree.FindChild(root, a, {}), kNoNode);
  EXPECT_EQ(tree.FindByContentId(id), kNoNode);
  const NodeRef m = tree.AddChild(root, std::vector<Token>{5, 6, 7, 8}, {});
  EXPECT_EQ(m, n);  // index reused
  EXPECT_FALSE(tree.IsCurrent(h));
  EXPECT_FALSE(tree.block(m, 0).valid());
  EXPECT_FALSE(tree.block(m, 1).valid());
}

TEST(PrefixTreeTest, ManySiblingsSurviveIndexGrowthAndErasure) {
  PrefixTree tree(kT, 1, NamespaceDigest({}), 77);
  const NodeRef root = tree.AcquireRoot({});
  std::vector<NodeRef> nodes;
  for (Token i = 0; i < 2000; ++i)
    nodes.push_back(tree.AddChild(root, std::vector<Token>{i, i, i, i}, {}));
  for (Token i = 0; i < 2000; i += 2) tree.RemoveLeaf(nodes[i]);
  for (Token i = 0; i < 2000; ++i) {
    const NodeRef want = i % 2 == 0 ? kNoNode : nodes[i];
    ASSERT_EQ(tree.FindChild(root, std::vector<Token>{i, i, i, i}, {}), want) << i;
  }
  EXPECT_EQ(tree.node(root).num_children, 1000u);
}

}  // namespace
}  // namespace kvmesh
