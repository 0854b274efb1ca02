#include "common/strings.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvmesh {
namespace {

TEST(StringsTest, StrCatAndJoin) {
  EXPECT_EQ(StrCat("a", 1, "-", 2.5), "a1-2.5");
  EXPECT_EQ(StrJoin(std::vector<int>{1, 2, 3}, ", "), "1, 2, 3");
  EXPECT_EQ(StrJoin(std::vector<int>{}, ", "), "");
}

TEST(StringsTest, SplitKeepsEmptyPieces) {
  EXPECT_EQ(StrSplit("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(StrSplit("", ','), (std::vector<std::string>{""}));
}

TEST(StringsTest, HexAndLower) {
  const unsigned char bytes[] = {0x00, 0xab, 0x7f};
  EXPECT_EQ(HexEncode(bytes, 3), "00ab7f");
  EXPECT_EQ(AsciiLower("NHD"), "nhd");
}

TEST(StringsTest, FormatFixedRoundsToTheDigitsAsked) {
  EXPECT_EQ(FormatFixed(0.36638, 4), "0.3664");
  EXPECT_EQ(FormatFixed(1.0, 2), "1.00");
  EXPECT_EQ(FormatFixed(2690.6, 0), "2691");
  EXPECT_EQ(FormatFixed(-0.125, 1), "-0.1");  // ties to even, as printf
}

}  // namespace
}  // namespace kvmesh
