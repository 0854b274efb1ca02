#include "common/content_id.h"

#include <gtest/gtest.h>

#include <string>
#include <unordered_set>

#include "common/strings.h"

namespace kvmesh {
namespace {

TEST(Sha256Test, KnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(HexEncode(Sha256::Digest("abc", 3).data(), 32),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexEncode(Sha256::Digest("", 0).data(), 32),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256 h;
  h.Update(text.data(), 10);
  h.Update(text.data() + 10, text.size() - 10);
  const ContentId id = h.FinishContentId();
  EXPECT_EQ(id.ToHex(), "248d6a61d20638b8e5c026930c3e6039");
  // The hasher resets after Finish.
  h.Update(text.data(), text.size());
  EXPECT_EQ(h.FinishContentId(), id);
}

TEST(ContentIdTest, HexRoundTripAndErrors) {
  const ContentId id = [] {
    Sha256 h;
    h.Update("x", 1);
    return h.FinishContentId();
  }();
  EXPECT_EQ(*ContentId::FromHex(id.ToHex()), id);
  EXPECT_TRUE(ContentId::FromHex("abc").status().IsInvalidArgument());
  EXPECT_TRUE(ContentId::FromHex(std::string(32, 'g')).status().IsInvalidArgument());
  std::unordered_set<ContentId> set{id};
  EXPECT_EQ(set.count(id), 1u);
  EXPECT_FALSE(id.IsZero());
  EXPECT_TRUE(ContentId{}.IsZero());
}

}  // namespace
}  // namespace kvmesh
