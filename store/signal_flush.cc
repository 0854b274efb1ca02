#include "store/signal_flush.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "common/strings.h"

namespace kvmesh {
namespace {

sigset_t Signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

Result<std::unique_ptr<SignalFlush>> SignalFlush::Start(Report report) {
  std::unique_ptr<SignalFlush> f(new SignalFlush(std::move(report)));
  const sigset_t set = Signals();
  if (pthread_sigmask(SIG_BLOCK, &set, &f->previous_) != 0) {
    return Status::Internal("cannot block SIGTERM and SIGINT");
  }
  f->waiter_ = std::thread([p = f.get()] { p->Wait(); });
  return f;
}

SignalFlush::~SignalFlush() {
  stop_.store(true);
  if (waiter_.joinable()) waiter_.join();
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

void SignalFlush::Register(RocksDbTier* tier) {
  MutexLock lock(&mu_);
  tiers_.push_back(tier);
}

void SignalFlush::Unregister(RocksDbTier* tier) {
  MutexLock lock(&mu_);
  tiers_.erase(std::remove(tiers_.begin(), tiers_.end(), tier), tiers_.end());
}

void SignalFlush::Wait() {
  const sigset_t set = Signals();
  const timespec tick{0, 100'000'000};  // looks at stop_ ten times a second
  while (!stop_.load()) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) FlushAndExit(sig);
  }
}

void SignalFlush::FlushAndExit(int signal) {
  std::vector<std::string> lines;
  {
    MutexLock lock(&mu_);  // held to the end: no tier is unregistered (and destroyed) meanwhile
    for (RocksDbTier* tier : tiers_) {
      const Status st = tier->Flush();
      const TierStats s = tier->stats();
      lines.push_back(st.ok() ? StrCat("flushed the disk tier ", tier->options().path, ": ",
                                       s.durable_entries, " blocks durable (", tier->durable_puts(),
                                       " puts)")
                              : StrCat("the disk tier ", tier->options().path,
                                       " could not be flushed: ", st.ToString()));
    }
    if (report_) report_(signal == SIGTERM ? "SIGTERM" : "SIGINT", lines);
    _exit(128 + signal);
  }
}

}  // namespace kvmesh
