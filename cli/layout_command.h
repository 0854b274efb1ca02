// `kvctl layout`: the pool plan of a model and cache config, without a running node.
//
//   kvctl layout (--model NAME | --hf-config PATH) [--dtype D] [--layout HND|NHD]
//                [--tokens-per-block N] [--gpu-memory BYTES] [--max-tokens N]
//                [--free-gpu-memory-fraction F] [--pool-shares A,B,..] [--nvfp4-global-scale GS |
//                --nvfp4-expected-amax A] [--fp8-per-tensor-scale S] [--index-fp4] [--json]
//
// Prints one row per pool (key, layers, shape, strides, bytes per block of each component, bytes
// per token, blocks, tokens) and a picture of how one block lies in memory; --json prints the
// stable machine format of docs/kvctl.md instead. `--model list` lists the presets.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <optional>
#include <string>

#include "cli/command.h"

namespace kvmesh::cli {

struct LayoutOptions {
  std::string model;      // preset name, or "list"
  std::string hf_config;  // path of a config.json or of its directory
  std::string dtype = "bf16";
  std::string layout = "HND";
  int tokens_per_block = 32;
  std::string gpu_memory;  // empty: DetectPrimaryMemory()
  std::string max_tokens;  // empty: no bound
  double free_gpu_memory_fraction = 0.9;
  std::string pool_shares;  // "0.75,0.25"
  std::string nvfp4_global_scale;
  std::string nvfp4_expected_amax;
  std::string fp8_per_tensor_scale;
  bool index_fp4 = false;
  bool json = false;
};

void RegisterLayoutCommand(CLI::App& app, CommandOutcome& outcome);

// Runs the command with parsed options, printing to `out`.
Status RunLayout(const LayoutOptions& options, std::ostream& out);

}  // namespace kvmesh::cli
