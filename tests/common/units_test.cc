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
  // Decimals are exact (through a double, 1.07G was not a whole number of bytes).
  EXPECT_EQ(*ParseBytes("1.07G"), 1'070'000'000LL);
  EXPECT_EQ(*ParseBytes("0.27T"), 270'000'000'000LL);
  EXPECT_EQ(*ParseBytes("0.5KiB"), 512);
  EXPECT_EQ(*ParseBytes(".5k"), 500);
  EXPECT_EQ(*ParseBytes("3."), 3);
  for (int hundredths = 0; hundredths < 1000; ++hundredths) {
    const std::string text = std::to_string(hundredths / 100) + "." +
                             std::to_string(hundredths / 10 % 10) +
                             std::to_string(hundredths % 10) + "G";
    const Result<std::int64_t> v = ParseBytes(text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(*v, hundredths * 10'000'000LL) << text;
  }
}

TEST(UnitsTest, RejectsBadBytes) {
  EXPECT_TRUE(ParseBytes("").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("-5").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("12XB").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("GiB").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("0.5").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("99999999999TiB").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("1.0000001k").status().IsInvalidArgument());  // not a whole number
  EXPECT_TRUE(ParseBytes("1.2.3").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes(".").status().IsInvalidArgument());
  EXPECT_TRUE(ParseBytes("99999999999999999999999").status().IsInvalidArgument());
  EXPECT_EQ(*ParseBytes("4611686018427387903"), (1LL << 62) - 1);
  EXPECT_TRUE(ParseBytes("4611686018427387904").status().IsInvalidArgument());
}

TEST(UnitsTest, ParsesCounts) {
  EXPECT_EQ(*ParseCount("256k"), 256000);
  EXPECT_EQ(*ParseCount("128Ki"), 131072);
  EXPECT_EQ(*ParseCount("2.01k"), 2010);
  EXPECT_TRUE(ParseCount("3 blocks").status().IsInvalidArgument());
}

TEST(UnitsTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(8LL << 20), "8.00 MiB");
  EXPECT_EQ(FormatBytes(3LL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace kvmesh
