// Primary-memory detection: /proc/meminfo parsing and the live detection (a GPU when one is
// present, else host memory).
#include "pool/primary_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvmesh {
namespace {

TEST(PrimaryMemoryTest, ParsesMeminfo) {
  const char* text =
      "MemTotal:       24576000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:   23000000 kB\n"
      "Buffers:            1234 kB\n";
  auto m = ParseMeminfo(text);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kind, PrimaryMemoryKind::kHost);
  EXPECT_EQ(m->free_bytes, 23000000LL * 1024);
  EXPECT_EQ(m->total_bytes, 24576000LL * 1024);
}

TEST(PrimaryMemoryTest, RejectsBrokenMeminfo) {
  EXPECT_THAT(ParseMeminfo("MemTotal: 100 kB\n").status().message(),
              ::testing::HasSubstr("no MemAvailable line"));
  EXPECT_TRUE(ParseMeminfo("MemAvailable: lots kB\nMemTotal: 1 kB\n").status().IsCorruption());
  // "MemAvailableX" is not "MemAvailable".
  EXPECT_FALSE(ParseMeminfo("MemAvailableX: 5 kB\nMemTotal: 9 kB\n").ok());
}

TEST(PrimaryMemoryTest, DetectsSomething) {
  auto m = DetectPrimaryMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->free_bytes, 0);
  EXPECT_GE(m->total_bytes, m->free_bytes);
  EXPECT_FALSE(m->source.empty());
  if (m->kind == PrimaryMemoryKind::kGpu) {
    EXPECT_GE(m->device, 0);
  }
  EXPECT_TRUE(PrimaryMemoryKindName(m->kind) == "gpu" || PrimaryMemoryKindName(m->kind) == "host");
}

}  // namespace
}  // namespace kvmesh
