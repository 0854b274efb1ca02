// Loading a ModelSpec from a Hugging Face config.json.
//
// Families, by `model_type` (or, when it is absent, the first entry of `architectures`):
//   llama                         full attention everywhere
//   mistral, mixtral              `sliding_window` (int: every layer slides; null: full)
//   qwen2, qwen2_moe, qwen3,      `use_sliding_window` true: layers i >= `max_window_layers` slide
//   qwen3_moe                     over `sliding_window`; else full
//   gemma2                        even layers (0, 2, ...) slide over `sliding_window`, odd are
//   global gemma3, gemma3_text           layer i global iff (i + 1) % `sliding_window_pattern` == 0
//                                 (default 6); may nest everything in `text_config`
//   gpt_oss                       `layer_types` (default: alternating, starting sliding)
//   deepseek_v2, deepseek_v3      MLA: one latent of `kv_lora_rank` + `qk_rope_head_dim` per token
//   deepseek_v32                  as deepseek_v3 plus the indexer (`index_head_dim`,
//                                 `index_n_heads`, `index_topk`) on every layer
// Any family: an explicit `layer_types` list ("full_attention" / "sliding_attention") wins over the
// family rule. `head_dim` defaults to hidden_size / num_attention_heads and `num_key_value_heads`
// to num_attention_heads, except for gemma, where transformers' defaults apply (head_dim 256, 4 KV
// heads; gemma3 also 8 query heads, sliding_window 4096), since gemma-3 text configs omit them.
// The multi-token-prediction layers of DeepSeek (`num_nextn_predict_layers`) are not in the spec.
//
// Errors (the message names the input and the field):
//   kNotFound                 the file does not exist
//   kIoError                  it cannot be read
//   kInvalidArgument          not JSON (with line and column), a field missing, of the wrong type,
//                             out of range or inconsistent ("num_key_value_heads 7 does not divide
//                             num_attention_heads 32", "layer_types has 30 entries but
//                             num_hidden_layers is 32")
//   kNotSupported             a model_type outside the list above (the message lists the list)
//
// Thread-safe (pure functions; Load reads the file it is given).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "pool/model_spec.h"

namespace kvmesh {

// Parses config.json text. `source` names the input in error messages. The spec's name is the
// config's `_name_or_path` when present, else `fallback_name` when not empty, else the model_type.
Result<ModelSpec> ParseHfConfig(std::string_view json_text, std::string_view source = "config.json",
                                std::string_view fallback_name = {});

// Reads and parses `path`: a config.json file, or a directory holding one. Without
// `_name_or_path`, a Hugging Face cache path (.../models--ORG--NAME/snapshots/REV/config.json)
// gives the name ORG/NAME and the revision REV; any other config.json its directory's name, and a
// file of another name its stem ("gemma3_1b_it" for gemma3_1b_it.json).
Result<ModelSpec> LoadModelSpecFromHfConfig(const std::string& path);

// The supported model_type values joined by ", ".
std::string SupportedHfModelTypes();

}  // namespace kvmesh
