// Traces: the JSONL reader (errors with line numbers, the line-length bound and the memory it
// keeps), the writer, synthesised block tokens, and the synthetic generator (determinism and
// structure).
#include "pool/trace.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <tuple>

namespace kvmesh {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() /
        ("kvmesh_trace_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name, const std::string& contents) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p) << contents;
    return p;
  }
  std::string Path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

TEST(TraceParseTest, ReadsAMooncakeLine) {
  auto r = ParseTraceLine(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 0]})",
      "t:1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timestamp_ms, 27482);
  EXPECT_EQ(r->input_length, 6955);
  EXPECT_EQ(r->output_length, 52);
  EXPECT_EQ(r->hash_ids, (std::vector<std::uint64_t>{46, 47, 0}));
}

TEST(TraceParseTest, IgnoresOtherFieldsAndTakesLargeIds) {
  auto r = ParseTraceLine(
      R"({"hash_ids": [18446744073709551615], "extra": "x", "timestamp": 0, "input_length": 1,
          "output_length": 0})",
      "t:1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hash_ids, (std::vector<std::uint64_t>{18446744073709551615ull}));
  auto empty = ParseTraceLine(
      R"({"timestamp": 0, "input_length": 0, "output_length": 0, "hash_ids": []})", "t:1");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->hash_ids.empty());
}

TEST(TraceParseTest, ErrorsNameTheLineAndTheField) {
  const std::string ok_fields = R"("timestamp": 1, "input_length": 2, "output_length": 3)";
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{", "trace.jsonl:17: not valid JSON"},
      {"[1, 2]", "trace.jsonl:17: not a JSON object"},
      {"{" + ok_fields + "}", "trace.jsonl:17: missing field hash_ids"},
      {"{" + ok_fields + R"(, "hash_ids": 5})",
       "trace.jsonl:17: hash_ids must be an array of non-negative integers"},
      {"{" + ok_fields + R"(, "hash_ids": [1, -2]})",
       "trace.jsonl:17: hash_ids must be an array of non-negative integers"},
      {"{" + ok_fields + R"(, "hash_ids": [1, 2.5]})",
       "trace.jsonl:17: hash_ids must be an array of non-negative integers"},
      {"{" + ok_fields + R"(, "hash_ids": ["1"]})",
       "trace.jsonl:17: hash_ids must be an array of non-negative integers"},
      {R"({"input_length": 2, "output_length": 3, "hash_ids": []})",
       "trace.jsonl:17: missing field timestamp"},
      {R"({"timestamp": -1, "input_length": 2, "output_length": 3, "hash_ids": []})",
       "trace.jsonl:17: timestamp must be a non-negative integer, got -1"},
      {R"({"timestamp": 1, "input_length": 2.5, "output_length": 3, "hash_ids": []})",
       "trace.jsonl:17: input_length must be a non-negative integer, got 2.5"},
      {R"({"timestamp": 1, "input_length": 2, "output_length": "3", "hash_ids": []})",
       "trace.jsonl:17: output_length must be a non-negative integer, got \"3\""},
      {R"({"timestamp": 9223372036854775808, "input_length": 2, "output_length": 3,
           "hash_ids": []})",
       "trace.jsonl:17: timestamp must be a non-negative integer, got 9223372036854775808"},
  };
  for (const Case& c : cases) {
    auto r = ParseTraceLine(c.line, "trace.jsonl:17");
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.line;
    EXPECT_EQ(r.status().message(), c.message) << c.line;
  }
}

