#include "node/synthetic_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "common/aligned_buffer.h"
#include "common/strings.h"
#include "common/thread_pool.h"
#include "kernels/backend.h"
#include "node/attached_pools.h"
#include "node/synthetic_kv.h"

namespace kvmesh {
namespace {

using Steady = std::chrono::steady_clock;

// What a worker needs to know of one pool.
struct PoolInfo {
  int index = 0;
  int rank = 0;
  std::int32_t window = 0;
  std::int32_t kv_heads = 0;  // per rank
  std::int32_t head_dim = 0;
  KvDtype dtype = KvDtype::kBF16;
  float pool_scale = 1.0f;
  int device = -1;                           // local CUDA device of its memory, -1 for host memory
  std::vector<std::int32_t> layers;          // global ids of the local layers
  std::vector<std::int32_t> checked_layers;  // local layers whose decode is checked
};

Result<std::vector<PoolInfo>> DescribePools(const AttachedPools& attached, bool all_layers) {
  std::vector<PoolInfo> out;
  for (const rpc::PoolDescriptor& d : attached.description().pools()) {
    const KvPoolView& v = attached.view(static_cast<int>(out.size()));
    const PagedTensorLayout& data = v.layout.data();
    if (data.kv_factor != 2) {
      return Status::NotSupported(
          StrCat("pool ", d.key(), " has kv_factor ", data.kv_factor,
                 ": the synthetic engine checks K/V pools only (not MLA latents)"));
    }
    PoolInfo p;
    p.index = d.pool();
    p.rank = d.rank();
    p.window = d.window();
    p.kv_heads = data.num_heads;
    p.head_dim = data.inner;
    p.dtype = v.layout.dtype;
    p.pool_scale = v.pool_scale;
    p.device = attached.device(static_cast<int>(out.size()));
    p.layers.assign(d.layers().begin(), d.layers().end());
    const auto n = static_cast<std::int32_t>(p.layers.size());
    if (all_layers) {
      for (std::int32_t l = 0; l < n; ++l) p.checked_layers.push_back(l);
    } else {
      for (std::int32_t l : {0, n / 2, n - 1}) {
        if (p.checked_layers.empty() || p.checked_layers.back() != l) p.checked_layers.push_back(l);
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// A worker's kernel arguments on one backend. When the backend addresses host memory (CPU) the
// host arrays are given to the kernels as they are — no copy, no allocation. Otherwise (CUDA) each
// argument has a slot, a buffer of the backend allocated on first use and grown (doubling), never
// per call: inputs are uploaded into it (Upload has completed when it returns, so the host array
// may be rewritten at once; the copy is ordered after the kernels already enqueued, so a kernel
// still reading the slot's previous contents is not overwritten), outputs are written there and
// fetched back (Download + Synchronize).
class KernelArgs {
 public:
  enum Slot : int { kCuTokens, kStartPos, kBlockTable, kKvLens, kK, kV, kQ, kOut, kNumSlots };

  explicit KernelArgs(KernelBackend* backend) : backend_(backend) {}

  [[nodiscard]] KernelBackend& backend() const { return *backend_; }
  [[nodiscard]] bool host() const { return backend_->host_addressable(); }

  // `count` elements of `data`, where the backend's kernels can read them.
  template <typename T>
  Result<const T*> In(Slot slot, const T* data, std::size_t count) {
    if (host()) return data;
    const std::size_t bytes = count * sizeof(T);
    KVMESH_ASSIGN_OR_RETURN(void* dst, Reserve(slot, bytes));
    KVMESH_RETURN_IF_ERROR(backend_->Upload(dst, data, bytes));
    return static_cast<const T*>(dst);
  }
  // Where the kernels write `count` elements that Fetch brings to `data`.
  template <typename T>
  Result<T*> Out(Slot slot, T* data, std::size_t count) {
    if (host()) return data;
    KVMESH_ASSIGN_OR_RETURN(void* dst, Reserve(slot, count * sizeof(T)));
    return static_cast<T*>(dst);
  }
  // Brings what the kernels wrote to Out(slot, data, count) to `data`, and waits for it.
  template <typename T>
  Status Fetch(Slot slot, T* data, std::size_t count) {
    if (host()) return Status::Ok();
    KVMESH_RETURN_IF_ERROR(backend_->Download(data, buffers_[slot].data(), count * sizeof(T)));
    return backend_->Synchronize();
  }
  // A workspace of `bytes` in the backend's memory (16-byte aligned: 64 on the host, 256
  // cudaMalloc).
  Result<Workspace> WorkspaceOf(std::size_t bytes) {
    if (workspace_.size() < bytes) {
      const std::size_t grown = Grown(workspace_.size(), bytes);
      workspace_ = BackendBuffer();  // the old one goes first
      KVMESH_ASSIGN_OR_RETURN(workspace_, backend_->Allocate(grown));
    }
    return Workspace{workspace_.data(), bytes};
  }

 private:
  static std::size_t Grown(std::size_t have, std::size_t need) {
    return std::max<std::size_t>({need, 2 * have, 256});
  }
  Result<void*> Reserve(Slot slot, std::size_t bytes) {
    BackendBuffer& b = buffers_[slot];
    if (b.size() < bytes) {
      // Nothing to keep: a slot's contents are rewritten by every use. Kernels still reading the
      // old buffer finish first (cudaFree waits for the device).
      const std::size_t grown = Grown(b.size(), bytes);
      b = BackendBuffer();
      KVMESH_ASSIGN_OR_RETURN(b, backend_->Allocate(grown));
    }
    return b.data();
  }

  KernelBackend* backend_;  // not owned
  BackendBuffer buffers_[kNumSlots];
  BackendBuffer workspace_;
};

// What the workers of one run share to wait for room in the pool (SyntheticEngineOptions::
// admit_wait): how many Admit calls are in flight, how many admitted requests they hold, and how
// many they have released.
class PoolRoom {
 public:
  void Asking() {
    std::lock_guard<std::mutex> lock(mu_);
    ++asking_;
  }
  // The answer to Asking's Admit came (admitted or not).
  void Answered(bool admitted) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --asking_;
      if (admitted) ++holding_;
    }
    cv_.notify_all();
  }
  void Released() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --holding_;
      ++releases_;
    }
    cv_.notify_all();
  }
  std::uint64_t releases() const {
    std::lock_guard<std::mutex> lock(mu_);
    return releases_;
  }
  // For a worker (holding nothing, asking nothing) whose Admit was refused for room after `seen`
  // releases: true once another worker released a request since (there may be room now), at once
  // if one did already; false once no worker holds a request or waits for an Admit that may give
  // it one (waiting cannot make room), or when `deadline` passed first. An Admit in flight is
  // waited for: the node may have admitted it before this refusal.
  bool WaitForRelease(std::uint64_t seen, Steady::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline,
                   [&] { return releases_ != seen || (holding_ == 0 && asking_ == 0); });
    return releases_ != seen;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t asking_ = 0;
  std::int64_t holding_ = 0;
  std::uint64_t releases_ = 0;
};

class Worker {
 public:
  Worker(const SyntheticEngineOptions& options, const AttachedPools& attached,
         const std::vector<PoolInfo>& pools, std::unique_ptr<NodeClient> client, PoolRoom* room)
      : options_(options),
        attached_(attached),
        pools_(pools),
        client_(std::move(client)),
        room_(room),
        kernel_pool_(options.kernel_threads > 1 ? options.kernel_threads : 0),
        cpu_backend_(MakeCpuBackend(&kernel_pool_)) {
    const rpc::AttachResponse& a = attached.description();
    tokens_per_block_ = a.tokens_per_block();
    q_heads_per_rank_ = a.num_attention_heads() / std::max(1, a.tensor_parallel_size());
    // The seeds' namespace: the order-free one when the node says it (an HND and an NHD node
    // then expect the same values of a prompt's blocks: a handoff converts between them).
    const std::string& ns = a.order_free_namespace_digest().empty()
                                ? a.namespace_digest()
                                : a.order_free_namespace_digest();
    namespace_digest_ = ContentId{};
    std::memcpy(namespace_digest_.bytes.data(), ns.data(),
                std::min(ns.size(), namespace_digest_.bytes.size()));
  }

