// The fibers and the block scheduler of the CUDA emulation (tests/kernels/cuda_emulation.h states
// the model). One block runs at a time on the calling thread; its threads are fibers resumed from a
// ready queue. On x86-64 a fiber switch is a few instructions (callee-saved registers and the stack
// pointer, below); elsewhere ucontext (a system call per switch: correct, slower). Under
// AddressSanitizer every switch is announced (__sanitizer_start/finish_switch_fiber).
#include "tests/kernels/cuda_emulation.h"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <vector>

#include "common/strings.h"

#if defined(__SANITIZE_ADDRESS__)
#define KVMESH_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVMESH_EMULATION_ASAN 1
#endif
#endif
#if defined(KVMESH_EMULATION_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
#define KVMESH_EMULATION_ASM_SWITCH 1
// kvmesh_emu_switch(from, to): saves the callee-saved registers, MXCSR and the x87 control word on
// the current stack, stores the stack pointer in *from, loads `to` and restores the same from
// there. kvmesh_emu_start: a new fiber's first "return address": calls r13(r12).
extern "C" void kvmesh_emu_switch(void** from, void* to);
extern "C" void kvmesh_emu_start();
asm(R"(
  .text
  .p2align 4
  .globl kvmesh_emu_switch
  .hidden kvmesh_emu_switch
  .type kvmesh_emu_switch, @function
kvmesh_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kvmesh_emu_switch, .-kvmesh_emu_switch

  .p2align 4
  .globl kvmesh_emu_start
  .hidden kvmesh_emu_start
  .type kvmesh_emu_start, @function
kvmesh_emu_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size kvmesh_emu_start, .-kvmesh_emu_start
)");
#else
#include <ucontext.h>
#endif

namespace kvmesh::testing::emulation {
namespace {

constexpr std::size_t kStackBytes = 256 * 1024;
constexpr int kLaneInBytes = 48;  // mma: a (16) + b (8) + c (16)
constexpr int kLaneOutBytes = 16;

enum class FiberState : std::uint8_t { kReady, kAtWarpOp, kAtBarrier, kDone };
enum class WarpOp : std::uint8_t {
  kNone,
  kShuffle,
  kLoadMatrix,
  kLoadMatrixTrans,
  kMmaBf16,
  kMmaFp16
};

const char* WarpOpName(WarpOp op) {
  switch (op) {
    case WarpOp::kNone: return "none";
    case WarpOp::kShuffle: return "__shfl_xor_sync";
    case WarpOp::kLoadMatrix: return "ldmatrix.x4";
    case WarpOp::kLoadMatrixTrans: return "ldmatrix.x4.trans";
    case WarpOp::kMmaBf16: return "mma.m16n8k16.bf16";
    case WarpOp::kMmaFp16: return "mma.m16n8k16.f16";
  }
  return "?";
}

struct PendingCopy {
  void* dst;
  const void* src;
  int bytes;
  bool valid;
};

struct Fiber {
  std::unique_ptr<char[]> stack;
  void* sp = nullptr;
#if !defined(KVMESH_EMULATION_ASM_SWITCH)
  ucontext_t context;
#endif
  void* fake_stack = nullptr;  // ASan's, while switched out
  FiberState state = FiberState::kReady;
  std::vector<PendingCopy> open_group;
  std::deque<std::vector<PendingCopy>> committed;
};

struct alignas(16) LaneIn {
  unsigned char bytes[kLaneInBytes];
};
struct alignas(16) LaneOut {
  unsigned char bytes[kLaneOutBytes];
};

struct Warp {
  WarpOp op = WarpOp::kNone;
  int arrived = 0;
  int live = 32;
  LaneIn in[32];
  LaneOut out[32];
  // Shuffles (the most frequent collective) skip the byte slots.
  std::uint32_t shuffle_value[32];
  std::uint32_t shuffle_mask[32];
  std::uint32_t shuffle_out[32];
};

class Block {
 public:
  Status Run(unsigned int threads, std::size_t shared_bytes, void (*body)(const void*),
             const void* arg);

