#include "common/thread_cpu.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <system_error>

namespace kvmesh {
namespace {

// One /proc/self/task/<tid>/stat line: "tid (name) state ..." with utime and stime as the 14th
// and 15th fields, in clock ticks. The name may hold spaces and parentheses: it ends at the last
// ')'.
bool ParseStat(const std::string& line, double ticks_per_s, ThreadCpu* out) {
  const auto open = line.find('(');
  const auto close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  out->name = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields{std::istream_iterator<std::string>(rest),
                                  std::istream_iterator<std::string>()};
  // fields[0] is the state (field 3), so utime (field 14) is fields[11], stime fields[12].
  if (fields.size() < 13) return false;
  char* end_u = nullptr;
  char* end_s = nullptr;
  const double utime = std::strtod(fields[11].c_str(), &end_u);
  const double stime = std::strtod(fields[12].c_str(), &end_s);
  if (*end_u != '\0' || *end_s != '\0') return false;
  out->cpu_s = (utime + stime) / ticks_per_s;
  return true;
}

}  // namespace

std::vector<ThreadCpu> ThreadCpuSnapshot() {
  std::vector<ThreadCpu> out;
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0) return out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;  // the thread exited meanwhile
    ThreadCpu t;
    const std::string tid = entry.path().filename().string();
    char* end = nullptr;
    t.tid = static_cast<int>(std::strtol(tid.c_str(), &end, 10));
    if (end == tid.c_str() || *end != '\0') continue;
    if (ParseStat(line, static_cast<double>(ticks), &t)) out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::pair<std::string, double>> CpuByThreadName(const std::vector<ThreadCpu>& before,
                                                            const std::vector<ThreadCpu>& after) {
  std::map<int, const ThreadCpu*> start;
  for (const ThreadCpu& t : before) start[t.tid] = &t;
  std::map<std::string, double> by_name;
  for (const ThreadCpu& t : after) {
    auto it = start.find(t.tid);
    const double base = it != start.end() && it->second->name == t.name ? it->second->cpu_s : 0.0;
    by_name[t.name] += std::max(0.0, t.cpu_s - base);
  }
  std::vector<std::pair<std::string, double>> out(by_name.begin(), by_name.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace kvmesh