  // The backends of the pools: the CPU backend for host pools, one CUDA backend per device of the
  // device pools (kNotSupported in a build without CUDA, kCudaError without the device).
  Status MakeBackends() {
    for (const PoolInfo& pool : pools_) {
      if (args_.contains(pool.device)) continue;
      if (pool.device < 0) {
        args_.emplace(pool.device, std::make_unique<KernelArgs>(cpu_backend_.get()));
        continue;
      }
      KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<KernelBackend> cuda, MakeCudaBackend(pool.device));
      args_.emplace(pool.device, std::make_unique<KernelArgs>(cuda.get()));
      cuda_backends_.push_back(std::move(cuda));
    }
    return Status::Ok();
  }

  // One request; adds to `s`. A failure of the node or of a check is recorded, not returned.
  void Run(std::uint64_t index, const TraceRequest& request, SyntheticWorkloadStats& s);
  // Tells the node how a request went (`s` holds that request's counts only).
  void Report(const SyntheticWorkloadStats& s);

 private:
  struct Sequence {
    std::uint64_t engine_id = 0;
    std::uint64_t seed = 0;
    std::vector<BlockTable> tables;
    std::unique_ptr<PositionSeeds> seeds;
  };

  Status Prefill(Sequence& seq, std::int64_t begin, std::int64_t end);
  // Layer-major: model layer by model layer, options_.hooks.layers_written after each group.
  Status PrefillLayerMajor(Sequence& seq, std::int64_t begin, std::int64_t end);
  // Positions [begin, end) of the pool's local layers [layer_begin, layer_end).
  Status WriteRange(const Sequence& seq, const PoolInfo& pool, std::int64_t begin, std::int64_t end,
                    std::size_t layer_begin = 0, std::size_t layer_end = SIZE_MAX);
  Status SynchronizeDevices();
  KernelArgs& ArgsOf(const PoolInfo& pool) { return *args_.at(pool.device); }
  Status DecodeStep(Sequence& seq, std::int32_t step, SyntheticWorkloadStats& s);
  void Fail(SyntheticWorkloadStats& s, const std::string& what) {
    if (s.first_error.empty()) s.first_error = what;
  }

