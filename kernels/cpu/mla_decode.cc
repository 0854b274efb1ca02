// CPU MLA decode (weight-absorbed): the node's CPU backend and the oracle of the CUDA kernel.
//
// Units (sequence, tile of kRowTile query rows, split) run in parallel on the executor. A unit
// walks its keys in tiles of kKeyTile: each latent record is dequantised once (KvRowReader) and
// used as the key (all 576 dims against [q_nope, q_rope], Dot) and as the value (the first 512)
// for every query row of the tile. Online softmax and accumulation in FP32; splits are merged by
// CombineSplits.
#include "kernels/mla_decode.h"

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

constexpr int kLatent = 512;  // kv_lora_rank (the only supported value)
constexpr int kRope = 64;     // rope_dim
constexpr int kRecord = kLatent + kRope;
constexpr int kRowTile = 32;  // query rows per unit
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct MlaPlan {
  const MlaDecodeArgs* args = nullptr;
  const KvRowReader* reader = nullptr;
  std::int64_t rows = 0;  // q_len * num_heads per sequence
  std::int64_t row_tiles = 0;
  SplitWorkspaceLayout workspace;
  float* partial = nullptr;
};

struct Scratch {
  std::vector<float> q, acc, m, l, keys, probs, record;
  Scratch()
      : q(kRowTile * kRecord),
        acc(kRowTile * kLatent),
        m(kRowTile),
        l(kRowTile),
        keys(kKeyTile * kRecord),
        probs(kRowTile * kKeyTile),
        record(kRecord) {}
};

// acc[0, 512) += p[t] * record t's first 512 dims, t ascending (records are kRecord apart).
void AccumulateLatent(const float* p, int n, const float* records, float* acc) {
  for (int t = 0; t < n; ++t) {
    if (p[t] == 0.0f) continue;
    const float w = p[t];
    const float* v = records + std::int64_t{t} * kRecord;
    for (int d = 0; d < kLatent; d += 4) {
      Float4 a = LoadFloat4(acc + d);
      a += Float4{w, w, w, w} * LoadFloat4(v + d);
      std::memcpy(acc + d, &a, sizeof(a));
    }
  }
}

void RunUnit(const MlaPlan& plan, std::int64_t unit, Scratch& s) {
  const MlaDecodeArgs& args = *plan.args;
  const int num_splits = plan.workspace.num_splits;
  const int split = static_cast<int>(unit % num_splits);
  const std::int64_t tile = unit / num_splits % plan.row_tiles;
  const int seq = static_cast<int>(unit / num_splits / plan.row_tiles);
  const std::int32_t kv_len = args.kv_lens[seq];
  const std::int32_t* table = args.block_table + std::int64_t{seq} * args.max_blocks_per_seq;
  const int tpb = args.pool.layout.tokens_per_block();
  const KeyRange keys =
      SplitKeyRange(DecodeKeyRange(kv_len, args.q_len, 0), num_splits, split, kKeyTile);

  // Local row r is sequence row tile * kRowTile + r = j * num_heads + h, which is also its row in
  // q_nope / q_rope / out relative to the sequence.
  const std::int64_t first = tile * kRowTile;
  const int rows = static_cast<int>(std::min<std::int64_t>(kRowTile, plan.rows - first));
  const std::int64_t seq_row0 = std::int64_t{seq} * plan.rows + first;
  for (int r = 0; r < rows; ++r) {
    ReadActRow(args.q_dtype, args.q_nope, (seq_row0 + r) * kLatent, kLatent, args.softmax_scale,
               &s.q[r * kRecord]);
    ReadActRow(args.q_dtype, args.q_rope, (seq_row0 + r) * kRope, kRope, args.softmax_scale,
               &s.q[r * kRecord + kLatent]);
  }
  SoftmaxRows softmax{rows, kLatent, s.m.data(), s.l.data(), s.acc.data()};
  softmax.Reset();

  for (std::int32_t t0 = keys.begin; t0 < keys.end; t0 += kKeyTile) {
    const int n = std::min(kKeyTile, keys.end - t0);
    for (int t = 0; t < n; ++t) {
      const std::int32_t pos = t0 + t;
      plan.reader->Read(table[pos / tpb], 0, 0, pos % tpb, &s.keys[t * kRecord]);
    }
    for (int r = 0; r < rows; ++r) {
      const std::int32_t query_pos =
          kv_len - args.q_len + static_cast<std::int32_t>((first + r) / args.num_heads);
      float* p = &s.probs[r * kKeyTile];
      for (int t = 0; t < kKeyTile; ++t) {
        p[t] = t < n && KeyVisible(t0 + t, query_pos, 0)
                   ? Dot<kRecord>(&s.q[r * kRecord], &s.keys[t * kRecord])
                   : kNegInf;
      }
      if (!softmax.AddScores(r, p, kKeyTile)) continue;
      AccumulateLatent(p, n, s.keys.data(), &s.acc[r * kLatent]);
    }
  }

  for (int r = 0; r < rows; ++r) {
    const float lse = softmax.Finish(r, s.record.data());
    const std::int64_t row = seq_row0 + r;
    if (num_splits == 1) {
      WriteActRow(args.out_dtype, args.out, row * kLatent, kLatent, s.record.data());
      if (args.lse != nullptr) args.lse[row] = lse;
    } else {
      std::memcpy(plan.partial + plan.workspace.OutOffset(split, row), s.record.data(),
                  kLatent * sizeof(float));
      plan.partial[plan.workspace.LseOffset(split, row)] = lse;
    }
  }
}

}  // namespace

Status MlaDecode(const MlaDecodeArgs& args, Workspace workspace, ThreadPool* executor) {
  KVMESH_RETURN_IF_ERROR(CanImplementMlaDecode(args, workspace));
  if (args.num_seqs == 0) return Status::Ok();
  KVMESH_RETURN_IF_ERROR(CheckSequenceIndices(
      "mla_decode", SequenceIndices{.num_seqs = args.num_seqs,
                                    .q_len = args.q_len,
                                    .kv_lens = args.kv_lens,
                                    .block_table = args.block_table,
                                    .max_blocks_per_seq = args.max_blocks_per_seq,
                                    .tokens_per_block = args.pool.layout.tokens_per_block(),
                                    .num_blocks = args.pool.num_blocks,
                                    .sliding_window = 0}));
  const KvRowReader reader(args.pool, args.layer);
  MlaPlan plan;
  plan.args = &args;
  plan.reader = &reader;
  plan.rows = std::int64_t{args.q_len} * args.num_heads;
  plan.row_tiles = (plan.rows + kRowTile - 1) / kRowTile;
  plan.workspace = SplitWorkspaceLayout{.rows = std::int64_t{args.num_seqs} * plan.rows,
                                        .width = kLatent,
                                        .num_splits = MlaDecodeNumSplits(args)};
  if (plan.workspace.num_splits > 1) plan.partial = static_cast<float*>(workspace.data);

  const std::int64_t units =
      std::int64_t{args.num_seqs} * plan.row_tiles * plan.workspace.num_splits;
  RunParallel(executor, units, [&plan](std::int64_t begin, std::int64_t end) {
    thread_local Scratch scratch;
    for (std::int64_t u = begin; u < end; ++u) RunUnit(plan, u, scratch);
  });
  if (plan.workspace.num_splits > 1) {
    CombineSplits(plan.workspace, plan.partial, args.out_dtype, args.out, args.lse, executor);
  }
  return Status::Ok();
}

}  // namespace kvmesh::cpu
