// Fuzz target frame_decoder: node/frame.h over arbitrary byte streams.
//
// Input: [limit selector u8][chunking seed u8][stream...]. The stream goes through
//   - DecodeFrameHeader of its first 8 bytes (any accepted header re-encodes to the same bytes and
//     respects the limit), and
//   - a FrameDecoder fed in chunks of 1..64 bytes (sizes from the seed), Next() drained after
//     every Feed,
// and the frames and errors the chunked decoder gives must equal those of a one-shot reference
// decoding of the whole stream (DecodeFrameHeader + DecodeFramePayload in a loop): incremental
// decoding changes nothing. Also: after a header error the decoder stays failed; while it waits
// for bytes it never holds more than one frame (header + limit); a decoded frame re-serialises
// to bytes that parse back to the same bytes.
#include <optional>
#include <vector>

#include "common/check.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/quiet_protobuf.h"
#include "node/frame.h"

namespace kvmesh::fuzz {
namespace {

// One outcome of decoding: a frame (its serialised bytes) or an error.
struct Outcome {
  bool ok = false;
  std::string frame_bytes;  // the frame, serialised again
  StatusCode code = StatusCode::kOk;
  std::string message;
  friend bool operator==(const Outcome&, const Outcome&) = default;
};

Outcome OutcomeOf(const Result<rpc::Frame>& r) {
  Outcome o;
  o.ok = r.ok();
  if (r.ok()) {
    o.frame_bytes = r->SerializeAsString();
    rpc::Frame again;
    KVMESH_CHECK(again.ParseFromString(o.frame_bytes)) << "a decoded frame does not parse again";
    KVMESH_CHECK(again.SerializeAsString() == o.frame_bytes) << "re-serialising changed a frame";
  } else {
    o.code = r.status().code();
    o.message = r.status().message();
  }
  return o;
}

// The whole stream at once: what the decoder must give, however the bytes arrive.
std::vector<Outcome> Reference(std::span<const std::byte> s, std::uint32_t limit) {
  std::vector<Outcome> out;
  std::size_t at = 0;
  while (s.size() - at >= kFrameHeaderBytes) {
    auto header = DecodeFrameHeader(s.subspan(at).first<kFrameHeaderBytes>(), limit);
    if (!header.ok()) {
      out.push_back(OutcomeOf(header.status()));
      break;
    }
    if (s.size() - at - kFrameHeaderBytes < header->length) break;
    out.push_back(OutcomeOf(DecodeFramePayload(s.subspan(at + kFrameHeaderBytes, header->length))));
    at += kFrameHeaderBytes + header->length;
  }
  return out;
}

void CheckHeader(std::span<const std::byte> s, std::uint32_t limit) {
  if (s.size() < kFrameHeaderBytes) return;
  const auto bytes = s.first<kFrameHeaderBytes>();
  auto h = DecodeFrameHeader(bytes, limit);
  if (!h.ok()) {
    KVMESH_CHECK(h.status().IsInvalidArgument()) << h.status().ToString();
    return;
  }
  KVMESH_CHECK_LE(h->length, limit);
  KVMESH_CHECK_EQ(h->version, kFrameVersion);
  KVMESH_CHECK_EQ(h->flags, 0);
  const FrameHeaderBytes again = EncodeFrameHeader(h->length);
  KVMESH_CHECK(std::equal(again.begin(), again.end(), bytes.begin())) << "header re-encodes";
}

}  // namespace
}  // namespace kvmesh::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  using namespace kvmesh::fuzz;
  kvmesh::fuzz::QuietProtobuf();
  FuzzInput in(data, size);
  constexpr std::uint32_t kLimits[] = {kHandshakeMaxFrameBytes, 4u << 20, 0, 16, 300};
  const std::uint32_t limit = kLimits[in.U8() % std::size(kLimits)];
  std::uint32_t rng = in.U8() * 2654435761u + 1;
  const std::span<const std::byte> stream = AsBytes(in.Rest());
  CheckHeader(stream, limit);

  const std::vector<Outcome> expected = Reference(stream, limit);
  std::vector<Outcome> got;
  FrameDecoder decoder(limit);
  std::size_t fed = 0;
  bool failed = false;
  while (fed < stream.size() && !failed) {
    rng = rng * 1103515245u + 12345u;
    const std::size_t n = std::min<std::size_t>(1 + (rng >> 16) % 64, stream.size() - fed);
    decoder.Feed(stream.subspan(fed, n));
    fed += n;
    while (true) {
      Result<std::optional<rpc::Frame>> next = decoder.Next();
      if (!next.ok()) {
        got.push_back(OutcomeOf(next.status()));
        // A header error leaves the decoder failed: the same error again, whatever comes.
        // (Payload errors are kCorruption or "unknown message type"; header errors the rest.)
        if (next.status().IsInvalidArgument() &&
            next.status().message() != "unknown message type") {
          failed = true;
          decoder.Feed(stream.subspan(0, std::min<std::size_t>(stream.size(), 8)));
          const auto again = decoder.Next();
          KVMESH_CHECK(!again.ok() && again.status() == next.status()) << "decoder recovered";
          break;
        }
        continue;
      }
      if (!next->has_value()) {
        // Waiting for more bytes: at most one frame's header and payload are held.
        KVMESH_CHECK_LT(decoder.buffered(), kFrameHeaderBytes + std::size_t{limit});
        break;
      }
      got.push_back(OutcomeOf(**next));
    }
  }
  KVMESH_CHECK(got == expected) << "chunked decoding gave " << got.size() << " outcomes, one-shot "
                                << expected.size();
  return 0;
}
