// The primary memory the pools live in: the current CUDA device when kvmesh was built with CUDA and
// a device is present, else host memory (the CPU backend, a real execution target).
//
// DetectPrimaryMemory() asks cudaMemGetInfo (which creates the CUDA context of the device if there
// is none yet) or reads MemAvailable from /proc/meminfo. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvmesh {

enum class PrimaryMemoryKind : std::uint8_t { kGpu = 0, kHost = 1 };
std::string_view PrimaryMemoryKindName(PrimaryMemoryKind k);  // "gpu", "host"

struct PrimaryMemory {
  PrimaryMemoryKind kind = PrimaryMemoryKind::kHost;
  std::int32_t device = -1;  // CUDA device ordinal for kGpu
  std::int64_t free_bytes = 0;
  std::int64_t total_bytes = 0;
  std::string source;  // "cudaMemGetInfo(device 0)", "/proc/meminfo MemAvailable"
};

// Errors: kIoError when neither a device nor /proc/meminfo can be read.
Result<PrimaryMemory> DetectPrimaryMemory();

// The free and total memory of CUDA device `device` (cudaMemGetInfo with that device current; the
// calling thread's current device is restored). kNotSupported when kvmesh was built without CUDA,
// kNotFound when the device does not exist (the message gives how many there are), kCudaError
// when the query fails.
Result<PrimaryMemory> DetectDeviceMemory(int device);

// How many CUDA devices this process sees (0 without CUDA or without a driver).
int CudaDeviceCount();

// Parses /proc/meminfo text: {MemAvailable, MemTotal} in bytes (the file gives kB), or
// kCorruption naming the missing or malformed line.
Result<PrimaryMemory> ParseMeminfo(std::string_view meminfo);

}  // namespace kvmesh