TEST(TraceParseTest, FormatRoundTrips) {
  TraceRequest r{.timestamp_ms = 5,
                 .input_length = 1000,
                 .output_length = 7,
                 .hash_ids = {0, 3, 18446744073709551615ull}};
  const std::string line = FormatTraceLine(r);
  EXPECT_EQ(line,
            R"({"timestamp": 5, "input_length": 1000, "output_length": 7, "hash_ids": [0, 3, )"
            R"(18446744073709551615]})");
  auto back = ParseTraceLine(line, "x");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

TEST(TraceReaderTest, SkipsEmptyLinesAndCountsThem) {
  TempDir dir;
  const std::string path = dir.File(
      "trace.jsonl",
      "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
      "\n"
      "   \r\n"
      "{\"timestamp\": 3, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\r\n"
      "{\"timestamp\": 4, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, -2]}\n");
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto first = reader->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->hash_ids, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(reader->line_number(), 1);
  auto second = reader->Next();
  ASSERT_TRUE(second.ok() && second->has_value()) << second.status();
  EXPECT_EQ((*second)->timestamp_ms, 3);
  EXPECT_EQ(reader->line_number(), 4);
  auto third = reader->Next();
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().message(),
            path + ":5: hash_ids must be an array of non-negative integers");

  auto all = ReadTrace(path);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), StatusCode::kInvalidArgument);
  auto limited = ReadTrace(path, 2);  // stops before the bad line
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(limited->size(), 2u);
}

TEST(TraceReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  auto r = ReadTrace(dir.Path("absent.jsonl"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("absent.jsonl does not exist"), std::string::npos);
  auto d = ReadTrace(dir.Path(""));
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status();
}

// A valid line, padded with spaces to `bytes` bytes when it is shorter.
std::string PaddedLine(std::size_t bytes) {
  std::string line = R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [7]})";
  line.resize(std::max(bytes, line.size()), ' ');
  return line;
}

TEST(TraceReaderTest, LinesUpToTheBoundAreReadLongerOnesAreAnError) {
  TempDir dir;
  const std::string ok =
      dir.File("ok.jsonl", PaddedLine(0) + "\n" + PaddedLine(kMaxTraceLineBytes) + "\n");
  auto all = ReadTrace(ok);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 2u);

  const std::string path =
      dir.File("long.jsonl", PaddedLine(0) + "\n" + PaddedLine(kMaxTraceLineBytes + 1) + "\n" +
                                 PaddedLine(0) + "\n");
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto first = reader->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  auto second = reader->Next();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(second.status().message(), path + ":2: line longer than 1048576 bytes");
  EXPECT_EQ(reader->line_number(), 2);
  // The reader stays failed: the rest of the long line is not read as a line of its own.
  auto third = reader->Next();
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status(), second.status());
  EXPECT_LE(reader->buffer_bytes(), kMaxTraceLineBytes + kTraceReadChunkBytes);
}

TEST(TraceReaderTest, AGigabyteWithoutNewlineFailsAtTheBound) {
  // 1 GiB of zero bytes and no newline, as a sparse file: nothing is written to the disk, and the
  // reader stops after the bound instead of holding the whole "line" (2.1 GB before the bound).
  TempDir dir;
  const std::string path = dir.Path("trace.jsonl");
  std::ofstream(path).close();
  fs::resize_file(path, std::uintmax_t{1} << 30);
  auto reader = TraceReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto r = reader->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), path + ":1: line longer than 1048576 bytes");
  EXPECT_LE(reader->buffer_bytes(), kMaxTraceLineBytes + kTraceReadChunkBytes);
  auto all = ReadTrace(path);
  EXPECT_EQ(all.status().message(), path + ":1: line longer than 1048576 bytes");
}

TEST(TraceReaderTest, ALongLineThroughAPipeIsReadOnlyToTheBound) {
  // A writer offers 8 MiB without a newline through a FIFO; the reader takes the bound and a chunk,
  // fails and closes, and the writer's next write fails (EPIPE): what it got rid of is what the
  // reader read plus what the pipe buffers, far from the 8 MiB an unbounded reader would take.
  TempDir dir;
  const std::string fifo = dir.Path("trace.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  constexpr std::size_t kOffered = std::size_t{8} << 20;
  std::size_t written = 0;
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd < 0) return;
    const std::string piece(64 << 10, 'x');
    while (written < kOffered) {
      const ssize_t n = ::write(fd, piece.data(), piece.size());
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  {
    auto reader = TraceReader::Open(fifo);
    ASSERT_TRUE(reader.ok()) << reader.status();
    auto r = reader->Next();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), fifo + ":1: line longer than 1048576 bytes");
    EXPECT_LE(reader->buffer_bytes(), kMaxTraceLineBytes + kTraceReadChunkBytes);
  }  // closed: the writer's next write fails
  writer.join();
  std::signal(SIGPIPE, previous);
  EXPECT_GT(written, kMaxTraceLineBytes);
  EXPECT_LT(written, kMaxTraceLineBytes + (std::size_t{2} << 20)) << "the reader read on";
}

