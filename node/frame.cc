#include "node/frame.h"

#include <cstring>

#include "common/strings.h"

namespace kvmesh {
namespace {

std::uint32_t LoadU32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}
std::uint16_t LoadU16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<std::uint16_t>(p[0]) |
                                    (std::to_integer<std::uint16_t>(p[1]) << 8));
}

}  // namespace

FrameHeaderBytes EncodeFrameHeader(std::uint32_t payload_length) {
  FrameHeaderBytes h{};
  for (int i = 0; i < 4; ++i) h[i] = static_cast<std::byte>(payload_length >> (8 * i));
  h[4] = static_cast<std::byte>(kFrameVersion & 0xff);
  h[5] = static_cast<std::byte>(kFrameVersion >> 8);
  return h;
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte, kFrameHeaderBytes> bytes,
                                      std::uint32_t max_length) {
  FrameHeader h;
  h.length = LoadU32(bytes.data());
  h.version = LoadU16(bytes.data() + 4);
  h.flags = LoadU16(bytes.data() + 6);
  if (h.version != kFrameVersion) {
    return Status::InvalidArgument(StrCat(
        "frame version ", h.version, " is not supported (this node speaks ", kFrameVersion, ")"));
  }
  if (h.flags != 0) return Status::InvalidArgument(StrCat("frame flags ", h.flags, " are not 0"));
  if (h.length > max_length) {
    return Status::InvalidArgument(
        StrCat("frame of ", h.length, " bytes exceeds the limit of ", max_length, " bytes"));
  }
  return h;
}

Result<std::string> EncodeFrame(const rpc::Frame& frame, std::uint32_t max_length) {
  const std::size_t size = frame.ByteSizeLong();
  if (size > max_length) {
    return Status::InvalidArgument(
        StrCat("message of ", size, " bytes exceeds the frame limit of ", max_length, " bytes"));
  }
  std::string out(kFrameHeaderBytes + size, '\0');
  const FrameHeaderBytes h = EncodeFrameHeader(static_cast<std::uint32_t>(size));
  std::memcpy(out.data(), h.data(), h.size());
  if (!frame.SerializeToArray(out.data() + kFrameHeaderBytes, static_cast<int>(size))) {
    return Status::Internal("serialising a frame failed");
  }
  return out;
}

Result<rpc::Frame> DecodeFramePayload(std::span<const std::byte> payload) {
  rpc::Frame frame;
  if (!frame.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Status::Corruption(StrCat("frame payload of ", payload.size(), " bytes does not parse"));
  }
  if (frame.kind_case() == rpc::Frame::KIND_NOT_SET) {
    return Status::InvalidArgument("unknown message type");
  }
  return frame;
}

void FrameDecoder::Feed(std::span<const std::byte> bytes) {
  if (consumed_ > 0 && consumed_ * 2 >= buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Result<std::optional<rpc::Frame>> FrameDecoder::Next() {
  if (!failed_.ok()) return failed_;
  if (buffered() < kFrameHeaderBytes) return std::optional<rpc::Frame>();
  const auto* base = reinterpret_cast<const std::byte*>(buffer_.data()) + consumed_;
  auto header = DecodeFrameHeader(
      std::span<const std::byte, kFrameHeaderBytes>(base, kFrameHeaderBytes), max_length_);
  if (!header.ok()) {
    failed_ = header.status();
    return failed_;
  }
  if (buffered() < kFrameHeaderBytes + header->length) return std::optional<rpc::Frame>();
  auto frame = DecodeFramePayload(std::span(base + kFrameHeaderBytes, header->length));
  consumed_ += kFrameHeaderBytes + header->length;
  if (!frame.ok()) return frame.status();
  return std::optional<rpc::Frame>(std::move(frame).value());
}

}  // namespace kvmesh
