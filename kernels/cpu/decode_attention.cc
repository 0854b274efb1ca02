// CPU paged decode attention: the node's real CPU backend and the oracle of the CUDA kernel.
//
// Work is split into units (sequence, KV head, split), run in parallel on the executor. A unit
// walks its key range in tiles of kTile keys: it dequantises each K and V row once (KvRowReader,
// exact quantize.h values) and reuses it for every query row of the GQA group and every query
// token, computes the tile's scores for all rows (Dot: vectorised, 16 partial sums), runs the
// online softmax in FP32 and accumulates P·V in FP32. With more
// than one split the units write partial rows to the workspace and CombineSplits merges them.
#include "kernels/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_split.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/kv_row_reader.h"

namespace kvmesh::cpu {
namespace {

constexpr int kTile = kKeyTile;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct DecodePlan {
  const DecodeAttentionArgs* args = nullptr;
  const KvRowReader* reader = nullptr;
  int head_dim = 0;
  int num_kv_heads = 0;
  int group = 0;  // query heads per KV head
  int rows = 0;   // group * q_len query rows per unit
  int tokens_per_block = 0;
  SplitWorkspaceLayout workspace;
  float* partial = nullptr;  // workspace floats; null with one split
};

// Per-thread scratch, grown on first use and reused by every later unit of the thread.
struct Scratch {
  std::vector<float> q, acc, m, l, keys, values, probs, row;
  void Resize(int rows, int width) {
    q.resize(std::size_t(rows) * width);
    acc.resize(std::size_t(rows) * width);
    m.resize(rows);
    l.resize(rows);
    keys.resize(std::size_t(kTile) * width);
    values.resize(std::size_t(kTile) * width);
    probs.resize(std::size_t(rows) * kTile);
    row.resize(width);
  }
};

template <int D>
void RunUnit(const DecodePlan& plan, std::int64_t unit, Scratch& s) {
  const DecodeAttentionArgs& args = *plan.args;
  const int num_splits = plan.workspace.num_splits;
  const int split = static_cast<int>(unit % num_splits);
  const int kv_head = static_cast<int>(unit / num_splits % plan.num_kv_heads);
  const int seq = static_cast<int>(unit / num_splits / plan.num_kv_heads);
  const int q_len = args.q_len;
  const std::int32_t kv_len = args.kv_lens[seq];
  const std::int32_t* table = args.block_table + std::int64_t{seq} * args.max_blocks_per_seq;
  const KeyRange keys =
      SplitKeyRange(DecodeKeyRange(kv_len, q_len, args.sliding_window), num_splits, split, kTile);

  // Row r = j * group + hh: query token j, query head kv_head * group + hh.
  const auto out_row = [&](int r) {
    const int j = r / plan.group;
    const int h = kv_head * plan.group + r % plan.group;
    return (std::int64_t{seq} * q_len + j) * args.num_q_heads + h;
  };
  for (int r = 0; r < plan.rows; ++r) {
    ReadActRow(args.q_dtype, args.q, out_row(r) * D, D, args.softmax_scale, &s.q[r * D]);
  }
  SoftmaxRows softmax{plan.rows, D, s.m.data(), s.l.data(), s.acc.data()};
  softmax.Reset();

  std::int64_t blocks[kTile];
  int slots[kTile];
  for (std::int32_t t0 = keys.begin; t0 < keys.end; t0 += kTile) {
    const int n = std::min(kTile, keys.end - t0);
    for (int t = 0; t < n; ++t) {
      blocks[t] = table[(t0 + t) / plan.tokens_per_block];
      slots[t] = (t0 + t) % plan.tokens_per_block;
      plan.reader->Read(blocks[t], 0, kv_head, slots[t], &s.keys[t * D]);
    }
    bool any = false;
    for (int r = 0; r < plan.rows; ++r) {
      const std::int32_t query_pos = kv_len - q_len + r / plan.group;
      float* p = &s.probs[r * kTile];
      for (int t = 0; t < kTile; ++t) {
        p[t] = t < n && KeyVisible(t0 + t, query_pos, args.sliding_window)
                   ? Dot<D>(&s.q[r * D], &s.keys[t * D])
                   : kNegInf;
      }
      any |= softmax.AddScores(r, p, kTile);
    }
    if (!any) continue;
    for (int t = 0; t < n; ++t) {
      plan.reader->Read(blocks[t], 1, kv_head, slots[t], &s.values[t * D]);
    }
    for (int r = 0; r < plan.rows; ++r) {
      AccumulateValues<D>(&s.probs[r * kTile], n, s.values.data(), &s.acc[r * D]);
    }
  }

  for (int r = 0; r < plan.rows; ++r) {
    const float lse = softmax.Finish(r, s.row.data());
    const std::int64_t row = out_row(r);
    if (num_splits == 1) {
      WriteActRow(args.out_dtype, args.out, row * D, D, s.row.data());
      if (args.lse != nullptr) args.lse[row] = lse;
    } else {
      std::memcpy(plan.partial + plan.workspace.OutOffset(split, row), s.row.data(), D * 4);
      plan.partial[plan.workspace.LseOffset(split, row)] = lse;
    }
  }
}

template <int D>
void RunUnits(const DecodePlan& plan, std::int64_t begin, std::int64_t end) {
  thread_local Scratch scratch;
  scratch.Resize(plan.rows, D);
  for (std::int64_t u = begin; u < end; ++u) RunUnit<D>(plan, u, scratch);
}

}  // namespace

Status DecodeAttention(const DecodeAttentionArgs& args, Workspace workspace, ThreadPool* executor) {
  KVMESH_RETURN_IF_ERROR(CanImplementDecodeAttention(args, workspace));
  if (args.num_seqs == 0) return Status::Ok();
  const PagedTensorLayout& data = args.pool.layout.data();
  KVMESH_RETURN_IF_ERROR(CheckSequenceIndices(
      "decode_attention", SequenceIndices{.num_seqs = args.num_seqs,
                                          .q_len = args.q_len,
                                          .kv_lens = args.kv_lens,
                                          .block_table = args.block_table,
                                          .max_blocks_per_seq = args.max_blocks_per_seq,
                                          .tokens_per_block = data.tokens_per_block,
                                          .num_blocks = args.pool.num_blocks,
                                          .sliding_window = args.sliding_window}));
  const KvRowReader reader(args.pool, args.layer);
  DecodePlan plan;
  plan.args = &args;
  plan.reader = &reader;
  plan.head_dim = data.inner;
  plan.num_kv_heads = data.num_heads;
  plan.group = args.num_q_heads / data.num_heads;
  plan.rows = plan.group * args.q_len;
  plan.tokens_per_block = data.tokens_per_block;
  plan.workspace =
      SplitWorkspaceLayout{.rows = std::int64_t{args.num_seqs} * args.q_len * args.num_q_heads,
                           .width = data.inner,
                           .num_splits = DecodeAttentionNumSplits(args)};
  if (plan.workspace.num_splits > 1) plan.partial = static_cast<float*>(workspace.data);

  const std::int64_t units =
      std::int64_t{args.num_seqs} * plan.num_kv_heads * plan.workspace.num_splits;
  RunParallel(executor, units, [&plan](std::int64_t begin, std::int64_t end) {
    switch (plan.head_dim) {
      case 64: RunUnits<64>(plan, begin, end); return;
      case 128: RunUnits<128>(plan, begin, end); return;
      case 256: RunUnits<256>(plan, begin, end); return;
      default: return;  // excluded by CanImplementDecodeAttention
    }
  });
  if (plan.workspace.num_splits > 1) {
    CombineSplits(plan.workspace, plan.partial, args.out_dtype, args.out, args.lse, executor);
  }
  return Status::Ok();
}

}  // namespace kvmesh::cpu
