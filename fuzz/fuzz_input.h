// FuzzInput: typed values read off the front of a fuzz input, for the targets in fuzz/ (what
// libFuzzer's FuzzedDataProvider does, in a few lines, so that the targets also build with GCC and
// without libFuzzer for the corpus replay test). Past the end every read gives zeros or nothing,
// so a target never has to check the size itself.
//
// Every target defines the libFuzzer entry point
//   extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
// which returns 0 and aborts (KVMESH_CHECK) when one of its oracles fails: a crash, for libFuzzer.
//
// Thread safety: a value; externally synchronised.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace kvmesh::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t U8() {
    if (pos_ >= size_) return 0;
    return data_[pos_++];
  }
  std::uint16_t U16() { return static_cast<std::uint16_t>(U8() | (U8() << 8)); }
  std::uint32_t U32() { return U16() | (static_cast<std::uint32_t>(U16()) << 16); }
  std::uint64_t U64() { return U32() | (static_cast<std::uint64_t>(U32()) << 32); }
  bool Bool() { return (U8() & 1) != 0; }
  // A value in [0, n). REQUIRES: n > 0.
  std::uint32_t Below(std::uint32_t n) { return U32() % n; }

  // Up to `n` bytes.
  std::span<const std::uint8_t> Bytes(std::size_t n) {
    const std::size_t take = std::min(n, remaining());
    std::span<const std::uint8_t> out(data_ + pos_, take);
    pos_ += take;
    return out;
  }
  std::string String(std::size_t n) {
    const auto b = Bytes(n);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  // Everything not read yet.
  std::span<const std::uint8_t> Rest() { return Bytes(remaining()); }
  [[nodiscard]] std::size_t remaining() const { return size_ - pos_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

inline std::string_view AsText(std::span<const std::uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

inline std::span<const std::byte> AsBytes(std::span<const std::uint8_t> bytes) {
  return std::as_bytes(bytes);
}

}  // namespace kvmesh::fuzz
