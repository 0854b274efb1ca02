// CopyStreaming: memcpy for large block copies whose destination is not read again soon (tier
// slots, restored pool blocks): non-temporal stores, so the destination's cache lines are not read
// from memory before being overwritten (no read-for-ownership) and do not evict the source from the
// cache. Moves the bytes memory touches from three per byte copied (read, read-for-ownership,
// write) to two, as glibc's memcpy does by itself only for copies larger than a large part of the
// last-level cache. Small copies (under 4 KiB), non-x86 builds and sanitizer builds (so that ASan
// and TSan see every access) use memcpy.
//
// Completion: the stores are fenced (sfence) before return, so the bytes are visible to other
// threads that synchronise with this one afterwards, as after memcpy.
//
// Thread safety: reentrant. REQUIRES: the ranges do not overlap.
#pragma once

#include <cstddef>

namespace kvmesh {

inline constexpr std::size_t kStreamingCopyMinBytes = 4096;

void CopyStreaming(void* dst, const void* src, std::size_t n);

// One piece of a copy made of many small pieces (rows scattered by a layout conversion): the
// destination's whole 16-byte units with non-temporal stores whatever the size, the rest with
// memcpy, and no fence: call StreamingFence() once after the last piece, before the bytes are
// published to another thread.
void CopyStreamingPiece(void* dst, const void* src, std::size_t n);
void StreamingFence();

}  // namespace kvmesh
