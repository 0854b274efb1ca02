// The result of `kvctl layout` and its two renderings: the operator's table with a picture of one
// block (PrintLayoutText) and the stable machine format of docs/kvctl.md (PrintLayoutJson).
// Not thread-safe (plain values and streams).
#pragma once

#include <iosfwd>
#include <string>

#include "pool/model_spec.h"
#include "pool/pool_plan.h"

namespace kvmesh::cli {

struct LayoutReport {
  ModelSpec model;
  std::string preset;     // the preset name, or empty
  std::string hf_config;  // the config.json path, or empty
  PoolPlan plan;
  std::string memory_kind;    // "gpu", "host" (detected) or "given" (--gpu-memory)
  std::string memory_source;  // "--gpu-memory", "cudaMemGetInfo(device 0)", ...
};

void PrintLayoutText(const LayoutReport& report, std::ostream& out);
void PrintLayoutJson(const LayoutReport& report, std::ostream& out);

// "0-4,6-10,12-16" (ascending ids as ranges).
std::string LayerRanges(const std::vector<std::int32_t>& layers);

}  // namespace kvmesh::cli