  // From inside a fiber.
  void ArriveAtWarpOp(WarpOp op, const void* in, std::size_t in_bytes, void* out,
                      std::size_t out_bytes);
  std::uint32_t ArriveAtShuffle(std::uint32_t value, std::uint32_t lane_mask);
  void ArriveAtBarrier();
  void Fail(std::string message);  // never returns
  Fiber& current() { return fibers_[current_]; }
  [[nodiscard]] unsigned int current_index() const { return current_; }
  bool InShared(const void* p, std::size_t bytes) const {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return b >= shared_.get() && b + bytes <= shared_.get() + shared_bytes_;
  }
  std::uint8_t* shared() { return shared_.get(); }

 private:
  static void Entry(void* block);
#if !defined(KVMESH_EMULATION_ASM_SWITCH)
  static void UContextEntry() { Entry(g_block_for_ucontext); }
  static inline Block* g_block_for_ucontext = nullptr;
#endif
  void Resolve(Warp& w);
  // Leaves the current fiber (for good when `final_switch`) for the next ready one, or for the
  // scheduler when none is ready.
  void SwitchAway(bool final_switch);
  void Resume(unsigned int i);
  void FinishThread();
  void PushReady(unsigned int i) { ready_[(ready_head_ + ready_count_++) & ready_mask_] = i; }
  unsigned int PopReady() {
    const unsigned int i = ready_[ready_head_];
    ready_head_ = (ready_head_ + 1) & ready_mask_;
    --ready_count_;
    return i;
  }
  // After the warp op of the current lane's warp resolved: its waiting lanes become ready.
  void WakeWarp(Warp& w) {
    w.arrived = 0;
    const unsigned int base = current_ & ~31u;
    for (unsigned int l = 0; l < 32; ++l) {
      Fiber& f = fibers_[base + l];
      if (f.state == FiberState::kAtWarpOp) {
        f.state = FiberState::kReady;
        PushReady(base + l);
      }
    }
  }
  void CheckSameOp(Warp& w, WarpOp op) {
    if (w.arrived == 0) {
      w.op = op;
    } else if (w.op != op) {
      Fail(StrCat("lanes of warp ", current_ / 32, " at different collectives: ", WarpOpName(w.op),
                  " and ", WarpOpName(op), " (thread ", current_, ")"));
    }
  }

