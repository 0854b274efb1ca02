// Built-in model presets: the attention geometry of well-known models, from their public Hugging
// Face config.json files, so that `kvctl layout --model llama-3-8b` and tests need no download.
//
// clang-format off
//   preset          model                            layers  q heads  kv heads  head_dim  windows
//   llama-3-8b      meta-llama/Meta-Llama-3-8B          32      32        8        128    full
//   llama-3-70b     meta-llama/Meta-Llama-3-70B         80      64        8        128    full
//   llama-3.2-1b    meta-llama/Llama-3.2-1B             16      32        8         64    full
//   mistral-7b      mistralai/Mistral-7B-v0.3           32      32        8        128    full
//   qwen2.5-0.5b    Qwen/Qwen2.5-0.5B                   24      14        2         64    full
//   qwen3-8b        Qwen/Qwen3-8B                       36      32        8        128    full
//   gemma-2-9b      google/gemma-2-9b                   42      16        8        256    4096 on even layers
//   gemma-3-27b     google/gemma-3-27b-it               62      32       16        128    1024; layer i global iff (i+1)%6==0
//   gpt-oss-20b     openai/gpt-oss-20b                  24      64        8         64    128 on even layers
//   gpt-oss-120b    openai/gpt-oss-120b                 36      64        8         64    128 on even layers
//   deepseek-v3     deepseek-ai/DeepSeek-V3             61     128    MLA 1     512+64    full
//   deepseek-v3.2   deepseek-ai/DeepSeek-V3.2-Exp       61     128    MLA 1     512+64    full; indexer K 128 on every layer
// clang-format on
//
// The two small ones (llama-3.2-1b, qwen2.5-0.5b: 32 KiB and 12 KiB of bf16 KV per token) let real
// bytes flow through a node on a machine without a GPU (kvnode's default model is qwen2.5-0.5b).
//
// Thread-safe (immutable tables, pure functions).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "pool/model_spec.h"

namespace kvmesh {

struct ModelPresetInfo {
  std::string_view name;     // "llama-3-8b"
  std::string_view hf_id;    // "meta-llama/Meta-Llama-3-8B"
  std::string_view summary;  // one line for listings
};

// Every preset, in a stable order.
std::span<const ModelPresetInfo> ModelPresets();

// The preset names joined by ", " (for error messages and help text).
std::string ListPresets();

// The spec of a preset (name case-insensitive), or kNotFound listing the known names.
Result<ModelSpec> ModelPreset(std::string_view name);

}  // namespace kvmesh
