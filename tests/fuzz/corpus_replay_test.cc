// Runs one fuzz target's entry point (LLVMFuzzerTestOneInput, fuzz/<name>_fuzzer.cc, linked in
// without libFuzzer) once over every file of its seed corpus (fuzz/corpus/<name>/) and of its
// regression inputs (fuzz/regressions/<name>/: inputs that crashed it once, kept after the fix).
// A target aborts when one of its oracles fails, so an input that breaks it fails this test; an
// empty or missing corpus fails it too. docs/fuzzing.md describes the layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> FilesUnder(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string().front() != '.') out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::uint8_t> ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void Replay(const std::vector<fs::path>& files) {
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    const std::vector<std::uint8_t> bytes = ReadAll(f);
    // libFuzzer hands a target a valid pointer even for an empty input.
    const std::uint8_t empty = 0;
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.empty() ? &empty : bytes.data(), bytes.size()), 0);
  }
}

TEST(FuzzCorpusReplay, EverySeedInputRunsClean) {
  const std::vector<fs::path> seeds = FilesUnder(KVMESH_FUZZ_CORPUS_DIR);
  ASSERT_FALSE(seeds.empty()) << "no seed corpus for fuzz target " << KVMESH_FUZZ_TARGET << " in "
                              << KVMESH_FUZZ_CORPUS_DIR;
  Replay(seeds);
  std::cout << "replayed " << seeds.size() << " seed inputs of " << KVMESH_FUZZ_TARGET << "\n";
}

TEST(FuzzCorpusReplay, EveryRegressionInputRunsClean) {
  const std::vector<fs::path> regressions = FilesUnder(KVMESH_FUZZ_REGRESSIONS_DIR);
  Replay(regressions);
  std::cout << "replayed " << regressions.size() << " regression inputs of " << KVMESH_FUZZ_TARGET
            << "\n";
}

}  // namespace
