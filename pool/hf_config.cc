#include "pool/hf_config.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "common/strings.h"

namespace kvmesh {
namespace {

using Json = nlohmann::json;

enum class Family { kLlama, kMistral, kQwen, kGemma2, kGemma3, kGptOss, kDeepSeekMla };

struct FamilyEntry {
  std::string_view model_type;
  std::string_view architecture;
  Family family;
  bool indexer;  // deepseek_v32
};

constexpr std::array<FamilyEntry, 14> kFamilies = {{
    {"llama", "LlamaForCausalLM", Family::kLlama, false},
    {"mistral", "MistralForCausalLM", Family::kMistral, false},
    {"mixtral", "MixtralForCausalLM", Family::kMistral, false},
    {"qwen2", "Qwen2ForCausalLM", Family::kQwen, false},
    {"qwen2_moe", "Qwen2MoeForCausalLM", Family::kQwen, false},
    {"qwen3", "Qwen3ForCausalLM", Family::kQwen, false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", Family::kQwen, false},
    {"gemma2", "Gemma2ForCausalLM", Family::kGemma2, false},
    {"gemma3", "Gemma3ForConditionalGeneration", Family::kGemma3, false},
    {"gemma3_text", "Gemma3ForCausalLM", Family::kGemma3, false},
    {"gpt_oss", "GptOssForCausalLM", Family::kGptOss, false},
    {"deepseek_v2", "DeepseekV2ForCausalLM", Family::kDeepSeekMla, false},
    {"deepseek_v3", "DeepseekV3ForCausalLM", Family::kDeepSeekMla, false},
    {"deepseek_v32", "DeepseekV32ForCausalLM", Family::kDeepSeekMla, true},
}};

std::string_view JsonTypeName(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// Field access over the top level and, for multimodal configs (gemma3), the nested text_config,
// whose fields win. Every accessor returns kInvalidArgument naming the field on a bad value.
class ConfigFields {
 public:
  explicit ConfigFields(const Json& top) : top_(top) {
    const auto it = top.find("text_config");
    if (it != top.end() && it->is_object()) text_ = &*it;
  }

  // The value of `key`, or null when absent or JSON null.
  [[nodiscard]] const Json* Find(std::string_view key) const {
    for (const Json* scope : {text_, &top_}) {
      if (scope == nullptr) continue;
      const auto it = scope->find(key);
      if (it != scope->end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }

  // An integer in [min_value, INT32_MAX], or nullopt when absent or null.
  Result<std::optional<std::int32_t>> OptionalInt(std::string_view key,
                                                  std::int64_t min_value = 1) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<std::int32_t>();
    if (!v->is_number_integer()) {
      return Status::InvalidArgument(
          StrCat("field '", key, "' must be an integer, got ", JsonTypeName(*v), " ", v->dump()));
    }
    // Unsigned values above INT64_MAX come back negative here and fail the range check.
    const std::int64_t n = v->get<std::int64_t>();
    if (n < min_value || n > std::numeric_limits<std::int32_t>::max()) {
      return Status::InvalidArgument(
          StrCat("field '", key, "' is ", v->dump(), ", out of range (minimum ", min_value, ")"));
    }
    return std::optional<std::int32_t>(static_cast<std::int32_t>(n));
  }

  Result<std::int32_t> RequiredInt(std::string_view key, std::string_view why,
                                   std::int64_t min_value = 1) const {
    KVMESH_ASSIGN_OR_RETURN(auto v, OptionalInt(key, min_value));
    if (!v) return Status::InvalidArgument(StrCat("field '", key, "' is missing", why));
    return *v;
  }

  Result<std::optional<bool>> OptionalBool(std::string_view key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<bool>();
    if (!v->is_boolean()) {
      return Status::InvalidArgument(
          StrCat("field '", key, "' must be true or false, got ", JsonTypeName(*v)));
    }
    return std::optional<bool>(v->get<bool>());
  }

  Result<std::optional<std::string>> OptionalString(std::string_view key) const {
    const Json* v = Find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) {
      return Status::InvalidArgument(
          StrCat("field '", key, "' must be a string, got ", JsonTypeName(*v)));
    }
    return std::optional<std::string>(v->get<std::string>());
  }

  [[nodiscard]] const Json& top() const { return top_; }

 private:
  const Json& top_;
  const Json* text_ = nullptr;
};

Result<const FamilyEntry*> ResolveFamily(const ConfigFields& f) {
  // The top-level model_type names the family (gemma3 keeps "gemma3_text" in text_config).
  const auto top_type = f.top().find("model_type");
  if (top_type != f.top().end() && !top_type->is_null()) {
    if (!top_type->is_string()) {
      return Status::InvalidArgument(
          StrCat("field 'model_type' must be a string, got ", JsonTypeName(*top_type)));
    }
    const std::string type = top_type->get<std::string>();
    for (const auto& e : kFamilies) {
      if (e.model_type == type) return &e;
    }
    return Status::NotSupported(
        StrCat("unsupported model_type '", type, "': supported are ", SupportedHfModelTypes()));
  }
  const auto archs = f.top().find("architectures");
  if (archs != f.top().end() && archs->is_array() && !archs->empty() &&
      archs->front().is_string()) {
    const std::string arch = archs->front().get<std::string>();
    for (const auto& e : kFamilies) {
      if (e.architecture == arch) return &e;
    }
    return Status::NotSupported(StrCat("no model_type and unsupported architecture '", arch,
                                       "': supported model types are ", SupportedHfModelTypes()));
  }
  return Status::InvalidArgument("field 'model_type' is missing (and no 'architectures' either)");
}

// Parses an explicit layer_types list into per-layer "is sliding" flags.
Result<std::vector<bool>> ParseLayerTypes(const Json& types, std::int32_t num_layers) {
  if (!types.is_array()) {
    return Status::InvalidArgument(
        StrCat("field 'layer_types' must be an array, got ", JsonTypeName(types)));
  }
  if (types.size() != static_cast<std::size_t>(num_layers)) {
    return Status::InvalidArgument(
        StrCat("layer_types has ", types.size(), " entries but num_hidden_layers is ", num_layers));
  }
  std::vector<bool> sliding(types.size());
  for (std::size_t i = 0; i < types.size(); ++i) {
    const Json& t = types[i];
    if (t.is_string() && t.get<std::string>() == "full_attention") {
      sliding[i] = false;
    } else if (t.is_string() && t.get<std::string>() == "sliding_attention") {
      sliding[i] = true;
    } else {
      return Status::InvalidArgument(
          StrCat("layer_types[", i, "] is ", t.dump(),
                 ": expected \"full_attention\" or \"sliding_attention\""));
    }
  }
  return sliding;
}

// Which layers slide, by the family rule (when the config has no layer_types).
Result<std::vector<bool>> FamilySlidingLayers(Family family, const ConfigFields& f,
                                              std::int32_t num_layers) {
  std::vector<bool> sliding(static_cast<std::size_t>(num_layers), false);
  switch (family) {
    case Family::kLlama:
    case Family::kDeepSeekMla: break;
    case Family::kMistral:
      if (f.Find("sliding_window") != nullptr) sliding.assign(sliding.size(), true);
      break;
    case Family::kQwen: {
      KVMESH_ASSIGN_OR_RETURN(auto use, f.OptionalBool("use_sliding_window"));
      if (!use.value_or(false)) break;
      KVMESH_ASSIGN_OR_RETURN(auto max_window_layers, f.OptionalInt("max_window_layers", 0));
      const std::int32_t first = max_window_layers.value_or(0);
      if (first > num_layers) {
        return Status::InvalidArgument(
            StrCat("max_window_layers ", first, " exceeds num_hidden_layers ", num_layers));
      }
      for (std::int32_t i = first; i < num_layers; ++i) sliding[i] = true;
      break;
    }
    case Family::kGemma2:
    case Family::kGptOss:
      for (std::int32_t i = 0; i < num_layers; i += 2) sliding[i] = true;
      break;
    case Family::kGemma3: {
      KVMESH_ASSIGN_OR_RETURN(auto pattern, f.OptionalInt("sliding_window_pattern", 1));
      const std::int32_t p = pattern.value_or(6);
      for (std::int32_t i = 0; i < num_layers; ++i) sliding[i] = (i + 1) % p != 0;
      break;
    }
  }
  return sliding;
}

Result<std::vector<bool>> SlidingLayers(const FamilyEntry& fam, const ConfigFields& f,
                                        std::int32_t num_layers) {
  if (const Json* types = f.Find("layer_types")) return ParseLayerTypes(*types, num_layers);
  return FamilySlidingLayers(fam.family, f, num_layers);
}

Status AddMla(const ConfigFields& f, ModelSpec& m) {
  const std::string why = StrCat(" (", m.family, " uses MLA)");
  MlaSpec mla;
  KVMESH_ASSIGN_OR_RETURN(mla.kv_lora_rank, f.RequiredInt("kv_lora_rank", why));
  KVMESH_ASSIGN_OR_RETURN(mla.qk_rope_head_dim, f.RequiredInt("qk_rope_head_dim", why));
  KVMESH_ASSIGN_OR_RETURN(mla.qk_nope_head_dim, f.RequiredInt("qk_nope_head_dim", why));
  KVMESH_ASSIGN_OR_RETURN(mla.v_head_dim, f.RequiredInt("v_head_dim", why));
  for (LayerSpec& l : m.layers) {
    l.num_kv_heads = 1;
    l.head_dim = mla.LatentDim();
  }
  m.mla = mla;
  return Status::Ok();
}

Status AddIndexer(const ConfigFields& f, ModelSpec& m) {
  const std::string why = StrCat(" (", m.family, " has a sparse-attention indexer)");
  IndexerSpec ix;
  KVMESH_ASSIGN_OR_RETURN(ix.index_head_dim, f.RequiredInt("index_head_dim", why));
  KVMESH_ASSIGN_OR_RETURN(ix.index_n_heads, f.RequiredInt("index_n_heads", why));
  KVMESH_ASSIGN_OR_RETURN(ix.index_topk, f.RequiredInt("index_topk", why));
  ix.quant_block = 128;
  ix.layer_mask.assign(m.layers.size(), true);
  m.indexer = std::move(ix);
  return Status::Ok();
}

// The head geometry shared by every layer of a non-MLA model.
Status ReadHeads(const FamilyEntry& fam, const ConfigFields& f, std::int32_t num_q_heads,
                 std::int32_t* kv_heads, std::int32_t* head_dim) {
  const bool gemma = fam.family == Family::kGemma2 || fam.family == Family::kGemma3;
  KVMESH_ASSIGN_OR_RETURN(auto kv, f.OptionalInt("num_key_value_heads"));
  // transformers' Gemma configs default to 4 KV heads; the others to one per query head.
  *kv_heads = kv.value_or(gemma ? 4 : num_q_heads);
  if (num_q_heads % *kv_heads != 0) {
    return Status::InvalidArgument(StrCat("num_key_value_heads ", *kv_heads,
                                          " does not divide num_attention_heads ", num_q_heads));
  }
  KVMESH_ASSIGN_OR_RETURN(auto hd, f.OptionalInt("head_dim"));
  if (hd) {
    *head_dim = *hd;
  } else if (gemma) {
    *head_dim = 256;  // transformers' Gemma2Config/Gemma3TextConfig default (not hidden/heads)
  } else {
    KVMESH_ASSIGN_OR_RETURN(
        std::int32_t hidden,
        f.RequiredInt("hidden_size", " (needed for head_dim, which is absent)"));
    if (hidden % num_q_heads != 0) {
      return Status::InvalidArgument(StrCat("head_dim is absent and hidden_size ", hidden,
                                            " is not divisible by num_attention_heads ",
                                            num_q_heads));
    }
    *head_dim = hidden / num_q_heads;
  }
  return Status::Ok();
}

Result<ModelSpec> BuildSpec(const FamilyEntry& fam, const ConfigFields& f) {
  ModelSpec m;
  m.family = std::string(fam.model_type);
  KVMESH_ASSIGN_OR_RETURN(const std::int32_t num_layers, f.RequiredInt("num_hidden_layers", ""));
  KVMESH_RETURN_IF_ERROR(CheckLayerCount(num_layers));  // before any per-layer work
  // gemma3 text configs omit the counts that equal transformers' defaults (e.g. gemma-3-4b).
  const bool gemma3 = fam.family == Family::kGemma3;
  KVMESH_ASSIGN_OR_RETURN(auto q_heads, f.OptionalInt("num_attention_heads"));
  if (!q_heads && !gemma3) return Status::InvalidArgument("field 'num_attention_heads' is missing");
  m.num_attention_heads = q_heads.value_or(8);

  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  if (fam.family == Family::kDeepSeekMla) {
    // num_key_value_heads is the query-side head count of MLA; the cache has one latent.
    KVMESH_ASSIGN_OR_RETURN(auto kv, f.OptionalInt("num_key_value_heads"));
    if (kv && m.num_attention_heads % *kv != 0) {
      return Status::InvalidArgument(StrCat("num_key_value_heads ", *kv,
                                            " does not divide num_attention_heads ",
                                            m.num_attention_heads));
    }
  } else {
    KVMESH_RETURN_IF_ERROR(ReadHeads(fam, f, m.num_attention_heads, &kv_heads, &head_dim));
  }

  KVMESH_ASSIGN_OR_RETURN(const std::vector<bool> sliding, SlidingLayers(fam, f, num_layers));
  std::int32_t window = 0;
  bool any_sliding = false;
  for (bool s : sliding) any_sliding = any_sliding || s;
  if (any_sliding) {
    KVMESH_ASSIGN_OR_RETURN(auto w, f.OptionalInt("sliding_window"));
    if (!w && gemma3) w = 4096;  // Gemma3TextConfig default
    if (!w) {
      return Status::InvalidArgument(
          "field 'sliding_window' is missing, but the config has sliding-window layers");
    }
    window = *w;
  }
  m.layers.resize(static_cast<std::size_t>(num_layers));
  for (std::int32_t i = 0; i < num_layers; ++i) {
    m.layers[i] = LayerSpec{sliding[i] ? window : 0, kv_heads, head_dim};
  }
  if (fam.family == Family::kDeepSeekMla) KVMESH_RETURN_IF_ERROR(AddMla(f, m));
  if (fam.indexer) KVMESH_RETURN_IF_ERROR(AddIndexer(f, m));
  return m;
}

}  // namespace

std::string SupportedHfModelTypes() {
  std::vector<std::string_view> names;
  names.reserve(kFamilies.size());
  for (const auto& e : kFamilies) names.push_back(e.model_type);
  return StrJoin(names, ", ");
}

Result<ModelSpec> ParseHfConfig(std::string_view json_text, std::string_view source,
                                std::string_view fallback_name) {
  Json top;
  try {
    top = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." without the tag.
    std::string what = e.what();
    const auto tag_end = what.find("] ");
    if (tag_end != std::string::npos) what = what.substr(tag_end + 2);
    return Status::InvalidArgument(StrCat(source, ": not valid JSON (byte ", e.byte, "): ", what));
  } catch (const Json::exception& e) {
    // E.g. out_of_range.406 for a number beyond a double ("1e400"): found by fuzz/hf_config.
    std::string what = e.what();
    const auto tag_end = what.find("] ");
    if (tag_end != std::string::npos) what = what.substr(tag_end + 2);
    return Status::InvalidArgument(StrCat(source, ": not valid JSON: ", what));
  }
  if (!top.is_object()) {
    return Status::InvalidArgument(
        StrCat(source, ": the top level is ", JsonTypeName(top), ", not an object"));
  }
  const ConfigFields fields(top);
  auto spec = [&]() -> Result<ModelSpec> {
    KVMESH_ASSIGN_OR_RETURN(const FamilyEntry* fam, ResolveFamily(fields));
    KVMESH_ASSIGN_OR_RETURN(ModelSpec m, BuildSpec(*fam, fields));
    const auto name_it = top.find("_name_or_path");
    if (name_it != top.end() && name_it->is_string() && !name_it->get<std::string>().empty()) {
      m.name = name_it->get<std::string>();
    } else {
      m.name = fallback_name.empty() ? m.family : std::string(fallback_name);
    }
    KVMESH_RETURN_IF_ERROR(m.Validate());
    return m;
  }();
  if (!spec.ok()) return spec.status().WithContext(source);
  return spec;
}

Result<ModelSpec> LoadModelSpecFromHfConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file(path);
  if (fs::is_directory(file, ec)) file /= "config.json";
  if (!fs::exists(file, ec)) {
    return Status::NotFound(StrCat("config file '", file.string(), "' does not exist"));
  }
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return Status::IoError(
        StrCat("cannot read config file '", file.string(), "': ", std::strerror(errno)));
  }

  // .../models--ORG--NAME/snapshots/REV/config.json (the Hugging Face hub cache); else the
  // directory's name for a config.json, the file's stem for any other name.
  std::string fallback_name = file.filename() == "config.json"
                                  ? file.parent_path().filename().string()
                                  : file.stem().string();
  std::string revision;
  const fs::path snapshots = file.parent_path().parent_path();
  const std::string repo_dir = snapshots.parent_path().filename().string();
  if (snapshots.filename() == "snapshots" && repo_dir.rfind("models--", 0) == 0) {
    revision = file.parent_path().filename().string();
    fallback_name = repo_dir.substr(8);
    const auto sep = fallback_name.find("--");
    // ORG--NAME -> ORG/NAME (built anew: GCC 12 at -O3 warns falsely on an in-place replace).
    if (sep != std::string::npos) {
      fallback_name = fallback_name.substr(0, sep) + "/" + fallback_name.substr(sep + 2);
    }
  }
  KVMESH_ASSIGN_OR_RETURN(ModelSpec spec, ParseHfConfig(text.str(), file.string(), fallback_name));
  spec.revision = revision;
  return spec;
}

}  // namespace kvmesh
