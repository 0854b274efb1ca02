// SignalFlush: SIGTERM and SIGINT end the process only after the registered RocksDB tiers have
// flushed — so that an operator's `kill` (or Ctrl-C, or a service manager stopping kvnode) keeps
// every put acknowledged until then, whatever the durability mode (docs/disk-tier.md).
//
// Start() blocks SIGTERM and SIGINT in the calling thread — and so in every thread it starts
// afterwards, which inherit the mask — and starts one thread that waits for them (sigtimedwait).
// On a signal that thread flushes every registered tier (RocksDbTier::Flush, thread-safe; puts may
// go on meanwhile), reports through `report` (e.g. a line on stderr) and ends the process with
// _exit(128 + signal), as the default action would have. A second signal while flushing is not
// waited for by anything: the flush is bounded by one memtable flush per tier.
//
// Call Start() before any other thread exists (kvctl: first thing in the command; kvnode: in
// main). The destructor stops the thread and restores the signal mask (a signal that arrived
// meanwhile is then delivered with its default action). Register/Unregister may be called from
// any thread; a tier must be unregistered before it is destroyed.
//
// Thread safety: thread-safe.
#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "store/rocksdb_tier.h"

namespace kvmesh {

class SignalFlush {
 public:
  // What a signal did: the signal's name ("SIGTERM") and one line per tier flushed.
  using Report = std::function<void(std::string_view signal, const std::vector<std::string>&)>;

  // kInternal when the mask cannot be set.
  static Result<std::unique_ptr<SignalFlush>> Start(Report report);
  ~SignalFlush();
  SignalFlush(const SignalFlush&) = delete;
  SignalFlush& operator=(const SignalFlush&) = delete;

  void Register(RocksDbTier* tier) KVMESH_EXCLUDES(mu_);
  void Unregister(RocksDbTier* tier) KVMESH_EXCLUDES(mu_);

 private:
  explicit SignalFlush(Report report) : report_(std::move(report)) {}
  void Wait();
  [[noreturn]] void FlushAndExit(int signal) KVMESH_EXCLUDES(mu_);

  Report report_;
  sigset_t previous_{};
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::vector<RocksDbTier*> tiers_ KVMESH_GUARDED_BY(mu_);
  std::thread waiter_;
};

}  // namespace kvmesh
