#include "pool/model_presets.h"

#include <array>
#include <utility>

#include "common/strings.h"

namespace kvmesh {
namespace {

constexpr std::array<ModelPresetInfo, 12> kPresets = {{
    {"llama-3-8b", "meta-llama/Meta-Llama-3-8B", "32 layers, 32 q / 8 kv heads, head_dim 128"},
    {"llama-3-70b", "meta-llama/Meta-Llama-3-70B", "80 layers, 64 q / 8 kv heads, head_dim 128"},
    {"llama-3.2-1b", "meta-llama/Llama-3.2-1B", "16 layers, 32 q / 8 kv heads, head_dim 64"},
    {"mistral-7b", "mistralai/Mistral-7B-v0.3", "32 layers, 32 q / 8 kv heads, head_dim 128"},
    {"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", "24 layers, 14 q / 2 kv heads, head_dim 64"},
    {"qwen3-8b", "Qwen/Qwen3-8B", "36 layers, 32 q / 8 kv heads, head_dim 128"},
    {"gemma-2-9b", "google/gemma-2-9b",
     "42 layers, 16 q / 8 kv heads, head_dim 256, window 4096 on even layers"},
    {"gemma-3-27b", "google/gemma-3-27b-it",
     "62 layers, 32 q / 16 kv heads, head_dim 128, window 1024, every 6th layer global"},
    {"gpt-oss-20b", "openai/gpt-oss-20b",
     "24 layers, 64 q / 8 kv heads, head_dim 64, window 128 on even layers"},
    {"gpt-oss-120b", "openai/gpt-oss-120b",
     "36 layers, 64 q / 8 kv heads, head_dim 64, window 128 on even layers"},
    {"deepseek-v3", "deepseek-ai/DeepSeek-V3", "61 layers, 128 q heads, MLA latent 512+64"},
    {"deepseek-v3.2", "deepseek-ai/DeepSeek-V3.2-Exp",
     "61 layers, 128 q heads, MLA latent 512+64, indexer K 128 on every layer"},
}};

// Window of layer i: `window` when sliding(i), else 0 (full).
template <typename SlidingFn>
void SetWindows(ModelSpec& m, std::int32_t window, SlidingFn sliding) {
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    m.layers[i].window = sliding(static_cast<int>(i)) ? window : 0;
  }
}

ModelSpec DeepSeekV3(std::string name, std::string family) {
  // 61 layers, 128 query heads; kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128,
  // v_head_dim 128. The cache holds one 576-element latent per token and layer.
  ModelSpec m = UniformModelSpec(std::move(name), std::move(family), 61, 128, 1, 512 + 64);
  m.mla = MlaSpec{512, 64, 128, 128};
  return m;
}

ModelSpec Build(std::string_view preset, std::string hf_id) {
  if (preset == "llama-3-8b") return UniformModelSpec(std::move(hf_id), "llama", 32, 32, 8, 128);
  if (preset == "llama-3-70b") return UniformModelSpec(std::move(hf_id), "llama", 80, 64, 8, 128);
  if (preset == "llama-3.2-1b") return UniformModelSpec(std::move(hf_id), "llama", 16, 32, 8, 64);
  // Qwen2.5-0.5B: hidden 896 / 14 heads = head_dim 64; use_sliding_window is false.
  if (preset == "qwen2.5-0.5b") return UniformModelSpec(std::move(hf_id), "qwen2", 24, 14, 2, 64);
  if (preset == "mistral-7b") return UniformModelSpec(std::move(hf_id), "mistral", 32, 32, 8, 128);
  if (preset == "qwen3-8b") return UniformModelSpec(std::move(hf_id), "qwen3", 36, 32, 8, 128);
  if (preset == "gemma-2-9b") {
    // Gemma-2: even layers (0, 2, ...) slide over 4096 tokens, odd layers are global.
    ModelSpec m = UniformModelSpec(std::move(hf_id), "gemma2", 42, 16, 8, 256);
    SetWindows(m, 4096, [](int i) { return i % 2 == 0; });
    return m;
  }
  if (preset == "gemma-3-27b") {
    // Gemma-3: sliding_window_pattern 6 — layer i is global iff (i + 1) % 6 == 0 (10 of 62).
    ModelSpec m = UniformModelSpec(std::move(hf_id), "gemma3", 62, 32, 16, 128);
    SetWindows(m, 1024, [](int i) { return (i + 1) % 6 != 0; });
    return m;
  }
  if (preset == "gpt-oss-20b" || preset == "gpt-oss-120b") {
    // layer_types alternate sliding_attention (window 128), full_attention, starting sliding.
    const int layers = preset == "gpt-oss-20b" ? 24 : 36;
    ModelSpec m = UniformModelSpec(std::move(hf_id), "gpt_oss", layers, 64, 8, 64);
    SetWindows(m, 128, [](int i) { return i % 2 == 0; });
    return m;
  }
  if (preset == "deepseek-v3") return DeepSeekV3(std::move(hf_id), "deepseek_v3");
  // deepseek-v3.2: V3 plus the lightning indexer on every layer (index_head_dim 128,
  // index_n_heads 64, index_topk 2048; FP8 cache with one FP32 scale per 128 elements).
  ModelSpec m = DeepSeekV3(std::move(hf_id), "deepseek_v32");
  IndexerSpec ix;
  ix.index_head_dim = 128;
  ix.index_n_heads = 64;
  ix.index_topk = 2048;
  ix.quant_block = 128;
  ix.layer_mask.assign(m.layers.size(), true);
  m.indexer = std::move(ix);
  return m;
}

}  // namespace

std::span<const ModelPresetInfo> ModelPresets() { return kPresets; }

std::string ListPresets() {
  std::vector<std::string_view> names;
  names.reserve(kPresets.size());
  for (const auto& p : kPresets) names.push_back(p.name);
  return StrJoin(names, ", ");
}

Result<ModelSpec> ModelPreset(std::string_view name) {
  const std::string wanted = AsciiLower(name);
  for (const auto& p : kPresets) {
    if (p.name == wanted) return Build(p.name, std::string(p.hf_id));
  }
  return Status::NotFound(
      StrCat("unknown model preset '", name, "': known presets are ", ListPresets()));
}

}  // namespace kvmesh