  std::vector<Fiber> fibers_;
  std::vector<Warp> warps_;
  std::vector<unsigned int> ready_;  // a ring (power of two >= threads_): each thread at most once
  unsigned int ready_mask_ = 0;
  unsigned int ready_head_ = 0;
  unsigned int ready_count_ = 0;
  bool from_scheduler_ = false;  // the switch in progress left the scheduler
  unsigned int threads_ = 0;
  unsigned int live_ = 0;
  unsigned int at_barrier_ = 0;
  unsigned int current_ = 0;
  std::unique_ptr<std::uint8_t[]> shared_;
  std::size_t shared_bytes_ = 0;
  void (*body_)(const void*) = nullptr;
  const void* arg_ = nullptr;
  std::string error_;
  void* scheduler_sp_ = nullptr;
#if !defined(KVMESH_EMULATION_ASM_SWITCH)
  ucontext_t scheduler_context_;
#endif
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_size_ = 0;
  void* scheduler_fake_stack_ = nullptr;
};

Block* g_block = nullptr;  // the block that runs now (one at a time)

Block& CurrentBlock() {
  if (g_block == nullptr) {
    std::fprintf(stderr,
                 "cuda emulation: a collective, barrier or cp.async outside EmulateKernel\n");
    std::abort();
  }
  return *g_block;
}

void StartSwitch(void** fake_stack_save, const void* bottom, std::size_t size) {
#if defined(KVMESH_EMULATION_ASAN)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
  (void)fake_stack_save;
  (void)bottom;
  (void)size;
#endif
}

void FinishSwitch(void* fake_stack, const void** old_bottom, std::size_t* old_size) {
#if defined(KVMESH_EMULATION_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
#else
  (void)fake_stack;
  (void)old_bottom;
  (void)old_size;
#endif
}

void Block::Entry(void* block) {
  auto* self = static_cast<Block*>(block);
  const void* bottom = nullptr;
  std::size_t size = 0;
  FinishSwitch(nullptr, &bottom, &size);
  if (self->from_scheduler_) {
    self->scheduler_stack_bottom_ = bottom;
    self->scheduler_stack_size_ = size;
  }
  self->body_(self->arg_);
  self->FinishThread();
}

void Block::FinishThread() {
  Fiber& f = current();
  if (!f.open_group.empty() || !f.committed.empty()) {
    Fail(StrCat("thread ", current_, " returned with cp.async copies in flight"));
  }
  f.state = FiberState::kDone;
  --live_;
  Warp& w = warps_[current_ / 32];
  --w.live;
  if (w.arrived > 0) {
    Fail(StrCat("thread ", current_, " returned while ", w.arrived, " lanes of warp ",
                current_ / 32, " wait at ", WarpOpName(w.op)));
  }
  if (at_barrier_ > 0) {
    Fail(StrCat("thread ", current_, " returned while ", at_barrier_,
                " threads wait at __syncthreads"));
  }
  SwitchAway(true);
}

void Block::SwitchAway(bool final_switch) {
  Fiber& f = current();
  void** fake_save = final_switch ? nullptr : &f.fake_stack;
  if (ready_count_ > 0 && error_.empty()) {
    const unsigned int next = PopReady();
    Fiber& to = fibers_[next];
    current_ = next;
    threadIdx = {next, 0, 0};
    from_scheduler_ = false;
    StartSwitch(fake_save, to.stack.get(), kStackBytes);
#if defined(KVMESH_EMULATION_ASM_SWITCH)
    kvmesh_emu_switch(&f.sp, to.sp);
#else
    swapcontext(&f.context, &to.context);
#endif
  } else {
    StartSwitch(fake_save, scheduler_stack_bottom_, scheduler_stack_size_);
#if defined(KVMESH_EMULATION_ASM_SWITCH)
    kvmesh_emu_switch(&f.sp, scheduler_sp_);
#else
    swapcontext(&f.context, &scheduler_context_);
#endif
  }
  FinishSwitch(f.fake_stack, nullptr, nullptr);
}

void Block::Resume(unsigned int i) {
  current_ = i;
  threadIdx = {i, 0, 0};
  Fiber& f = fibers_[i];
  from_scheduler_ = true;
  StartSwitch(&scheduler_fake_stack_, f.stack.get(), kStackBytes);
#if defined(KVMESH_EMULATION_ASM_SWITCH)
  kvmesh_emu_switch(&scheduler_sp_, f.sp);
#else
  swapcontext(&scheduler_context_, &f.context);
#endif
  FinishSwitch(scheduler_fake_stack_, nullptr, nullptr);
}

void Block::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
  current().state = FiberState::kDone;
  SwitchAway(true);  // error_ is set: to the scheduler, which stops
  std::abort();      // unreachable: the scheduler never resumes a failed block
}

Status Block::Run(unsigned int threads, std::size_t shared_bytes, void (*body)(const void*),
                  const void* arg) {
  if (threads == 0 || threads % 32 != 0) {
    return Status::InvalidArgument(StrCat("cuda emulation: ", threads, " threads per block"));
  }
  if (fibers_.size() < threads) {
    fibers_.resize(threads);
    for (Fiber& f : fibers_) {
      if (!f.stack) f.stack.reset(new char[kStackBytes]);  // not zeroed: cheap
    }
  }
  warps_.assign(threads / 32, Warp{});
  if (shared_bytes_ != shared_bytes || !shared_) {
    shared_.reset(new std::uint8_t[shared_bytes == 0 ? 1 : shared_bytes]);
    shared_bytes_ = shared_bytes;
  }
  std::memset(shared_.get(), 0xFF, shared_bytes_);
  threads_ = threads;
  live_ = threads;
  at_barrier_ = 0;
  body_ = body;
  arg_ = arg;
  error_.clear();
  unsigned int ring = 1;
  while (ring < threads) ring *= 2;
  ready_.assign(ring, 0);
  ready_mask_ = ring - 1;
  ready_head_ = 0;
  ready_count_ = 0;
  for (unsigned int i = 0; i < threads; ++i) {
    Fiber& f = fibers_[i];
    f.state = FiberState::kReady;
    f.open_group.clear();
    f.committed.clear();
    f.fake_stack = nullptr;
#if defined(KVMESH_EMULATION_ASAN)
    __asan_unpoison_memory_region(f.stack.get(), kStackBytes);
#endif
#if defined(KVMESH_EMULATION_ASM_SWITCH)
    // The frame kvmesh_emu_switch pops: x87 control word and MXCSR, r15, r14, r13 (the function),
    // r12 (its argument), rbx, rbp, then the return address kvmesh_emu_start, above which the stack
    // is 16-byte aligned (as a call expects).
    auto top = reinterpret_cast<std::uintptr_t>(f.stack.get() + kStackBytes) & ~std::uintptr_t{15};
    top -= 16;
    auto* slot = reinterpret_cast<std::uint64_t*>(top);
    slot[-1] = reinterpret_cast<std::uint64_t>(&kvmesh_emu_start);
    slot[-2] = 0;                                               // rbp
    slot[-3] = 0;                                               // rbx
    slot[-4] = reinterpret_cast<std::uint64_t>(this);           // r12
    slot[-5] = reinterpret_cast<std::uint64_t>(&Block::Entry);  // r13
    slot[-6] = 0;                                               // r14
    slot[-7] = 0;                                               // r15
    slot[-8] = 0x1F80;  // MXCSR, at 8(%rsp) once switched to
    slot[-9] = 0x037F;  // x87 control word, at 0(%rsp)
    f.sp = &slot[-9];
#else
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &scheduler_context_;
    makecontext(&f.context, reinterpret_cast<void (*)()>(&Block::UContextEntry), 0);
#endif
    PushReady(i);
  }
  g_block = this;
#if !defined(KVMESH_EMULATION_ASM_SWITCH)
  g_block_for_ucontext = this;
#endif
  while (error_.empty() && ready_count_ > 0) Resume(PopReady());
  g_block = nullptr;
  if (!error_.empty())
    return Status::Internal(
        StrCat("cuda emulation: block (", blockIdx.x, ", ", blockIdx.y, "): ", error_));
  if (live_ > 0) {
    std::string waiting;
    for (unsigned int i = 0; i < threads_; ++i) {
      if (fibers_[i].state == FiberState::kAtWarpOp) {
        waiting = StrCat(waiting, " thread ", i, " at ", WarpOpName(warps_[i / 32].op), ";");
      } else if (fibers_[i].state == FiberState::kAtBarrier) {
        waiting = StrCat(waiting, " thread ", i, " at __syncthreads;");
      }
      if (waiting.size() > 400) break;
    }
    return Status::Internal(
        StrCat("cuda emulation: block (", blockIdx.x, ", ", blockIdx.y, ") deadlocks:", waiting));
  }
  return Status::Ok();
}

std::uint32_t Block::ArriveAtShuffle(std::uint32_t value, std::uint32_t lane_mask) {
  const unsigned int lane = current_ & 31u;
  Warp& w = warps_[current_ / 32];
  CheckSameOp(w, WarpOp::kShuffle);
  w.shuffle_value[lane] = value;
  w.shuffle_mask[lane] = lane_mask;
  if (++w.arrived == w.live) {
    for (int l = 0; l < 32; ++l) w.shuffle_out[l] = w.shuffle_value[(l ^ w.shuffle_mask[l]) & 31];
    WakeWarp(w);
  } else {
    current().state = FiberState::kAtWarpOp;
    SwitchAway(false);
  }
  return w.shuffle_out[lane];
}

void Block::ArriveAtWarpOp(WarpOp op, const void* in, std::size_t in_bytes, void* out,
                           std::size_t out_bytes) {
  const unsigned int lane = current_ & 31u;
  Warp& w = warps_[current_ / 32];
  CheckSameOp(w, op);
  std::memcpy(w.in[lane].bytes, in, in_bytes);
  if (++w.arrived == w.live) {
    Resolve(w);
    WakeWarp(w);
  } else {
    current().state = FiberState::kAtWarpOp;
    SwitchAway(false);
  }
  std::memcpy(out, w.out[lane].bytes, out_bytes);
}

void Block::ArriveAtBarrier() {
  Fiber& f = current();
  if (++at_barrier_ == live_) {
    at_barrier_ = 0;
    for (unsigned int i = 0; i < threads_; ++i) {
      if (fibers_[i].state == FiberState::kAtBarrier) {
        fibers_[i].state = FiberState::kReady;
        PushReady(i);
      }
    }
    return;
  }
  f.state = FiberState::kAtBarrier;
  SwitchAway(false);
}

// bytes (4, 8 or 16; dst and src aligned to it) as 32-bit words: cheaper than memcpy/memset
// calls, which ASan intercepts.
void CopyWords(void* dst, const void* src, int bytes) {
  auto* d = static_cast<std::uint32_t*>(dst);
  const auto* s = static_cast<const std::uint32_t*>(src);
  for (int i = 0; i < bytes / 4; ++i) d[i] = s[i];
}
void FillWords(void* dst, std::uint32_t word, int bytes) {
  auto* d = static_cast<std::uint32_t*>(dst);
  for (int i = 0; i < bytes / 4; ++i) d[i] = word;
}

std::uint16_t Load16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float Widen(std::uint32_t word, int half, bool bf16) {
  const auto bits = static_cast<std::uint16_t>(half == 0 ? word & 0xFFFFu : word >> 16);
  return bf16 ? Bf16ToFloat(bits) : HalfToFloat(bits);
}

void Block::Resolve(Warp& w) {
  switch (w.op) {
    case WarpOp::kNone: return;
    case WarpOp::kShuffle: return;  // ArriveAtShuffle
    case WarpOp::kLoadMatrix:
    case WarpOp::kLoadMatrixTrans: {
      const std::uint8_t* rows[32];
      for (int l = 0; l < 32; ++l) std::memcpy(&rows[l], w.in[l].bytes, sizeof(rows[l]));
      const bool trans = w.op == WarpOp::kLoadMatrixTrans;
      for (int l = 0; l < 32; ++l) {
        std::uint32_t r[4];
        for (int m = 0; m < 4; ++m) {
          // Elements (row, col) of matrix m: 16 bits at rows[8m + row] + 2 col.
          const auto element = [&](int row, int col) {
            return std::uint32_t{Load16(rows[8 * m + row] + 2 * col)};
          };
          const int a = l / 4, b = 2 * (l % 4);
          r[m] = trans ? element(b, a) | (element(b + 1, a) << 16)
                       : element(a, b) | (element(a, b + 1) << 16);
        }
        std::memcpy(w.out[l].bytes, r, sizeof(r));
      }
      return;
    }
    case WarpOp::kMmaBf16:
    case WarpOp::kMmaFp16: {
      const bool bf16 = w.op == WarpOp::kMmaBf16;
      float a[16][16], b[16][8], c[16][8];
      for (int l = 0; l < 32; ++l) {
        std::uint32_t ra[4], rb[2];
        float rc[4];
        std::memcpy(ra, w.in[l].bytes, 16);
        std::memcpy(rb, w.in[l].bytes + 16, 8);
        std::memcpy(rc, w.in[l].bytes + 24, 16);
        const int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; ++h) {
          a[g][2 * t + h] = Widen(ra[0], h, bf16);
          a[g + 8][2 * t + h] = Widen(ra[1], h, bf16);
          a[g][2 * t + 8 + h] = Widen(ra[2], h, bf16);
          a[g + 8][2 * t + 8 + h] = Widen(ra[3], h, bf16);
          b[2 * t + h][g] = Widen(rb[0], h, bf16);
          b[2 * t + 8 + h][g] = Widen(rb[1], h, bf16);
          c[g][2 * t + h] = rc[h];
          c[g + 8][2 * t + h] = rc[2 + h];
        }
      }
      for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        float d[4];
        for (int i = 0; i < 4; ++i) {
          const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
          float acc = 0.0f;
          for (int k = 0; k < 16; ++k) acc += a[row][k] * b[k][col];
          d[i] = c[row][col] + acc;
        }
        std::memcpy(w.out[l].bytes, d, sizeof(d));
      }
      return;
    }
  }
}

