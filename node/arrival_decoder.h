// ArrivalDecoder: decodes (verifies and copies) the blocks of one grant on a thread of its own as
// their slices arrive, while later blocks are still on the wire — remote prefix fetch
// (node/remote_fetch.h) and the streaming handoff's layer ranges (node/layer_range_fetch.h).
//
// Block i is slices [i * per_block, (i + 1) * per_block) of the grant; it is decoded once each of
// its slices is whole (GrantRequest::on_slice: UCX never writes into a filled slice again), in
// order, stopping at the first block that fails. Slots the holder sent as zeros (blocks it no
// longer held) fail like a foreign block; the caller tells the two apart with the holder's count.
//
// Thread safety: OnSlice from the transfer engine's progress thread; Finish from the owner, after
// the grant completed (no slice is filled any more). The decode function runs on the decoder's
// thread, one block at a time. The decoder must be destroyed (or finished) before anything the
// decode function touches.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace kvmesh {

class ArrivalDecoder {
 public:
  struct Outcome {
    std::int64_t decoded = 0;  // blocks [0, decoded) verified and decoded
    Status failure;            // why block `decoded` was not (when one arrived and failed)
  };

  ArrivalDecoder(std::int64_t blocks, std::size_t per_block,
                 std::function<Status(std::int64_t block)> decode)
      : blocks_(blocks),
        per_block_(static_cast<std::uint32_t>(per_block)),
        decode_(std::move(decode)),
        arrived_(static_cast<std::size_t>(blocks), 0),
        thread_([this] { Run(); }) {}
  ~ArrivalDecoder() { static_cast<void>(Finish()); }
  ArrivalDecoder(const ArrivalDecoder&) = delete;
  ArrivalDecoder& operator=(const ArrivalDecoder&) = delete;

  // GrantRequest::on_slice (the transfer engine's progress thread): short, never blocks long.
  void OnSlice(std::uint32_t slice) {
    const std::size_t block = slice / per_block_;
    {
      MutexLock lock(&mu_);
      if (block >= arrived_.size() || ++arrived_[block] < per_block_) return;
    }
    cv_.notify_one();
  }

  // No slice is filled any more (the grant completed or failed): decodes the blocks that are whole
  // and not decoded yet, then joins the thread. Idempotent.
  Outcome Finish() {
    {
      MutexLock lock(&mu_);
      finished_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    return outcome_;
  }

 private:
  void Run() {
    for (std::int64_t i = 0; i < blocks_; ++i) {
      {
        MutexLock lock(&mu_);
        const auto b = static_cast<std::size_t>(i);
        AwaitCondition(cv_, mu_, [&]() KVMESH_NO_THREAD_SAFETY_ANALYSIS {
          return arrived_[b] == per_block_ || finished_;
        });
        if (arrived_[b] != per_block_)
          return;  // finished without it: not sent, or the grant failed
      }
      Status st = decode_(i);
      if (!st.ok()) {
        outcome_.failure = std::move(st);
        return;
      }
      outcome_.decoded = i + 1;
    }
  }

  const std::int64_t blocks_;
  const std::uint32_t per_block_;
  const std::function<Status(std::int64_t)> decode_;
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint32_t> arrived_ KVMESH_GUARDED_BY(mu_);
  bool finished_ KVMESH_GUARDED_BY(mu_) = false;
  Outcome outcome_;     // written by the thread only, read after the join
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvmesh
