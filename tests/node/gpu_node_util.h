// Helpers of the kvnode GPU tests (label gpu): a test config with the pools on a CUDA device, the
// synthetic engine run as a process with its JSON report, and a skip for machines with too few
// devices.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pool/primary_memory.h"
#include "tests/node/node_process.h"

namespace kvmesh::node_test {

#define SKIP_WITH_FEWER_DEVICES(n) \
  if (CudaDeviceCount() < (n))     \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this process sees " << CudaDeviceCount()

// TestConfig with the pools on `device` and `tp` ranks.
inline std::string GpuConfig(const std::filesystem::path& dir, const std::string& device, int tp,
                             std::int64_t max_tokens, const std::string& host_cache,
                             const std::string& disk) {
  std::string y = TestConfig(dir, max_tokens, host_cache, disk,
                             "tensor_parallel_size: " + std::to_string(tp) + "\n");
  const std::string cpu = "device: cpu\n";
  y.replace(y.find(cpu), cpu.size(), "device: " + device + "\n");
  return y;
}

// kvmesh-synth through a multi-turn workload with JSON output; the parsed report.
inline nlohmann::json RunSynth(const std::filesystem::path& dir, const std::string& name,
                               int conversations) {
  const std::vector<std::string> args = {"--socket",
                                         (dir / "kvnode.sock").string(),
                                         "--secret",
                                         kTestSecret,
                                         "--synthetic",
                                         "--conversations",
                                         std::to_string(conversations),
                                         "--turns",
                                         "3",
                                         "--block-tokens",
                                         "32",
                                         "--system-prompts",
                                         "2",
                                         "--decode-tokens",
                                         "2",
                                         "--json"};
  RunOutput r = RunToCompletion(SynthPath(), args, dir / name);
  EXPECT_EQ(r.status.code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

}  // namespace kvmesh::node_test
