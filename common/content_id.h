// ContentId: the identity of a block's content outside this process — in events, tier keys, peer
// messages and bundles.
//
// It is the first 128 bits of a SHA-256 digest (OpenSSL) of everything that determines the block's
// KV (see pool/block_key.h for what goes in). 128 bits of a cryptographic hash: a collision cannot
// be planted by choosing tokens, unlike a 64-bit or non-cryptographic id. Inside the process the
// prefix tree still compares full keys.
//
// Sha256 is an incremental hasher; reusing one object (Finish resets it) costs no allocation.
// Thread safety: ContentId is a value; a Sha256 object is externally synchronised.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvmesh {

struct ContentId {
  static constexpr std::size_t kBytes = 16;
  std::array<std::uint8_t, kBytes> bytes{};

  [[nodiscard]] bool IsZero() const {
    for (auto b : bytes) {
      if (b != 0) return false;
    }
    return true;
  }
  // 32 lower-case hex characters.
  [[nodiscard]] std::string ToHex() const;
  static Result<ContentId> FromHex(std::string_view hex);

  friend bool operator==(const ContentId& a, const ContentId& b) { return a.bytes == b.bytes; }
  friend auto operator<=>(const ContentId& a, const ContentId& b) { return a.bytes <=> b.bytes; }
};

struct ContentIdHash {
  std::size_t operator()(const ContentId& id) const {
    std::size_t h;  // the id is already uniformly distributed
    std::memcpy(&h, id.bytes.data(), sizeof(h));
    return h;
  }
};

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, std::size_t size);
  template <typename T>
  void UpdateValue(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    Update(&value, sizeof(value));
  }
  // The full digest; the hasher is reset and may be reused.
  std::array<std::uint8_t, 32> Finish();
  // The first 128 bits of the digest; the hasher is reset and may be reused.
  ContentId FinishContentId();

  // One-shot digest of a buffer.
  static std::array<std::uint8_t, 32> Digest(const void* data, std::size_t size);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvmesh

template <>
struct std::hash<kvmesh::ContentId> : kvmesh::ContentIdHash {};