  const SyntheticEngineOptions& options_;
  const AttachedPools& attached_;
  const std::vector<PoolInfo>& pools_;
  std::unique_ptr<NodeClient> client_;
  PoolRoom* room_;  // shared by the run's workers
  ThreadPool kernel_pool_;
  std::unique_ptr<KernelBackend> cpu_backend_;
  std::vector<std::unique_ptr<KernelBackend>> cuda_backends_;  // one per device of a device pool
  // Per device (-1: host, the CPU backend): the arguments' slots. Declared after the backends, so
  // destroyed before them (cudaFree waits for the kernels still using a buffer).
  std::map<int, std::unique_ptr<KernelArgs>> args_;
  std::int32_t tokens_per_block_ = 0;
  std::int32_t q_heads_per_rank_ = 0;
  ContentId namespace_digest_;
  std::vector<float> k_, v_, q_, out_;
  AlignedBuffer workspace_;
};

Status Worker::WriteRange(const Sequence& seq, const PoolInfo& pool, std::int64_t begin,
                          std::int64_t end, std::size_t layer_begin, std::size_t layer_end) {
  const std::vector<std::int32_t>& table =
      seq.tables[static_cast<std::size_t>(pool.index)].block_ids;
  const auto d = static_cast<std::size_t>(pool.head_dim);
  const auto heads = static_cast<std::size_t>(pool.kv_heads);
  // Runs of positions whose blocks the pool holds (a window pool may hold none for old ones).
  std::int64_t run_begin = begin;
  while (run_begin < end) {
    if (table[static_cast<std::size_t>(run_begin / tokens_per_block_)] < 0) {
      ++run_begin;
      continue;
    }
    std::int64_t run_end = run_begin;
    while (run_end < end && table[static_cast<std::size_t>(run_end / tokens_per_block_)] >= 0) {
      ++run_end;
    }
    const auto rows = static_cast<std::size_t>(run_end - run_begin);
    k_.resize(rows * heads * d);
    v_.resize(rows * heads * d);
    const std::int32_t cu[2] = {0, static_cast<std::int32_t>(rows)};
    const auto start = static_cast<std::int32_t>(run_begin);
    KernelArgs& args = ArgsOf(pool);
    KVMESH_ASSIGN_OR_RETURN(const std::int32_t* cu_arg, args.In(KernelArgs::kCuTokens, cu, 2));
    KVMESH_ASSIGN_OR_RETURN(const std::int32_t* start_arg,
                            args.In(KernelArgs::kStartPos, &start, 1));
    KVMESH_ASSIGN_OR_RETURN(const std::int32_t* table_arg,
                            args.In(KernelArgs::kBlockTable, table.data(), table.size()));
    for (std::size_t l = layer_begin; l < std::min(layer_end, pool.layers.size()); ++l) {
      const std::int32_t layer = pool.layers[l];
      for (std::size_t r = 0; r < rows; ++r) {
        const std::uint64_t seed = seq.seeds->at(run_begin + static_cast<std::int64_t>(r));
        for (std::size_t h = 0; h < heads; ++h) {
          const auto global_head = static_cast<std::int32_t>(pool.rank * pool.kv_heads + h);
          const std::size_t off = (r * heads + h) * d;
          SyntheticKvHead(seed, layer, 0, global_head, std::span(k_.data() + off, d));
          SyntheticKvHead(seed, layer, 1, global_head, std::span(v_.data() + off, d));
        }
      }
      AppendKvArgs a;
      a.pool = attached_.view(pool.index);
      a.layer = static_cast<std::int32_t>(l);
      a.num_seqs = 1;
      a.cu_tokens = cu_arg;
      a.start_pos = start_arg;
      a.block_table = table_arg;
      a.max_blocks_per_seq = static_cast<std::int32_t>(table.size());
      a.act_dtype = ActDtype::kFP32;
      KVMESH_ASSIGN_OR_RETURN(a.k, args.In(KernelArgs::kK, k_.data(), k_.size()));
      KVMESH_ASSIGN_OR_RETURN(a.v, args.In(KernelArgs::kV, v_.data(), v_.size()));
      a.total_tokens = cu[1];
      KVMESH_RETURN_IF_ERROR(
          args.backend().AppendKv(a).WithContext(StrCat("append pool ", pool.index)));
    }
    run_begin = run_end;
  }
  return Status::Ok();
}

Status Worker::SynchronizeDevices() {
  for (const auto& [device, args] : args_) {
    if (!args->host()) {
      KVMESH_RETURN_IF_ERROR(
          args->backend().Synchronize().WithContext(StrCat("append on CUDA device ", device)));
    }
  }
  return Status::Ok();
}

Status Worker::Prefill(Sequence& seq, std::int64_t begin, std::int64_t end) {
  for (const PoolInfo& pool : pools_) KVMESH_RETURN_IF_ERROR(WriteRange(seq, pool, begin, end));
  // The blocks must hold their bytes before the node is told (StoreFullBlocks publishes them to
  // every engine): wait for the device backends' appends (CPU appends are done when they return).
  return SynchronizeDevices();
}

Status Worker::PrefillLayerMajor(Sequence& seq, std::int64_t begin, std::int64_t end) {
  const std::int32_t model_layers = attached_.description().num_layers();
  const std::int32_t group = std::max(1, options_.layer_group);
  for (std::int32_t g = 0; g < model_layers; ++g) {
    for (const PoolInfo& pool : pools_) {
      for (std::size_t l = 0; l < pool.layers.size(); ++l) {
        if (pool.layers[l] == g)
          KVMESH_RETURN_IF_ERROR(WriteRange(seq, pool, begin, end, l, l + 1));
      }
    }
    if ((g + 1) % group != 0 && g + 1 != model_layers) continue;
    // Announced layers must hold their bytes (the node sends them from the pool at once).
    KVMESH_RETURN_IF_ERROR(SynchronizeDevices());
    if (options_.hooks.layers_written)
      options_.hooks.layers_written(*client_, seq.engine_id, g + 1);
  }
  return Status::Ok();
}

Status Worker::DecodeStep(Sequence& seq, std::int32_t step, SyntheticWorkloadStats& s) {
  const Token t = static_cast<Token>((seq.seed + static_cast<std::uint64_t>(step) * 7919) %
                                     static_cast<std::uint64_t>(kTraceVocabSize));
  KVMESH_ASSIGN_OR_RETURN(const AppendResult appended,
                          client_->AppendTokens(seq.engine_id, {&t, 1}));
  for (std::size_t p = 0; p < seq.tables.size() && p < appended.new_blocks.size(); ++p) {
    std::vector<std::int32_t>& ids = seq.tables[p].block_ids;
    ids.insert(ids.end(), appended.new_blocks[p].begin(), appended.new_blocks[p].end());
    for (const std::int64_t pos : appended.released_positions[p]) {
      if (pos >= 0 && pos < static_cast<std::int64_t>(ids.size()))
        ids[static_cast<std::size_t>(pos)] = -1;
    }
  }
  const std::int64_t position = seq.seeds->size();
  seq.seeds->Append({&t, 1});
  KVMESH_RETURN_IF_ERROR(Prefill(seq, position, position + 1));
  ++s.decode_tokens;
  const std::int64_t kv_len = position + 1;
  const std::span<const std::uint64_t> seeds =
      seq.seeds->all().first(static_cast<std::size_t>(kv_len));
  for (const PoolInfo& pool : pools_) {
    const auto d = static_cast<std::size_t>(pool.head_dim);
    const std::vector<std::int32_t>& table =
        seq.tables[static_cast<std::size_t>(pool.index)].block_ids;
    const std::int32_t group = q_heads_per_rank_ / pool.kv_heads;
    const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(pool.head_dim));
    q_.resize(static_cast<std::size_t>(q_heads_per_rank_) * d);
    out_.resize(q_.size());
    KernelArgs& args = ArgsOf(pool);
    const auto len32 = static_cast<std::int32_t>(kv_len);
    KVMESH_ASSIGN_OR_RETURN(const std::int32_t* kv_lens_arg,
                            args.In(KernelArgs::kKvLens, &len32, 1));
    KVMESH_ASSIGN_OR_RETURN(const std::int32_t* table_arg,
                            args.In(KernelArgs::kBlockTable, table.data(), table.size()));
    KVMESH_ASSIGN_OR_RETURN(float* out_arg, args.Out(KernelArgs::kOut, out_.data(), out_.size()));
    for (const std::int32_t l : pool.checked_layers) {
      const std::int32_t layer = pool.layers[static_cast<std::size_t>(l)];
      for (std::int32_t h = 0; h < q_heads_per_rank_; ++h) {
        SyntheticQueryHead(seq.seed, step, layer, pool.rank * q_heads_per_rank_ + h,
                           std::span(q_.data() + static_cast<std::size_t>(h) * d, d));
      }
      DecodeAttentionArgs a;
      a.pool = attached_.view(pool.index);
      a.layer = l;
      a.num_seqs = 1;
      a.q_len = 1;
      a.num_q_heads = q_heads_per_rank_;
      a.kv_lens = kv_lens_arg;
      a.block_table = table_arg;
      a.max_blocks_per_seq = static_cast<std::int32_t>(table.size());
      a.q_dtype = ActDtype::kFP32;
      KVMESH_ASSIGN_OR_RETURN(a.q, args.In(KernelArgs::kQ, q_.data(), q_.size()));
      a.softmax_scale = softmax_scale;
      a.sliding_window = pool.window;
      a.out_dtype = ActDtype::kFP32;
      a.out = out_arg;
      KVMESH_RETURN_IF_ERROR(CanImplementDecodeAttention(a));
      const std::size_t ws = DecodeAttentionWorkspaceBytes(a);
      Workspace workspace{};
      if (args.host()) {
        if (workspace_.size() < ws) workspace_ = AlignedBuffer::Allocate(ws, 64).value();
        workspace = Workspace{workspace_.data(), ws};
      } else {
        KVMESH_ASSIGN_OR_RETURN(workspace, args.WorkspaceOf(ws));
      }
      KVMESH_RETURN_IF_ERROR(args.backend().DecodeAttention(a, workspace));
      // The output on the host (a no-op on the CPU backend, which wrote out_ itself).
      KVMESH_RETURN_IF_ERROR(args.Fetch(KernelArgs::kOut, out_.data(), out_.size()));
      // One reference per KV head, for its group of query heads (contiguous in q and out).
      std::vector<double> ref(static_cast<std::size_t>(group) * d);
      for (std::int32_t kvh = 0; kvh < pool.kv_heads; ++kvh) {
        DenseAttentionQuery rq;
        rq.seeds = seeds;
        rq.layer = layer;
        rq.kv_head = pool.rank * pool.kv_heads + kvh;
        rq.head_dim = pool.head_dim;
        rq.window = pool.window;
        rq.dtype = pool.dtype;
        rq.pool_scale = pool.pool_scale;
        rq.softmax_scale = static_cast<double>(softmax_scale);
        const std::size_t first = static_cast<std::size_t>(kvh) * group * d;
        DenseAttention(rq, std::span<const float>(q_.data() + first, ref.size()), ref);
        for (std::int32_t g = 0; g < group; ++g) {
          double worst = 0;
          ++s.checks;
          const std::size_t off = static_cast<std::size_t>(g) * d;
          const bool ok = AttentionMatches(std::span<const float>(out_.data() + first + off, d),
                                           std::span<const double>(ref.data() + off, d), &worst);
          s.worst_error = std::max(s.worst_error, worst);
          if (!ok) {
            ++s.check_failures;
            Fail(s, StrCat("check failed: request ", seq.engine_id, " pool ", pool.index, " layer ",
                           layer, " head ", kvh * group + g, " at length ", kv_len, ": max error ",
                           worst));
          }
        }
      }
    }
  }
  return Status::Ok();
}

