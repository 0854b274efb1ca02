// Fuzz target trace_reader: the Mooncake trace reader (pool/trace.h) — ParseTraceLine on
// arbitrary text and TraceReader on arbitrary files.
//
// Input: [line bound u8][chunk size u8][file...]. The file is written to a memfd and read through
// /proc/self/fd/N with a TraceReader whose line bound (kMaxTraceLineBytes, or 1..255 bytes) and
// read chunk (kTraceReadChunkBytes, or 1..255 bytes) come from the input, so that small inputs
// reach the bound and every chunk boundary.
// Oracles:
//   - ParseTraceLine of the whole file (as one line): an error is kInvalidArgument naming the
//     place; an accepted request formats (FormatTraceLine) to a line that parses back to it;
//   - the reader gives exactly what a reference gives — the file split at '\n', blank lines
//     skipped, each other line through ParseTraceLine with "path:N", a line longer than the bound
//     an error "path:N: line longer than B bytes" — then nullopt, or after an error the same
//     error forever; line_number() is the line of the last request or error;
//   - the reader never holds more than the bound plus one chunk.
#include <sys/mman.h>
#include <unistd.h>

#include "common/check.h"
#include "common/strings.h"
#include "fuzz/fuzz_input.h"
#include "pool/trace.h"

namespace kvmesh::fuzz {
namespace {

bool Blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void CheckLine(std::string_view text) {
  Result<TraceRequest> r = ParseTraceLine(text, "fuzz:1");
  if (!r.ok()) {
    KVMESH_CHECK(r.status().IsInvalidArgument()) << r.status().ToString();
    KVMESH_CHECK(r.status().message().starts_with("fuzz:1: ")) << r.status().ToString();
    return;
  }
  const std::string line = FormatTraceLine(*r);
  Result<TraceRequest> back = ParseTraceLine(line, "formatted");
  KVMESH_CHECK(back.ok()) << back.status().ToString() << " for " << line;
  KVMESH_CHECK(*back == *r) << "FormatTraceLine does not round-trip: " << line;
}

// What the reader must give: requests, then nullopt or one error (with its line number).
struct Expected {
  std::vector<std::pair<TraceRequest, std::int64_t>> requests;  // with their line numbers
  std::optional<Status> error;
  std::int64_t error_line = 0;
};

Expected Reference(std::string_view file, const std::string& path, std::size_t bound) {
  Expected e;
  std::int64_t number = 0;
  std::size_t at = 0;
  while (at < file.size()) {
    const std::size_t nl = file.find('\n', at);
    const std::string_view line =
        file.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? file.size() : nl + 1;
    ++number;
    if (line.size() > bound) {
      e.error = Status::InvalidArgument(
          StrCat(path, ":", number, ": line longer than ", bound, " bytes"));
      e.error_line = number;
      return e;
    }
    if (Blank(line)) continue;
    Result<TraceRequest> r = ParseTraceLine(line, StrCat(path, ":", number));
    if (!r.ok()) {
      e.error = r.status();
      e.error_line = number;
      return e;
    }
    e.requests.emplace_back(std::move(r).value(), number);
  }
  return e;
}

}  // namespace
}  // namespace kvmesh::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  using namespace kvmesh::fuzz;
  FuzzInput in(data, size);
  const std::uint8_t bound_byte = in.U8();
  const std::uint8_t chunk_byte = in.U8();
  const std::size_t bound = bound_byte == 0 ? kMaxTraceLineBytes : bound_byte;
  const std::size_t chunk = chunk_byte == 0 ? kTraceReadChunkBytes : chunk_byte;
  const std::string_view file = AsText(in.Rest());
  CheckLine(file);

  const int fd = ::memfd_create("fuzz-trace", MFD_CLOEXEC);
  KVMESH_CHECK(fd >= 0);
  KVMESH_CHECK(::write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size()));
  const std::string path = StrCat("/proc/self/fd/", fd);
  {
    Result<TraceReader> reader = TraceReader::Open(path, bound, chunk);
    KVMESH_CHECK(reader.ok()) << reader.status().ToString();
    const Expected want = Reference(file, path, bound);
    for (const auto& [request, line] : want.requests) {
      Result<std::optional<TraceRequest>> r = reader->Next();
      KVMESH_CHECK(r.ok()) << r.status().ToString();
      KVMESH_CHECK(r->has_value() && **r == request) << "line " << line << " differs";
      KVMESH_CHECK_EQ(reader->line_number(), line);
    }
    for (int again = 0; again < 2; ++again) {
      Result<std::optional<TraceRequest>> r = reader->Next();
      if (want.error) {
        KVMESH_CHECK(!r.ok() && r.status() == *want.error)
            << "expected " << want.error->ToString() << ", got "
            << (r.ok() ? std::string("a request") : r.status().ToString());
        KVMESH_CHECK_EQ(reader->line_number(), want.error_line);
      } else {
        KVMESH_CHECK(r.ok() && !r->has_value()) << "expected the end of the file";
      }
    }
    KVMESH_CHECK_LE(reader->buffer_bytes(), bound + chunk);
  }
  ::close(fd);
  return 0;
}
