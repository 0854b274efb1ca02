// For the kvctl tests: runs the real kvctl binary (built by the project; its path is compiled in)
// without a shell, capturing its exit code, stdout and stderr, and gives each test a scratch
// directory. Not thread-safe: tests call it from their main thread.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvmesh::cli_test {

struct RunResult {
  int exit_code = -1;  // 128 + signal when kvctl was killed by one
  std::string out;
  std::string err;
};

// Runs kvctl with `args`, and `env` ("NAME=value") added before the test's own environment.
RunResult RunKvctl(const std::vector<std::string>& args, const std::vector<std::string>& env = {});

// The whole file, or "" when it cannot be read.
std::string ReadFile(const std::string& path);

// A fresh directory named after the running test (under GoogleTest's TempDir), removed with it.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  [[nodiscard]] std::string Path(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvmesh::cli_test