Block& TheBlock() {
  static Block* block = new Block();  // reused by every launch (fiber stacks are kept)
  return *block;
}

}  // namespace

Status RunBlock(unsigned int threads, std::size_t shared_bytes, void (*body)(const void*),
                const void* arg) {
  return TheBlock().Run(threads, shared_bytes, body, arg);
}

std::uint32_t ShuffleXor(std::uint32_t value, unsigned int lane_mask) {
  return CurrentBlock().ArriveAtShuffle(value, lane_mask);
}

void SyncThreads() { CurrentBlock().ArriveAtBarrier(); }

std::uint8_t* DynamicShared() { return CurrentBlock().shared(); }

void CopyAsync(void* dst, const void* src, int bytes, bool valid) {
  Block& b = CurrentBlock();
  if (!b.InShared(dst, bytes) || reinterpret_cast<std::uintptr_t>(dst) % bytes != 0) {
    b.Fail(StrCat("thread ", b.current_index(), ": cp.async of ", bytes,
                  " bytes to a destination outside shared memory or misaligned"));
  }
  if (valid && reinterpret_cast<std::uintptr_t>(src) % bytes != 0) {
    b.Fail(StrCat("thread ", b.current_index(), ": cp.async of ", bytes,
                  " bytes from a misaligned source"));
  }
  FillWords(dst, 0xFFFFFFFFu, bytes);  // undefined until the wait
  b.current().open_group.push_back(PendingCopy{dst, src, bytes, valid});
}