TEST(TraceReaderTest, SmallBoundsAndChunksReadTheSameTrace) {
  TempDir dir;
  SyntheticTraceOptions o;
  o.conversations = 3;
  auto trace = GenerateSyntheticTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::string path = dir.Path("t.jsonl");
  ASSERT_TRUE(WriteTrace(path, *trace).ok());
  std::size_t longest = 0;
  for (const TraceRequest& r : *trace) longest = std::max(longest, FormatTraceLine(r).size());
  for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
    auto reader = TraceReader::Open(path, longest, chunk);
    ASSERT_TRUE(reader.ok());
    std::vector<TraceRequest> back;
    while (true) {
      auto r = reader->Next();
      ASSERT_TRUE(r.ok()) << r.status() << " chunk " << chunk;
      if (!r->has_value()) break;
      back.push_back(**r);
    }
    EXPECT_EQ(back, *trace) << "chunk " << chunk;
    auto tight = TraceReader::Open(path, longest - 1, chunk);
    ASSERT_TRUE(tight.ok());
    Result<std::optional<TraceRequest>> r = std::optional<TraceRequest>();
    do {
      r = tight->Next();
    } while (r.ok() && r->has_value());
    ASSERT_FALSE(r.ok()) << "chunk " << chunk;
    EXPECT_NE(r.status().message().find("line longer than " + std::to_string(longest - 1)),
              std::string::npos)
        << r.status();
  }
}

TEST(TraceWriterTest, WritesWhatTheReaderReads) {
  TempDir dir;
  SyntheticTraceOptions o;
  o.conversations = 5;
  auto trace = GenerateSyntheticTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::string path = dir.Path("out.jsonl");
  ASSERT_TRUE(WriteTrace(path, *trace).ok());
  auto back = ReadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *trace);
  const Status bad = WriteTrace(dir.Path("no/such/dir/out.jsonl"), *trace);
  EXPECT_EQ(bad.code(), StatusCode::kIoError) << bad;
}

TEST(BlockTokensTest, DeterministicInRangeAndVaried) {
  std::vector<Token> a(512), b(512), c(512);
  BlockTokens(46, a);
  BlockTokens(46, b);
  BlockTokens(47, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<Token> distinct;
  for (Token t : a) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, kTraceVocabSize);
    distinct.insert(t);
  }
  EXPECT_GT(distinct.size(), 500u);  // not a constant or a short cycle
  // A shorter block is the prefix of a longer one.
  std::vector<Token> short_block(16);
  BlockTokens(46, short_block);
  EXPECT_TRUE(std::equal(short_block.begin(), short_block.end(), a.begin()));
}

TEST(BlockTokensTest, DistinctIdsGiveDistinctBlocks) {
  // The first three tokens are a bijection of the id: no two ids share them.
  std::set<std::tuple<Token, Token, Token>> seen;
  std::vector<Token> t(3);
  for (std::uint64_t id = 0; id < 50000; ++id) {
    BlockTokens(id, t);
    EXPECT_TRUE(seen.insert({t[0], t[1], t[2]}).second) << id;
  }
  for (std::uint64_t id : {std::uint64_t{1} << 40, ~std::uint64_t{0}, std::uint64_t{1} << 63}) {
    BlockTokens(id, t);
    EXPECT_TRUE(seen.insert({t[0], t[1], t[2]}).second) << id;
  }
  // Two tokens per block (the smallest block): 48 bits of the id.
  std::set<std::pair<Token, Token>> two;
  std::vector<Token> t2(2);
  for (std::uint64_t id = 0; id < 50000; ++id) {
    BlockTokens(id * 0x100000001ull, t2);
    EXPECT_TRUE(two.insert({t2[0], t2[1]}).second) << id;
  }
}

