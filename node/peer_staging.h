// StagingArena: registered host memory cut into equal slots, where peer bundles are written before
// a Send and land after a Grant (node/peer_service.h, node/remote_fetch.h).
//
// Allocated once at start (aligned, registered with the node's TransferEngine once), never per
// block. Acquire(n, deadline) takes n slots (waiting for them until the deadline); the returned
// StagingLease gives them back when destroyed. A lease must outlive every UCX operation on its
// slots: callers destroy it only after the grant or send that uses it completed (TransferOp::Wait
// returns only when UCX no longer touches the memory — transfer/transfer_engine.h), so a slot
// that UCX may still write is never handed to anyone else.
//
// Thread safety: thread-safe. A lease is confined to its holder.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "transfer/transfer_engine.h"

namespace kvmesh {

class StagingArena;

class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(StagingLease&& other) noexcept;
  StagingLease& operator=(StagingLease&& other) noexcept;
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  ~StagingLease();

  [[nodiscard]] std::size_t size() const { return slots_.size(); }
  // Slot i's memory (slot_bytes long) and its slice for the transfer engine, `length` bytes.
  [[nodiscard]] std::span<std::byte> bytes(std::size_t i) const;
  [[nodiscard]] Slice slice(std::size_t i, std::uint64_t length) const;

 private:
  friend class StagingArena;
  StagingLease(StagingArena* arena, std::vector<std::uint32_t> slots)
      : arena_(arena), slots_(std::move(slots)) {}
  void Release();
  StagingArena* arena_ = nullptr;
  std::vector<std::uint32_t> slots_;
};

class StagingArena {
 public:
  // slot_bytes > 0 (rounded up to 4 KiB), slots >= 1. Registers the memory with `engine`, which
  // must outlive the arena. kInvalidArgument / the engine's errors.
  static Result<std::unique_ptr<StagingArena>> Create(TransferEngine* engine,
                                                      std::uint64_t slot_bytes,
                                                      std::uint32_t slots);
  ~StagingArena();  // REQUIRES: no lease outstanding
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  [[nodiscard]] std::uint64_t slot_bytes() const { return slot_bytes_; }
  [[nodiscard]] std::uint32_t slots() const { return slots_; }
  // n slots; kInvalidArgument when n is 0 or more than slots(), kTimedOut when they did not
  // become free before `deadline`.
  Result<StagingLease> Acquire(std::size_t n, std::chrono::steady_clock::time_point deadline)
      KVMESH_EXCLUDES(mu_);
  [[nodiscard]] std::uint32_t free_slots() const KVMESH_EXCLUDES(mu_);

 private:
  friend class StagingLease;
  StagingArena() = default;
  void Give(std::span<const std::uint32_t> slots) KVMESH_EXCLUDES(mu_);

  TransferEngine* engine_ = nullptr;
  std::uint64_t slot_bytes_ = 0;
  std::uint32_t slots_ = 0;
  std::byte* memory_ = nullptr;
  RegionId region_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint32_t> free_ KVMESH_GUARDED_BY(mu_);
};

}  // namespace kvmesh
