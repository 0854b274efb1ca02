// Frames: how control-plane messages (node/proto/kvmesh_rpc.proto) travel on a byte stream.
//
//   [ length u32 LE | version u16 LE | flags u16 LE ][ payload: a serialised rpc::Frame ]
//     8-byte header                                    `length` bytes
//
// `version` is kFrameVersion; `flags` is 0 (reserved). A receiver checks the header before reading
// the payload: a length above its limit (kvnode: 1 KiB before authentication, max_frame_size after)
// or another version is an error and the connection is closed, so a peer can never make the node
// allocate more than the limit. A payload that does not parse as an rpc::Frame is kCorruption; a
// Frame that parses but carries no known message (the oneof unset: an unknown or missing message
// type) is kInvalidArgument "unknown message type".
//
// FrameDecoder does the same incrementally over bytes as they arrive (the client, the fuzzer).
//
// Thread safety: functions are pure; a FrameDecoder is externally synchronised.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/result.h"
#include "node/proto/kvmesh_rpc.pb.h"

namespace kvmesh {

inline constexpr std::size_t kFrameHeaderBytes = 8;
inline constexpr std::uint16_t kFrameVersion = 1;
// Before authentication only the handshake is accepted, in frames of at most this many bytes.
inline constexpr std::uint32_t kHandshakeMaxFrameBytes = 1024;

struct FrameHeader {
  std::uint32_t length = 0;
  std::uint16_t version = kFrameVersion;
  std::uint16_t flags = 0;
};

using FrameHeaderBytes = std::array<std::byte, kFrameHeaderBytes>;

FrameHeaderBytes EncodeFrameHeader(std::uint32_t payload_length);

// kInvalidArgument: another version, flags set, or a length above `max_length` (the message gives
// both numbers).
Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte, kFrameHeaderBytes> bytes,
                                      std::uint32_t max_length);

// Header + payload of `frame`. kInvalidArgument when the payload exceeds `max_length`.
Result<std::string> EncodeFrame(const rpc::Frame& frame, std::uint32_t max_length);

// Parses a payload. kCorruption when it does not parse; kInvalidArgument when it parses but holds
// no known message.
Result<rpc::Frame> DecodeFramePayload(std::span<const std::byte> payload);

// Incremental decoder: Feed() bytes, then Next() until it returns nullopt.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::uint32_t max_length) : max_length_(max_length) {}

  void set_max_length(std::uint32_t max_length) { max_length_ = max_length; }
  void Feed(std::span<const std::byte> bytes);
  // A complete frame, nullopt when more bytes are needed, or the error of a bad header or payload
  // (after a header error the decoder stays failed: the stream cannot be resynchronised).
  Result<std::optional<rpc::Frame>> Next();
  [[nodiscard]] std::size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  std::uint32_t max_length_;
  std::string buffer_;
  std::size_t consumed_ = 0;
  Status failed_;
};

}  // namespace kvmesh
