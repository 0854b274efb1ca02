// Xxh3Stream: XXH3-128 (seed 0, the default secret) over a stream of pieces, computed by kvmesh's
// own loop so that a piece can be hashed *and copied* in one pass over its bytes: CopyUpdate loads
// each 64-byte stripe of the source once, feeds it to the hash and stores it to the destination
// (non-temporal stores where the destination allows). libxxhash's streaming API can only hash, so
// copy-then-hash reads every byte twice from the cache and pays both loops; this is what kept the
// host tier's single-thread onboard and offload near 0.65 of a memcpy (issue 16).
//
// The digest is bit-for-bit libxxhash's XXH3_128bits over the concatenated pieces, for every
// length and every way of cutting the stream into pieces (tests/store/xxh3_stream_test.cc checks it
// against the library; the bundle format is unchanged). The default secret comes from the library
// at first use (XXH3_generateSecret_fromSeed with seed 0, which is the default secret), and inputs
// of at most 240 bytes — a different algorithm in XXH3 — are hashed by the library at Digest.
//
// The algorithm (XXH3's long-input hash, from its specification): eight 64-bit accumulators; every
// 64-byte stripe is mixed in with 8 bytes more of the secret than the one before, and after 16
// stripes (a 1 KiB block) the accumulators are scrambled; the last 64 bytes of the input are mixed
// in once more with their own secret offset; two merges of the accumulators give the two halves.
// A stripe is mixed in only once a byte after it is known (the hash of a length that is a multiple
// of 64 treats its last stripe differently), so the stream holds back between 1 and 64 bytes.
//
// Copies: CopyUpdate issues non-temporal stores and does not fence; call StreamingFence()
// (store/stream_copy.h) after the last piece, before the destination is published to another
// thread. The stripe loop is AVX-512 where the CPU has it (a fused copy and hash of scattered
// 256 KiB blocks on the 2-core VM: 9.3-10.2 GB/s, against 9.0-9.5 with AVX2 and 10.5 for the
// streaming copy alone), else AVX2, else scalar. ThreadSanitizer builds and non-x86 builds use the
// scalar loop and memcpy (TSan does not see accesses wider than 16 bytes); AddressSanitizer checks
// the vector loops' loads and stores, so ASan builds run them. The file is compiled at -O2 in every
// build (store/CMakeLists.txt).
//
// Thread safety: one stream per thread (no internal locking). REQUIRES for CopyUpdate: the ranges
// do not overlap.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace kvmesh {

// The stripe loop's instruction set: kBest picks the widest the CPU has; tests name one to check
// each against the library.
enum class Xxh3Isa { kBest, kScalar, kAvx2, kAvx512 };

class Xxh3Stream {
 public:
  // REQUIRES: Supported(isa).
  explicit Xxh3Stream(Xxh3Isa isa = Xxh3Isa::kBest);
  // Whether this build and CPU can run isa.
  static bool Supported(Xxh3Isa isa);

  // Hashes n bytes at p.
  void Update(const void* p, std::size_t n);
  // Copies n bytes from src to dst and hashes them, reading each source byte once.
  void CopyUpdate(void* dst, const void* src, std::size_t n);

  // Copies and hashes outer × inner rows of row_bytes each, read one after another from src (row
  // (i, j) at src + (i * inner + j) * row_bytes) and written to dst + i * outer_stride +
  // j * inner_stride: a layout conversion (HND <-> NHD) in the same pass as the hash, which covers
  // the source bytes in order, as Update(src, outer * inner * row_bytes) would. Rows of whole
  // stripes, with the stream at a stripe boundary, go through the stripe loop row by row; otherwise
  // the source is hashed, then the rows are copied from the cache.
  void CopyUpdateRows(std::byte* dst, std::ptrdiff_t outer_stride, std::ptrdiff_t inner_stride,
                      std::int64_t outer, std::int64_t inner, const std::byte* src,
                      std::size_t row_bytes);

  // The canonical (big-endian) XXH3-128 of everything fed so far, as libxxhash's
  // XXH128_canonicalFromHash writes it. The stream stays usable (more pieces may follow).
  std::array<std::byte, 16> Digest() const;

  std::uint64_t total_bytes() const { return total_; }

 private:
  template <bool kCopy>
  void Feed(std::uint8_t* dst, const std::uint8_t* src, std::size_t n);
  void MixBufferedStripe();

  alignas(64) std::uint64_t acc_[8];
  alignas(64) std::uint8_t buf_[64];   // the held-back bytes: buffered_ of them, 1..64 once fed
  alignas(64) std::uint8_t last_[64];  // the last stripe mixed in (for Digest's final stripe)
  std::uint8_t head_[240];             // the first bytes, for inputs of at most 240 bytes
  std::uint64_t total_ = 0;
  std::size_t buffered_ = 0;
  int stripe_in_block_ = 0;  // stripes of the current 1 KiB block already mixed in
  Xxh3Isa isa_;
};

}  // namespace kvmesh
