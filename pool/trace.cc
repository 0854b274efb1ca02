#include "pool/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

using Json = nlohmann::json;

// splitmix64's finaliser: a bijection of 64-bit values.
constexpr std::uint64_t Mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// A non-negative integer field that fits int64.
Result<std::int64_t> IntField(const Json& object, const char* name, std::string_view where) {
  const auto it = object.find(name);
  if (it == object.end()) return Status::InvalidArgument(StrCat(where, ": missing field ", name));
  // nlohmann-json keeps non-negative integers as unsigned, negative ones as signed.
  if (it->is_number_unsigned()) {
    const std::uint64_t v = it->get<std::uint64_t>();
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return static_cast<std::int64_t>(v);
    }
  }
  return Status::InvalidArgument(
      StrCat(where, ": ", name, " must be a non-negative integer, got ", it->dump()));
}

Result<std::vector<std::uint64_t>> IdsField(const Json& object, std::string_view where) {
  const auto it = object.find("hash_ids");
  if (it == object.end()) return Status::InvalidArgument(StrCat(where, ": missing field hash_ids"));
  const Status bad = Status::InvalidArgument(
      StrCat(where, ": hash_ids must be an array of non-negative integers"));
  if (!it->is_array()) return bad;
  std::vector<std::uint64_t> ids;
  ids.reserve(it->size());
  for (const Json& v : *it) {
    if (!v.is_number_unsigned()) return bad;
    ids.push_back(v.get<std::uint64_t>());
  }
  return ids;
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// A deterministic generator for the synthetic traces (splitmix64 stream).
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() { return Mix64(state_ += kGolden); }
  // Uniform in [lo, hi]. REQUIRES: lo <= hi.
  std::int64_t Uniform(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(Next() % span);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

Result<TraceRequest> ParseTraceLine(std::string_view line, std::string_view where) {
  const Json j = Json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(StrCat(where, ": not valid JSON"));
  if (!j.is_object()) return Status::InvalidArgument(StrCat(where, ": not a JSON object"));
  TraceRequest r;
  KVMESH_ASSIGN_OR_RETURN(r.timestamp_ms, IntField(j, "timestamp", where));
  KVMESH_ASSIGN_OR_RETURN(r.input_length, IntField(j, "input_length", where));
  KVMESH_ASSIGN_OR_RETURN(r.output_length, IntField(j, "output_length", where));
  KVMESH_ASSIGN_OR_RETURN(r.hash_ids, IdsField(j, where));
  return r;
}

std::string FormatTraceLine(const TraceRequest& request) {
  std::string out =
      StrCat("{\"timestamp\": ", request.timestamp_ms, ", \"input_length\": ", request.input_length,
             ", \"output_length\": ", request.output_length, ", \"hash_ids\": [");
  for (std::size_t i = 0; i < request.hash_ids.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(request.hash_ids[i]);
  }
  out += "]}";
  return out;
}

Result<TraceReader> TraceReader::Open(const std::string& path, std::size_t max_line_bytes,
                                      std::size_t chunk_bytes) {
  KVMESH_CHECK(max_line_bytes > 0 && chunk_bytes > 0);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return Status::NotFound(StrCat("trace file ", path, " does not exist"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(StrCat("trace file ", path, " is a directory"));
  }
  auto in = std::make_unique<std::ifstream>(path);
  if (!in->is_open()) {
    return Status::IoError(StrCat("cannot open trace file ", path, ": ", std::strerror(errno)));
  }
  return TraceReader(path, std::move(in), max_line_bytes, chunk_bytes);
}

Result<bool> TraceReader::ReadLine() {
  line_.clear();
  bool any = false;  // a byte of this line was read (a last line may lack its newline)
  while (true) {
    if (chunk_pos_ == chunk_.size()) {
      chunk_.resize(chunk_bytes_);
      in_->read(chunk_.data(), static_cast<std::streamsize>(chunk_.size()));
      chunk_.resize(static_cast<std::size_t>(in_->gcount()));
      chunk_pos_ = 0;
      if (chunk_.empty()) {
        if (in_->bad()) {
          return Status::IoError(StrCat(path_, ":", line_number_ + 1, ": read error"));
        }
        return any;
      }
    }
    const auto begin = chunk_.begin() + static_cast<std::ptrdiff_t>(chunk_pos_);
    const auto newline = std::find(begin, chunk_.end(), '\n');
    const auto take = static_cast<std::size_t>(newline - begin);
    if (line_.size() + take > max_line_bytes_) {
      return Status::InvalidArgument(
          StrCat(path_, ":", line_number_ + 1, ": line longer than ", max_line_bytes_, " bytes"));
    }
    if (line_.size() + take > line_.capacity()) {
      // Geometric growth, capped at the bound (vector's reserve is exact; a string's may double).
      line_.reserve(std::min(max_line_bytes_, std::max(2 * line_.capacity(), line_.size() + take)));
    }
    line_.insert(line_.end(), begin, newline);
    any = true;
    chunk_pos_ += take;
    if (newline != chunk_.end()) {
      ++chunk_pos_;  // the newline
      return true;
    }
  }
}

Result<std::optional<TraceRequest>> TraceReader::Next() {
  if (!failed_.ok()) return failed_;
  while (true) {
    Result<bool> line = ReadLine();
    if (!line.ok()) {
      failed_ = line.status();
      line_number_ += 1;
      return failed_;
    }
    if (!*line) return std::optional<TraceRequest>();
    ++line_number_;
    const std::string_view text(line_.data(), line_.size());
    if (IsBlank(text)) continue;
    Result<TraceRequest> r = ParseTraceLine(text, StrCat(path_, ":", line_number_));
    if (!r.ok()) {
      failed_ = r.status();
      return failed_;
    }
    return std::optional<TraceRequest>(std::move(r).value());
  }
}

Result<std::vector<TraceRequest>> ReadTrace(const std::string& path,
                                            std::optional<std::int64_t> limit) {
  KVMESH_ASSIGN_OR_RETURN(TraceReader reader, TraceReader::Open(path));
  std::vector<TraceRequest> trace;
  while (!limit || static_cast<std::int64_t>(trace.size()) < *limit) {
    KVMESH_ASSIGN_OR_RETURN(std::optional<TraceRequest> r, reader.Next());
    if (!r) break;
    trace.push_back(std::move(*r));
  }
  return trace;
}

Status WriteTrace(const std::string& path, std::span<const TraceRequest> trace) {
  std::ofstream out(path, std::ios::trunc);
  if (!out.is_open()) {
    return Status::IoError(StrCat("cannot write trace file ", path, ": ", std::strerror(errno)));
  }
  for (const TraceRequest& r : trace) out << FormatTraceLine(r) << '\n';
  out.flush();
  if (!out) return Status::IoError(StrCat("error writing trace file ", path));
  return Status::Ok();
}

void BlockTokens(std::uint64_t id, std::span<Token> out) {
  KVMESH_CHECK(!out.empty());
  constexpr std::uint64_t kMask = static_cast<std::uint64_t>(kTraceVocabSize) - 1;
  // A bijection of the id, cut into 24-bit pieces: injective over the first three tokens.
  const std::uint64_t mixed = Mix64(id);
  const std::size_t head = std::min<std::size_t>(3, out.size());
  for (std::size_t i = 0; i < head; ++i) {
    out[i] = static_cast<Token>((mixed >> (24 * i)) & kMask);
  }
  // The rest: two tokens per splitmix64 output (bits 0-23 and 32-55).
  std::uint64_t state = mixed;
  std::size_t i = head;
  for (; i + 1 < out.size(); i += 2) {
    state += kGolden;
    const std::uint64_t v = Mix64(state);
    out[i] = static_cast<Token>(v & kMask);
    out[i + 1] = static_cast<Token>((v >> 32) & kMask);
  }
  if (i < out.size()) out[i] = static_cast<Token>(Mix64(state + kGolden) & kMask);
}

Status SyntheticTraceOptions::Validate() const {
  auto at_least = [](const char* field, std::int64_t v, std::int64_t lo) {
    return v >= lo ? Status::Ok()
                   : Status::InvalidArgument(StrCat(field, " ", v, " must be at least ", lo));
  };
  KVMESH_RETURN_IF_ERROR(at_least("conversations", conversations, 1));
  KVMESH_RETURN_IF_ERROR(at_least("turns", turns, 1));
  KVMESH_RETURN_IF_ERROR(at_least("system_prompts", system_prompts, 0));
  KVMESH_RETURN_IF_ERROR(at_least("system_prompt_blocks", system_prompt_blocks, 0));
  KVMESH_RETURN_IF_ERROR(at_least("turn_blocks_min", turn_blocks_min, 1));
  KVMESH_RETURN_IF_ERROR(at_least("concurrency", concurrency, 1));
  KVMESH_RETURN_IF_ERROR(at_least("mean_gap_ms", mean_gap_ms, 0));
  KVMESH_RETURN_IF_ERROR(at_least("block_tokens", block_tokens, 1));
  KVMESH_RETURN_IF_ERROR(at_least("output_tokens", output_tokens, 0));
  if (partial_tail) KVMESH_RETURN_IF_ERROR(at_least("block_tokens", block_tokens, 2));
  if (!(one_off_share >= 0.0 && one_off_share <= 1.0)) {
    return Status::InvalidArgument(StrCat("one_off_share ", one_off_share, " is outside [0, 1]"));
  }
  if (turn_blocks_max < turn_blocks_min) {
    return Status::InvalidArgument(StrCat("turn_blocks_max ", turn_blocks_max,
                                          " is less than turn_blocks_min ", turn_blocks_min));
  }
  return Status::Ok();
}

Result<std::vector<TraceRequest>> GenerateSyntheticTrace(const SyntheticTraceOptions& o) {
  KVMESH_RETURN_IF_ERROR(o.Validate());
  SplitMix rng(o.seed);
  std::uint64_t next_id = static_cast<std::uint64_t>(o.system_prompts) *
                          static_cast<std::uint64_t>(o.system_prompt_blocks);
  struct Conversation {
    std::vector<std::uint64_t> ids;  // of the last turn
    std::int32_t turns_done = 0;
    std::int32_t turns = 0;
  };
  auto open = [&]() {
    Conversation c;
    c.turns = o.turns;
    // No draw without one-offs, so that such traces stay what they were before the option.
    if (o.one_off_share > 0 &&
        static_cast<double>(rng.Next() >> 11) * 0x1.0p-53 < o.one_off_share) {
      c.turns = 1;
    }
    if (o.system_prompts > 0) {
      const auto s = static_cast<std::uint64_t>(rng.Uniform(0, o.system_prompts - 1));
      for (std::int32_t b = 0; b < o.system_prompt_blocks; ++b) {
        c.ids.push_back(s * static_cast<std::uint64_t>(o.system_prompt_blocks) +
                        static_cast<std::uint64_t>(b));
      }
    }
    return c;
  };
  std::vector<Conversation> active;
  std::int32_t opened = 0;
  while (opened < o.conversations && static_cast<std::int32_t>(active.size()) < o.concurrency) {
    active.push_back(open());
    ++opened;
  }
  std::vector<TraceRequest> trace;
  trace.reserve(static_cast<std::size_t>(o.conversations) * static_cast<std::size_t>(o.turns));
  std::int64_t now_ms = 0;
  while (!active.empty()) {
    const auto pick = static_cast<std::size_t>(rng.Uniform(0, std::ssize(active) - 1));
    Conversation& c = active[pick];
    const std::int64_t new_blocks = rng.Uniform(o.turn_blocks_min, o.turn_blocks_max);
    for (std::int64_t b = 0; b < new_blocks; ++b) c.ids.push_back(next_id++);
    TraceRequest r;
    r.timestamp_ms = now_ms;
    r.output_length = o.output_tokens;
    r.hash_ids = c.ids;
    r.input_length = std::ssize(c.ids) * o.block_tokens;
    if (o.partial_tail) {  // a fresh id the next turn will not contain
      r.hash_ids.push_back(next_id++);
      r.input_length += rng.Uniform(1, o.block_tokens - 1);
    }
    trace.push_back(std::move(r));
    now_ms += rng.Uniform(0, 2 * o.mean_gap_ms);
    if (++c.turns_done == c.turns) {
      if (opened < o.conversations) {
        c = open();
        ++opened;
      } else {
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    }
  }
  return trace;
}

}  // namespace kvmesh
