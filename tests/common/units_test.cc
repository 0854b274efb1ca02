#include "common/units.h"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

TEST(UnitsTest, ParsesBytes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096);
  EXPECT_EQ(*ParseBytes("80GiB"), 80LL << 30);
  EXPECT_EQ(*ParseBytes("80gib"), 80LL << 30);
  EXPECT_EQ(*ParseBytes("8Mi"), 8LL << 20);
  EXPECT_EQ(*ParseBytes("1.5G"), 1'500'000'000LL);
  EXPECT_EQ(*ParseBytes("2kb"), 2000);
  EXPECT_EQ(*ParseBytes(" 1TiB "), 1LL << 40);
}

TEST(UnitsTest, RejectsBadBytes) {
  EXPECT_TRUE(ParseBytes("").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("-5").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("12XB").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("GiB").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("0.5").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("99999999999TiB").status().IsInvalidArgument());
}

TEST(UnitsTest, ParsesCounts) {
  EXPECT_EQ(*ParseCount("256k"), 256000);
  EXPECT_EQ(*ParseCount("128Ki"), 131072);
  EXPECT_TRUE(ParseCount("3 blocks").status().IsInvalidArgument());
}

TEST(UnitsTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(8LL << 20), "8.00 MiB");
  EXPECT_EQ(FormatBytes(3LL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace kvmesh