void Worker::Run(std::uint64_t index, const TraceRequest& request, SyntheticWorkloadStats& s) {
  const std::vector<Token> tokens = TraceTokens(request, options_.block_tokens);
  ++s.requests;
  if (tokens.empty()) return;
  Sequence seq;
  seq.engine_id = index + 1;
  seq.seed = index * 0x9e3779b97f4a7c15ull + 1;
  SequenceOptions so;
  so.domain.salt = options_.salt;
  so.domain.lora_id = options_.lora_id;
  // Refused for room while other workers hold requests: wait for one of them to release, as a
  // scheduler keeps a request queued (SyntheticEngineOptions::admit_wait).
  const auto asked = Steady::now();
  bool waited = false;
  Result<AdmitReply> admitted = Status::Internal("not admitted");
  while (true) {
    const std::uint64_t seen = room_->releases();
    room_->Asking();
    admitted = client_->Admit(seq.engine_id, tokens, so);
    room_->Answered(admitted.ok());
    if (admitted.ok() || admitted.status().code() != StatusCode::kResourceExhausted) break;
    if (!room_->WaitForRelease(seen, asked + options_.admit_wait)) break;
    waited = true;
  }
  if (!admitted.ok()) {
    ++s.failed_requests;
    Fail(s, StrCat("admit of request ", seq.engine_id, ": ", admitted.status().ToString()));
    return;
  }
  if (waited) {
    ++s.admit_waits;
    s.admit_wait_seconds += std::chrono::duration<double>(Steady::now() - asked).count();
  }
  s.prompt_tokens += static_cast<std::int64_t>(tokens.size());
  s.reused_tokens += admitted->result.reused_tokens;
  s.input_blocks +=
      (static_cast<std::int64_t>(tokens.size()) + tokens_per_block_ - 1) / tokens_per_block_;
  s.pool_hit_blocks += admitted->pool_hit_blocks;
  s.host_hit_blocks += admitted->host_hit_blocks;
  s.disk_hit_blocks += admitted->disk_hit_blocks;
  s.remote_hit_blocks += admitted->remote_hit_blocks;
  seq.tables = std::move(admitted->result.tables);
  seq.seeds = std::make_unique<PositionSeeds>(namespace_digest_, so.domain, tokens_per_block_);
  seq.seeds->Append(tokens);
  const std::int64_t begin = admitted->result.reused_tokens;
  if (options_.hooks.admitted) options_.hooks.admitted(*client_, seq.engine_id, tokens);
  const auto end = static_cast<std::int64_t>(tokens.size());
  Status st = options_.layer_major ? PrefillLayerMajor(seq, begin, end) : Prefill(seq, begin, end);
  s.computed_tokens += static_cast<std::int64_t>(tokens.size()) - begin;
  if (st.ok()) st = client_->StoreFullBlocks(seq.engine_id).status();
  if (st.ok() && options_.hooks.prefilled) options_.hooks.prefilled(*client_, seq.engine_id);
  for (std::int32_t step = 0; st.ok() && step < options_.decode_tokens; ++step) {
    st = DecodeStep(seq, step, s);
  }
  if (st.ok()) st = client_->StoreFullBlocks(seq.engine_id).status();
  const Status released = client_->Release(seq.engine_id);
  room_->Released();
  if (st.ok()) st = released;
  if (!st.ok()) {
    ++s.failed_requests;
    Fail(s, StrCat("request ", seq.engine_id, ": ", st.ToString()));
  }
}

