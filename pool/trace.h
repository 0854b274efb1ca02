// Request traces in the Mooncake format: reading, writing, a synthetic generator, and the tokens
// that stand in for a trace's block ids.
//
// Format (JSON Lines, one request per line; the Mooncake FAST'25 traces):
//
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
//
//   timestamp      arrival, milliseconds from the start of the trace (non-negative integer)
//   input_length   prompt tokens; output_length: generated tokens (non-negative integers)
//   hash_ids       one id per block of the prompt (kMooncakeBlockTokens = 512 tokens in the
//                  published traces; the last block may be partial), prefix-chained: equal ids at
//                  the same position mean the same prefix, so a request reuses the longest prefix
//                  of its ids that is cached. Non-negative integers.
// Other fields are ignored; empty (or all-blank) lines are skipped. Raw tokens are not in the
// trace: BlockTokens() synthesises a block's tokens from its id.
//
// Errors name the file and line: "trace.jsonl:17: hash_ids must be an array of non-negative
// integers" (kInvalidArgument); a file that does not exist is kNotFound, one that cannot be read
// kIoError. A line longer than kMaxTraceLineBytes is kInvalidArgument ("trace.jsonl:1: line
// longer than 1048576 bytes"), found after reading at most that many bytes of it: the reader holds
// at most one line of that size and one read chunk (kTraceReadChunkBytes), whatever the file.
//
// Thread safety: TraceReader and TraceWriter are externally synchronised; the functions are pure.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "pool/block_ids.h"

namespace kvmesh {

// Tokens per hash id in the published Mooncake traces.
inline constexpr std::int32_t kMooncakeBlockTokens = 512;
// Synthesised tokens lie in [0, kTraceVocabSize).
inline constexpr Token kTraceVocabSize = Token{1} << 24;
// The longest trace line read (without its newline). The longest line of the published Mooncake
// conversation trace is 2,053 bytes; a 1M-token prompt is 2,048 ids of 512 tokens, at most
// 22 bytes each written as 20-digit integers ("18446744073709551615, "), so 45 KB. 1 MiB is 20
// times that, and bounds what a file without newlines (or a wrong file) makes the reader hold.
inline constexpr std::size_t kMaxTraceLineBytes = std::size_t{1} << 20;
// The reader reads the file in chunks of this size.
inline constexpr std::size_t kTraceReadChunkBytes = std::size_t{64} << 10;

struct TraceRequest {
  std::int64_t timestamp_ms = 0;
  std::int64_t input_length = 0;
  std::int64_t output_length = 0;
  std::vector<std::uint64_t> hash_ids;

  friend bool operator==(const TraceRequest&, const TraceRequest&) = default;
};

// Parses one line. `where` prefixes error messages ("trace.jsonl:17").
Result<TraceRequest> ParseTraceLine(std::string_view line, std::string_view where);
// The line (without a newline) that ParseTraceLine reads back as `request`.
std::string FormatTraceLine(const TraceRequest& request);

// Streams a trace file line by line.
class TraceReader {
 public:
  // `max_line_bytes` and `chunk_bytes` (both > 0) are for tests and the fuzzer, which use small
  // ones to reach the bound and chunk boundaries with small inputs.
  static Result<TraceReader> Open(const std::string& path,
                                  std::size_t max_line_bytes = kMaxTraceLineBytes,
                                  std::size_t chunk_bytes = kTraceReadChunkBytes);

