// CPU time of this process's threads by thread name, from /proc/self/task (Linux): where a
// benchmark's CPU went across its threads (the replay thread, copy workers, RocksDB's flush and
// compaction threads), so that a wall-clock gap on a machine with few cores is explained by a
// measurement.
//
// Thread safety: free functions; a snapshot reads /proc and is independent of other threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvmesh {

struct ThreadCpu {
  int tid = 0;
  std::string name;  // as the kernel keeps it (15 bytes at most)
  double cpu_s = 0;  // user + system
};

// Every live thread of this process; empty where /proc cannot be read.
std::vector<ThreadCpu> ThreadCpuSnapshot();

// CPU seconds used between two snapshots, summed by thread name, largest first. A thread only in
// `after` counts from zero (it started in between); one that exited before `after` is missing,
// so take `after` while the threads of interest still run.
std::vector<std::pair<std::string, double>> CpuByThreadName(const std::vector<ThreadCpu>& before,
                                                            const std::vector<ThreadCpu>& after);

}  // namespace kvmesh