void Worker::Report(const SyntheticWorkloadStats& s) {
  if (!options_.report_to_node || !client_->connected()) return;
  rpc::Request req;
  rpc::EngineReportRequest* r = req.mutable_engine_report();
  r->set_requests(s.requests);
  r->set_failed_requests(s.failed_requests);
  r->set_checks(s.checks);
  r->set_check_failures(s.check_failures);
  (void)client_->Call(std::move(req));  // best effort: the counts are the engine's own
}

}  // namespace

void MergeWorkloadStats(const SyntheticWorkloadStats& a, SyntheticWorkloadStats& into) {
  into.requests += a.requests;
  into.failed_requests += a.failed_requests;
  into.admit_waits += a.admit_waits;
  into.admit_wait_seconds += a.admit_wait_seconds;
  into.prompt_tokens += a.prompt_tokens;
  into.reused_tokens += a.reused_tokens;
  into.computed_tokens += a.computed_tokens;
  into.input_blocks += a.input_blocks;
  into.pool_hit_blocks += a.pool_hit_blocks;
  into.host_hit_blocks += a.host_hit_blocks;
  into.disk_hit_blocks += a.disk_hit_blocks;
  into.remote_hit_blocks += a.remote_hit_blocks;
  into.decode_tokens += a.decode_tokens;
  into.checks += a.checks;
  into.check_failures += a.check_failures;
  into.worst_error = std::max(into.worst_error, a.worst_error);
  if (into.first_error.empty()) into.first_error = a.first_error;
}

