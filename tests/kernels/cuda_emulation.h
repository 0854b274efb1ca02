// Host shims for the CUDA built-ins the append and block-copy kernels use, so that their device
// code (kernels/cuda/*.cuh) compiles as plain C++ and runs on the CPU: every thread of a grid is
// emulated, a warp's 32 lanes as 32 fibers on the calling thread that meet at __shfl_xor_sync. This
// checks the kernels' indexing, vector and element paths, packing and reductions on any machine; it
// does not check what only hardware can (the real memory model, timing). Include before the .cuh.
//
// The arithmetic is the same code (kernels/conversions.h takes its host branch: `/` and `*`
// compiled with -ffp-contract=off, which are the correctly rounded operations __fdiv_rn/__fmul_rn
// perform on the device).
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint4 {
  unsigned int x, y, z, w;
};
struct uint2 {
  unsigned int x, y;
};
struct float4 {
  float x, y, z, w;
};
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
  return {x, y, z, w};
}
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }

struct EmulatedIndex {
  unsigned int x = 0, y = 0, z = 0;
};
// The index of the lane that runs now (one thread runs every lane, so these are plain globals that
// the scheduler below sets before it resumes a lane).
inline EmulatedIndex threadIdx, blockIdx, gridDim, blockDim;

using std::max;
using std::min;

namespace kvmesh::testing {

// One warp as 32 user-space fibers (ucontext) run in turn on the calling thread. A lane runs until
// it reaches a shuffle (it publishes its value and yields) or returns; when every lane has yielded,
// the next round resumes them in order, each reading its partner's published value. Values are
// double-buffered by the parity of the shuffle, because a lane that resumes early publishes its
// next value before later lanes have read the previous one.
class EmulatedWarp {
 public:
  static constexpr std::size_t kStackBytes = 128 * 1024;

  EmulatedWarp() {
    for (Lane& lane : lanes_) lane.stack.reset(new char[kStackBytes]);  // not zeroed: cheap
  }

  // Runs body() on every lane of the warp until all return.
  template <typename Body>
  void Run(unsigned int warp_base, const Body& body) {
    body_ = [&body] { body(); };
    for (unsigned int i = 0; i < 32; ++i) {
      Lane& lane = lanes_[i];
      lane.done = false;
      lane.shuffles = 0;
      getcontext(&lane.context);
      lane.context.uc_stack.ss_sp = lane.stack.get();
      lane.context.uc_stack.ss_size = kStackBytes;
      lane.context.uc_link = &scheduler_;
      makecontext(&lane.context, &EmulatedWarp::Entry, 0);
    }
    bool running = true;
    while (running) {
      running = false;
      for (unsigned int i = 0; i < 32; ++i) {
        if (lanes_[i].done) continue;
        current_ = this;
        lane_ = i;
        threadIdx.x = warp_base + i;
        swapcontext(&scheduler_, &lanes_[i].context);
        running = running || !lanes_[i].done;
      }
    }
  }

  std::uint32_t Shuffle(std::uint32_t value, unsigned int lane_mask) {
    const unsigned int me = lane_;
    const int parity = lanes_[me].shuffles++ & 1;
    published_[parity][me] = value;
    swapcontext(&lanes_[me].context, &scheduler_);  // every lane publishes before anyone reads
    lane_ = me;
    return published_[parity][me ^ lane_mask];
  }

  static EmulatedWarp* current() { return current_; }

 private:
  struct Lane {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    bool done = false;
    unsigned int shuffles = 0;
  };

  static void Entry() {
    EmulatedWarp* warp = current_;
    warp->body_();
    warp->lanes_[warp->lane_].done = true;  // uc_link returns to the scheduler
  }

  static inline EmulatedWarp* current_ = nullptr;
  ucontext_t scheduler_;
  Lane lanes_[32];
  unsigned int lane_ = 0;
  std::uint32_t published_[2][32] = {};
  std::function<void()> body_;
};

// Runs kernel(params) as a grid of grid_x × grid_y blocks of `threads` threads (a multiple of 32).
// With `warp_lanes_concurrent`, the 32 lanes of each warp run as fibers that meet at every shuffle,
// as kernels that shuffle need; otherwise every thread runs in turn, start to end.
template <typename Params>
void EmulateGrid(void (*kernel)(Params), const Params& params, unsigned int grid_x,
                 unsigned int grid_y, unsigned int threads, bool warp_lanes_concurrent) {
  EmulatedWarp warp_fibers;
  gridDim = {grid_x, grid_y, 1};
  blockDim = {threads, 1, 1};
  for (unsigned int by = 0; by < grid_y; ++by) {
    for (unsigned int bx = 0; bx < grid_x; ++bx) {
      blockIdx = {bx, by, 0};
      for (unsigned int warp = 0; warp < threads / 32; ++warp) {
        if (warp_lanes_concurrent) {
          warp_fibers.Run(warp * 32, [&] { kernel(params); });
          continue;
        }
        for (unsigned int lane = 0; lane < 32; ++lane) {
          threadIdx = {warp * 32 + lane, 0, 0};
          kernel(params);
        }
      }
    }
  }
}

}  // namespace kvmesh::testing

// Every lane of the warp must call it the same number of times (as on the device with a full mask).
inline std::uint32_t __shfl_xor_sync(unsigned int /*mask*/, std::uint32_t value, int lane_mask) {
  return kvmesh::testing::EmulatedWarp::current()->Shuffle(value,
                                                           static_cast<unsigned int>(lane_mask));
}