std::vector<TraceRequest> Generate(const SyntheticTraceOptions& o) {
  auto t = GenerateSyntheticTrace(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::vector<TraceRequest>{};
}

TEST(SyntheticTraceTest, SameSeedSameTraceOtherSeedOtherTrace) {
  SyntheticTraceOptions o;
  o.conversations = 50;
  const auto a = Generate(o);
  const auto b = Generate(o);
  EXPECT_EQ(a, b);
  o.seed = 2;
  const auto c = Generate(o);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), c.size());  // the counts do not depend on the seed
}

// Checks the structure of a synthetic trace without partial tails: every request starts with a
// system prompt, and each turn's ids are the previous turn's ids plus 1..4 new ones.
TEST(SyntheticTraceTest, TurnsArePrefixChainedOverSharedSystemPrompts) {
  SyntheticTraceOptions o;
  o.conversations = 40;
  o.turns = 3;
  o.system_prompts = 3;
  o.system_prompt_blocks = 2;
  o.turn_blocks_min = 1;
  o.turn_blocks_max = 4;
  o.partial_tail = false;
  o.concurrency = 5;
  const auto trace = Generate(o);
  ASSERT_EQ(trace.size(), 120u);
  std::map<std::vector<std::uint64_t>, int> seen;  // ids of earlier requests
  std::set<std::uint64_t> prompts_used;
  int first_turns = 0;
  std::int64_t last_ts = 0;
  std::set<std::uint64_t> conversation_ids;
  for (const TraceRequest& r : trace) {
    ASSERT_GE(r.hash_ids.size(), 3u);
    EXPECT_GE(r.timestamp_ms, last_ts);
    last_ts = r.timestamp_ms;
    EXPECT_EQ(r.input_length, std::ssize(r.hash_ids) * kMooncakeBlockTokens);
    EXPECT_EQ(r.output_length, o.output_tokens);
    const std::uint64_t s = r.hash_ids[0] / 2;
    ASSERT_LT(s, 3u);
    EXPECT_EQ(r.hash_ids[0], 2 * s);
    EXPECT_EQ(r.hash_ids[1], 2 * s + 1);
    prompts_used.insert(s);
    // The longest earlier request that is a prefix of this one is the previous turn.
    std::size_t prev = 2;
    for (std::size_t len = r.hash_ids.size() - 1; len > 2; --len) {
      if (seen.count(std::vector<std::uint64_t>(r.hash_ids.begin(), r.hash_ids.begin() + len))) {
        prev = len;
        break;
      }
    }
    if (prev == 2) ++first_turns;
    const std::size_t added = r.hash_ids.size() - prev;
    EXPECT_GE(added, 1u);
    EXPECT_LE(added, 4u);
    for (std::size_t i = prev; i < r.hash_ids.size(); ++i) {
      EXPECT_GE(r.hash_ids[i], 6u);                                // not a prompt id
      EXPECT_TRUE(conversation_ids.insert(r.hash_ids[i]).second);  // fresh
    }
    seen[r.hash_ids] = 1;
  }
  EXPECT_EQ(first_turns, 40);
  EXPECT_EQ(prompts_used.size(), 3u);
}

TEST(SyntheticTraceTest, PartialTailIsAFreshIdThatNoLaterTurnContains) {
  SyntheticTraceOptions o;
  o.conversations = 30;
  o.turns = 4;
  o.concurrency = 4;
  const auto trace = Generate(o);
  ASSERT_EQ(trace.size(), 120u);
  std::map<std::uint64_t, int> occurrences;
  for (const TraceRequest& r : trace) {
    for (std::uint64_t id : r.hash_ids) ++occurrences[id];
  }
  for (const TraceRequest& r : trace) {
    const auto n = std::ssize(r.hash_ids);
    EXPECT_GT(r.input_length, (n - 1) * kMooncakeBlockTokens);
    EXPECT_LT(r.input_length, n * kMooncakeBlockTokens);
    EXPECT_EQ(occurrences[r.hash_ids.back()], 1);
  }
}

