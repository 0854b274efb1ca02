// Clang thread-safety annotations and an annotated mutex.
//
// Members guarded by a lock say so: `int count_ KVMESH_GUARDED_BY(mu_);`. Clang checks them at
// compile time (-Wthread-safety, on in the clang builds); other compilers ignore the annotations.
//
// Mutex / MutexLock wrap std::mutex so the analysis can see acquisitions. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KVMESH_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVMESH_THREAD_ANNOTATION_(x)
#endif

#define KVMESH_CAPABILITY(x) KVMESH_THREAD_ANNOTATION_(capability(x))
#define KVMESH_SCOPED_CAPABILITY KVMESH_THREAD_ANNOTATION_(scoped_lockable)
#define KVMESH_GUARDED_BY(x) KVMESH_THREAD_ANNOTATION_(guarded_by(x))
#define KVMESH_PT_GUARDED_BY(x) KVMESH_THREAD_ANNOTATION_(pt_guarded_by(x))
#define KVMESH_REQUIRES(...) KVMESH_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define KVMESH_EXCLUDES(...) KVMESH_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define KVMESH_ACQUIRE(...) KVMESH_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define KVMESH_RELEASE(...) KVMESH_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define KVMESH_NO_THREAD_SAFETY_ANALYSIS KVMESH_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace kvmesh {

class KVMESH_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Spins briefly before it sleeps: most critical sections here last well under a microsecond,
  // and a futex sleep and wake-up costs tens of microseconds (about 19 us on the 2-core VM the
  // project was measured on). kSpinTries try_locks with a pause between them (a few microseconds
  // at most), then the usual sleep.
  void Lock() KVMESH_ACQUIRE() {
    for (int i = 0; i < kSpinTries; ++i) {
      if (mu_.try_lock()) return;
      CpuRelax();
    }
    mu_.lock();
  }
  void Unlock() KVMESH_RELEASE() { mu_.unlock(); }

  // For condition variables: the underlying std::mutex. Callers hold the Mutex already.
  std::mutex& native() { return mu_; }

 private:
  static constexpr int kSpinTries = 64;
  static void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::mutex mu_;
};

class KVMESH_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) KVMESH_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() KVMESH_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Waits on `cv` while holding `mu` (already locked by the caller through a MutexLock), until
// `pred()` is true. The lock is released while waiting, as with std::condition_variable.
template <typename Pred>
void AwaitCondition(std::condition_variable& cv, Mutex& mu, Pred pred) KVMESH_REQUIRES(mu) {
  std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
  cv.wait(lock, pred);
  lock.release();  // still held; the MutexLock releases it
}

// As AwaitCondition, for at most `timeout`; returns pred() at the end.
template <typename Rep, typename Period, typename Pred>
bool AwaitConditionFor(std::condition_variable& cv, Mutex& mu,
                       std::chrono::duration<Rep, Period> timeout, Pred pred) KVMESH_REQUIRES(mu) {
  std::unique_lock<std::mutex> lock(mu.native(), std::adopt_lock);
  const bool ok = cv.wait_for(lock, timeout, pred);
  lock.release();
  return ok;
}

}  // namespace kvmesh