std::vector<Token> TraceTokens(const TraceRequest& request, std::int32_t block_tokens) {
  std::vector<Token> tokens(request.hash_ids.size() * static_cast<std::size_t>(block_tokens));
  for (std::size_t i = 0; i < request.hash_ids.size(); ++i) {
    BlockTokens(request.hash_ids[i] ^ kSyntheticTokensVersion,
                std::span(tokens.data() + i * static_cast<std::size_t>(block_tokens),
                          static_cast<std::size_t>(block_tokens)));
  }
  tokens.resize(std::min(
      tokens.size(), static_cast<std::size_t>(std::max<std::int64_t>(0, request.input_length))));
  return tokens;
}

Result<SyntheticWorkloadStats> RunSyntheticWorkload(const SyntheticEngineOptions& options,
                                                    std::span<const TraceRequest> requests) {
  if (options.concurrency < 1) {
    return Status::InvalidArgument(StrCat("concurrency ", options.concurrency, " is below 1"));
  }
  if (options.block_tokens < 1) {
    return Status::InvalidArgument(StrCat("block_tokens ", options.block_tokens, " is below 1"));
  }
  if (options.admit_wait.count() < 0) {
    return Status::InvalidArgument(
        StrCat("admit_wait ", options.admit_wait.count(), " ms is below 0"));
  }
  NodeClientOptions co = options.client;
  co.client_name = co.client_name.empty() ? "synthetic-engine" : co.client_name;
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> control, NodeClient::Connect(co));
  std::vector<int> fds;
  KVMESH_ASSIGN_OR_RETURN(const rpc::AttachResponse attach, control->Attach(&fds));
  KVMESH_ASSIGN_OR_RETURN(const AttachedPools attached, AttachedPools::Map(attach, std::move(fds)));
  KVMESH_ASSIGN_OR_RETURN(const std::vector<PoolInfo> pools,
                          DescribePools(attached, options.check_all_layers));
  PoolRoom room;
  std::vector<std::unique_ptr<Worker>> workers;
  for (std::int32_t i = 0; i < options.concurrency; ++i) {
    KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, NodeClient::Connect(co));
    workers.push_back(std::make_unique<Worker>(options, attached, pools, std::move(c), &room));
    KVMESH_RETURN_IF_ERROR(workers.back()->MakeBackends());
  }
  SyntheticWorkloadStats total;
  std::mutex mu;
  std::atomic<std::size_t> next{0};
  std::int64_t done = 0;
  const auto start = Steady::now();
  std::vector<std::thread> threads;
  threads.reserve(workers.size());
  for (auto& w : workers) {
    threads.emplace_back([&, worker = w.get()] {
      for (std::size_t i = next.fetch_add(1); i < requests.size(); i = next.fetch_add(1)) {
        SyntheticWorkloadStats s;
        worker->Run(i, requests[i], s);
        worker->Report(s);
        std::lock_guard<std::mutex> lock(mu);
        MergeWorkloadStats(s, total);
        ++done;
        if (options.progress) options.progress(done, static_cast<std::int64_t>(requests.size()));
      }
    });
  }
  for (auto& t : threads) t.join();
  total.seconds = std::chrono::duration<double>(Steady::now() - start).count();
  return total;
}

}  // namespace kvmesh