void CommitAsyncCopies() {
  Fiber& f = CurrentBlock().current();
  f.committed.push_back(std::move(f.open_group));
  f.open_group.clear();
}

void WaitAsyncCopies(int pending) {
  Fiber& f = CurrentBlock().current();
  while (f.committed.size() > static_cast<std::size_t>(pending)) {
    for (const PendingCopy& c : f.committed.front()) {
      if (c.valid) {
        CopyWords(c.dst, c.src, c.bytes);
      } else {
        FillWords(c.dst, 0, c.bytes);
      }
    }
    f.committed.pop_front();
  }
}

void LoadMatrix(std::uint32_t (&r)[4], const void* row_address, bool transposed) {
  Block& b = CurrentBlock();
  if (!b.InShared(row_address, 16) || reinterpret_cast<std::uintptr_t>(row_address) % 16 != 0) {
    b.Fail(StrCat("thread ", b.current_index(),
                  ": ldmatrix row address outside shared memory or not 16-byte aligned"));
  }
  b.ArriveAtWarpOp(transposed ? WarpOp::kLoadMatrixTrans : WarpOp::kLoadMatrix, &row_address,
                   sizeof(row_address), r, sizeof(r));
}

void Mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1,
         bool bf16) {
  unsigned char in[40];
  const std::uint32_t b[2] = {b0, b1};
  std::memcpy(in, a, 16);
  std::memcpy(in + 16, b, 8);
  std::memcpy(in + 24, c, 16);
  CurrentBlock().ArriveAtWarpOp(bf16 ? WarpOp::kMmaBf16 : WarpOp::kMmaFp16, in, sizeof(in), c,
                                sizeof(c));
}

}  // namespace kvmesh::testing::emulation