  // The next request; nullopt at the end of the file. After an error the reader stays failed
  // (the same error again).
  Result<std::optional<TraceRequest>> Next();
  // The 1-based number of the line read last (0 before the first).
  [[nodiscard]] std::int64_t line_number() const { return line_number_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  // Bytes the reader holds for lines and reading (its buffers' capacities), at most
  // max_line_bytes + chunk_bytes (kMaxTraceLineBytes + kTraceReadChunkBytes by default).
  [[nodiscard]] std::size_t buffer_bytes() const { return line_.capacity() + chunk_.capacity(); }

 private:
  TraceReader(std::string path, std::unique_ptr<std::ifstream> in, std::size_t max_line_bytes,
              std::size_t chunk_bytes)
      : path_(std::move(path)),
        in_(std::move(in)),
        max_line_bytes_(max_line_bytes),
        chunk_bytes_(chunk_bytes) {}
  // The next line (without '\n') into line_; false at the end of the file.
  Result<bool> ReadLine();

  std::string path_;
  std::unique_ptr<std::ifstream> in_;
  std::size_t max_line_bytes_;
  std::size_t chunk_bytes_;
  std::vector<char> line_;   // the line being read; capacity at most max_line_bytes_
  std::vector<char> chunk_;  // the last chunk read; [chunk_pos_, chunk_.size()) not used yet
  std::size_t chunk_pos_ = 0;
  std::int64_t line_number_ = 0;
  Status failed_;
};

// Reads the first `limit` requests (all when nullopt).
Result<std::vector<TraceRequest>> ReadTrace(const std::string& path,
                                            std::optional<std::int64_t> limit = std::nullopt);
// Writes (truncating) `path`; kIoError when it cannot be written.
Status WriteTrace(const std::string& path, std::span<const TraceRequest> trace);

// The tokens of the block with trace id `id`: out.size() tokens in [0, kTraceVocabSize), a pure
// function of (id, position). The first min(3, out.size()) tokens are a bijective mix of the id
// cut into 24-bit pieces, so distinct ids always give distinct blocks when out.size() >= 3 (and
// for ids < 2^48 when out.size() == 2); the rest come from a splitmix64 stream seeded
// by the id (two tokens per output).
// REQUIRES: !out.empty().
void BlockTokens(std::uint64_t id, std::span<Token> out);

// ---- Synthetic traces
//
// Multi-turn conversations that share a few system prompts. Conversation c picks system prompt
// s (uniformly, from the seed); its first turn is the system prompt's blocks followed by new
// blocks; with probability one_off_share it has that turn only (a one-off request: nothing of it
// but the system prompt is ever sent again), else `turns` turns; every later turn is the previous
// turn's full blocks followed by new ones (the previous answer and the new question), so ids are
// prefix-chained like the real trace. Each turn adds turn_blocks_min..turn_blocks_max new full
// blocks (uniform).
//
// partial_tail (default, as in the Mooncake traces, where the last block of a prompt is partial):
// each request also ends in one partial block with a fresh id, and input_length = (ids - 1) *
// block_tokens + 1..block_tokens-1. The next turn does not contain that id: its text continues
// in the next turn's new full blocks. Without partial_tail every block is full and
// input_length = ids * block_tokens; then each turn's ids are exactly the previous turn's ids
// followed by the new ones.
//
// `concurrency` conversations are open at a time; each request comes from one of them chosen at
// random, and a finished conversation is replaced by the next one, so turns of different
// conversations interleave. Timestamps grow by a random gap in [0, 2 * mean_gap_ms].
//
// Ids: system prompt s has ids s*system_prompt_blocks + [0, system_prompt_blocks); the other
// blocks get fresh ids from system_prompts*system_prompt_blocks on, in order of appearance.
// output_length = output_tokens. The same options give the same trace; another seed gives
// another one.
struct SyntheticTraceOptions {
  std::uint64_t seed = 1;
  std::int32_t conversations = 1000;
  std::int32_t turns = 6;      // per conversation
  double one_off_share = 0.0;  // share of conversations with a single turn, in [0, 1]
  std::int32_t system_prompts = 8;
  std::int32_t system_prompt_blocks = 4;
  std::int32_t turn_blocks_min = 1;  // new full blocks per turn, uniform in [min, max]
  std::int32_t turn_blocks_max = 8;
  bool partial_tail = true;
  std::int32_t concurrency = 256;  // conversations open at a time (interleaving)
  std::int64_t mean_gap_ms = 100;
  std::int32_t block_tokens = kMooncakeBlockTokens;
  std::int64_t output_tokens = 256;

  // kInvalidArgument naming the field: counts must be >= 1 (system_prompts and
  // system_prompt_blocks may be 0), turn_blocks_min <= turn_blocks_max, gaps >= 0,
  // one_off_share in [0, 1], and block_tokens >= 2 with partial_tail.
  Status Validate() const;
};

Result<std::vector<TraceRequest>> GenerateSyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace kvmesh
