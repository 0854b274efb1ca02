#include "kernels/kv_format.h"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

TEST(KvFormatTest, NamesRoundTrip) {
  for (int i = 0; i < kNumKvDtypes; ++i) {
    const auto d = static_cast<KvDtype>(i);
    auto parsed = ParseKvDtype(KvDtypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*ParseKvDtype("BF16"), KvDtype::kBF16);
  EXPECT_EQ(*ParseKvDtype("fp8_e4m3"), KvDtype::kFP8);
  EXPECT_EQ(*ParseKvLayout("nhd"), KvLayout::kNHD);
  EXPECT_EQ(KvLayoutName(KvLayout::kHND), "HND");
}

TEST(KvFormatTest, BadNamesSayWhatIsAccepted) {
  auto d = ParseKvDtype("fp6");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nvfp4"), std::string::npos);
  auto l = ParseKvLayout("HDN");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("HND or NHD"), std::string::npos);
}

TEST(KvFormatTest, BitsAndScales) {
  EXPECT_EQ(KvDtypeBits(KvDtype::kNVFP4), 4);
  EXPECT_EQ(ElementsPerByte(KvDtype::kNVFP4), 2);
  EXPECT_EQ(ElementsPerByte(KvDtype::kFP8), 1);
  EXPECT_EQ(ScaleKindOf(KvDtype::kINT8), KvScaleKind::kPerTokenHead);
  EXPECT_EQ(ScaleKindOf(KvDtype::kFP8PerTensor), KvScaleKind::kNone);
  EXPECT_TRUE(HasPoolScale(KvDtype::kNVFP4));
  EXPECT_FALSE(HasPoolScale(KvDtype::kFP8));
}

}  // namespace
}  // namespace kvmesh