TEST(SyntheticTraceTest, InterleavesConversations) {
  SyntheticTraceOptions o;
  o.conversations = 20;
  o.turns = 5;
  o.concurrency = 1;
  o.partial_tail = false;
  // One conversation at a time: each request extends the one before, except at the 20 starts.
  auto serial = Generate(o);
  int extends = 0;
  for (std::size_t i = 1; i < serial.size(); ++i) {
    const auto& a = serial[i - 1].hash_ids;
    const auto& b = serial[i].hash_ids;
    extends += b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  EXPECT_EQ(extends, 20 * 4);
  o.concurrency = 8;
  auto mixed = Generate(o);
  extends = 0;
  for (std::size_t i = 1; i < mixed.size(); ++i) {
    const auto& a = mixed[i - 1].hash_ids;
    const auto& b = mixed[i].hash_ids;
    extends += b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  EXPECT_LT(extends, 40);
}

// One-off conversations have a single turn: with share 0.5 about half of the 400 conversations
// send one request, the others all their turns; nothing of a one-off but its system prompt is
// ever sent again. Share 0 draws nothing, so such traces are what they were without the option.
TEST(SyntheticTraceTest, OneOffShareGivesSingleTurnConversations) {
  SyntheticTraceOptions o;
  o.conversations = 400;
  o.turns = 5;
  o.partial_tail = false;
  const auto none = Generate(o);
  EXPECT_EQ(none.size(), 2000u);
  SyntheticTraceOptions zero = o;
  zero.one_off_share = 0.0;
  EXPECT_EQ(Generate(zero), none);
  o.one_off_share = 0.5;
  const auto trace = Generate(o);
  // requests = one-offs + 5 * (400 - one-offs)
  ASSERT_EQ((2000 - trace.size()) % 4, 0u);
  const std::size_t one_offs = (2000 - trace.size()) / 4;
  EXPECT_GT(one_offs, 150u);
  EXPECT_LT(one_offs, 250u);
  // A request no later request extends (beyond its system prompt) ends a conversation: the 400
  // conversations end 400 times.
  std::size_t ends = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    bool extended = false;
    for (std::size_t j = i + 1; j < trace.size() && !extended; ++j) {
      const auto& a = trace[i].hash_ids;
      const auto& b = trace[j].hash_ids;
      extended = b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin());
    }
    ends += extended ? 0 : 1;
  }
  EXPECT_EQ(ends, 400u);
  o.turns = 1;
  EXPECT_EQ(Generate(o).size(), 400u);
}

TEST(SyntheticTraceTest, ValidatesOptions) {
  auto bad = [](auto edit, const std::string& field) {
    SyntheticTraceOptions o;
    edit(o);
    const Status s = o.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
    EXPECT_FALSE(GenerateSyntheticTrace(o).ok());
  };
  bad([](SyntheticTraceOptions& o) { o.conversations = 0; }, "conversations");
  bad([](SyntheticTraceOptions& o) { o.turns = 0; }, "turns");
  bad([](SyntheticTraceOptions& o) { o.turn_blocks_min = 0; }, "turn_blocks_min");
  bad([](SyntheticTraceOptions& o) { o.turn_blocks_max = 0; }, "turn_blocks_max");
  bad([](SyntheticTraceOptions& o) { o.concurrency = 0; }, "concurrency");
  bad([](SyntheticTraceOptions& o) { o.system_prompts = -1; }, "system_prompts");
  bad([](SyntheticTraceOptions& o) { o.block_tokens = 1; }, "block_tokens");
  bad([](SyntheticTraceOptions& o) { o.one_off_share = -0.1; }, "one_off_share");
  bad([](SyntheticTraceOptions& o) { o.one_off_share = 1.5; }, "one_off_share");
  SyntheticTraceOptions no_prompts;
  no_prompts.system_prompts = 0;
  no_prompts.conversations = 3;
  EXPECT_EQ(Generate(no_prompts).size(), 18u);
}

}  // namespace
}  // namespace kvmesh
