// Helpers of the deployment-file tests (tests/deploy): running a command, finding a program on
// PATH, and reading the durations compose files and systemd units write.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <utility>

namespace kvmesh::deploy_test {

// Runs `command` with sh; its exit code and stdout+stderr.
inline std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen((command + " 2>&1").c_str(), "r"), ::pclose);
  if (!p) return {-1, ""};
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p.get()) != nullptr) out += buf.data();
  const int status = ::pclose(p.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The path of `program` on PATH; empty when it is not there.
inline std::string OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::filesystem::path p = std::filesystem::path(d) / program;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// A duration as compose ("2m", "1m30s") or systemd ("2min", "1min 30s") writes it, in seconds; -1
// when it is not one (a bare number included: its unit would be a guess).
inline int DurationSeconds(const std::string& text) {
  static const std::regex part(R"(\s*(\d+)(h|min|m|s)\s*)");
  int total = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    std::smatch m;
    const std::string rest = text.substr(at);
    if (!std::regex_search(rest, m, part, std::regex_constants::match_continuous)) return -1;
    const std::string unit = m[2].str();
    total += std::stoi(m[1].str()) * (unit == "h" ? 3600 : unit == "s" ? 1 : 60);
    at += static_cast<std::size_t>(m.length(0));
  }
  return text.empty() ? -1 : total;
}

}  // namespace kvmesh::deploy_test
