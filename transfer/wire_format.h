// The transfer engine's active-message headers (internal to transfer/; docs/transfer.md has the
// table). Fixed-size structs in host byte order (little-endian on every kvmesh target), copied out
// of the message before any field is read (no alignment is assumed), validated before use. They
// carry ids, indexes and lengths — never an address.
//
//   data  (AM id kAmData, rendezvous, payload = one slice's bytes, sender → receiver)
//     magic u32 | version u16 | kind u16 = 1 | transfer u64 | slice u32 | reserved u32 = 0 |
//     length u64
//   done  (AM id kAmDone, eager, no payload, receiver → sender, once per grant when it completes)
//     magic u32 | version u16 | kind u16 = 2 | transfer u64 | status u32 | filled u32
//
// Thread safety: pure functions and values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "common/status.h"

namespace kvmesh::wire {

inline constexpr unsigned kAmData = 0x21;
inline constexpr unsigned kAmDone = 0x22;
inline constexpr std::uint32_t kMagic = 0x544d564bu;  // "KVMT"
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::uint16_t kKindData = 1;
inline constexpr std::uint16_t kKindDone = 2;

struct DataHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t kind = kKindData;
  std::uint64_t transfer = 0;
  std::uint32_t slice = 0;
  std::uint32_t reserved = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(DataHeader) == 32);

struct DoneHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t kind = kKindDone;
  std::uint64_t transfer = 0;
  std::uint32_t status = 0;  // a StatusCode
  std::uint32_t filled = 0;  // slices filled when the grant completed
};
static_assert(sizeof(DoneHeader) == 24);

// The header of a data message, or nothing when it is not one (size, magic, version, kind, ...).
inline std::optional<DataHeader> ParseDataHeader(const void* bytes, std::size_t length) {
  if (bytes == nullptr || length != sizeof(DataHeader)) return std::nullopt;
  DataHeader header;
  std::memcpy(&header, bytes, sizeof(header));
  if (header.magic != kMagic || header.version != kVersion || header.kind != kKindData ||
      header.reserved != 0 || header.transfer == 0) {
    return std::nullopt;
  }
  return header;
}

inline std::optional<DoneHeader> ParseDoneHeader(const void* bytes, std::size_t length) {
  if (bytes == nullptr || length != sizeof(DoneHeader)) return std::nullopt;
  DoneHeader header;
  std::memcpy(&header, bytes, sizeof(header));
  if (header.magic != kMagic || header.version != kVersion || header.kind != kKindDone ||
      header.transfer == 0 || header.status > static_cast<std::uint32_t>(StatusCode::kInternal)) {
    return std::nullopt;
  }
  return header;
}

}  // namespace kvmesh::wire
