#include "cli/layout_command.h"

#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <utility>

#include "cli/layout_report.h"
#include "common/strings.h"
#include "common/units.h"
#include "pool/cache_config.h"
#include "pool/hf_config.h"
#include "pool/model_presets.h"
#include "pool/primary_memory.h"

namespace kvmesh::cli {
namespace {

Result<double> ParseNumber(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    return Status::InvalidArgument(StrCat(flag, " '", text, "' is not a number"));
  }
  return v;
}

// An optional float flag: nullopt when not given.
Result<std::optional<float>> ParseFloatFlag(std::string_view flag, const std::string& text) {
  if (text.empty()) return std::optional<float>();
  KVMESH_ASSIGN_OR_RETURN(const double v, ParseNumber(flag, text));
  return std::optional<float>(static_cast<float>(v));
}

Result<CacheConfig> MakeCacheConfig(const LayoutOptions& o) {
  CacheConfig c;
  auto dtype = ParseKvDtype(o.dtype);
  if (!dtype.ok()) return dtype.status().WithContext("--dtype");
  c.dtype = *dtype;
  auto layout = ParseKvLayout(o.layout);
  if (!layout.ok()) return layout.status().WithContext("--layout");
  c.kv_layout = *layout;
  c.tokens_per_block = o.tokens_per_block;
  c.free_gpu_memory_fraction = o.free_gpu_memory_fraction;
  if (!o.max_tokens.empty()) {
    auto n = ParseCount(o.max_tokens);
    if (!n.ok()) return n.status().WithContext("--max-tokens");
    c.max_tokens = *n;
  }
  if (!o.pool_shares.empty()) {
    for (const std::string& piece : StrSplit(o.pool_shares, ',')) {
      KVMESH_ASSIGN_OR_RETURN(const double share, ParseNumber("--pool-shares", piece));
      c.pool_shares.push_back(share);
    }
  }
  KVMESH_ASSIGN_OR_RETURN(c.nvfp4_global_scale,
                          ParseFloatFlag("--nvfp4-global-scale", o.nvfp4_global_scale));
  KVMESH_ASSIGN_OR_RETURN(c.nvfp4_expected_amax,
                          ParseFloatFlag("--nvfp4-expected-amax", o.nvfp4_expected_amax));
  KVMESH_ASSIGN_OR_RETURN(c.fp8_per_tensor_scale,
                          ParseFloatFlag("--fp8-per-tensor-scale", o.fp8_per_tensor_scale));
  KVMESH_RETURN_IF_ERROR(c.Validate());
  // A scale flag of another dtype would change nothing: said, not ignored.
  if ((c.nvfp4_global_scale || c.nvfp4_expected_amax) && c.dtype != KvDtype::kNVFP4) {
    return Status::InvalidArgument(
        StrCat(c.nvfp4_global_scale ? "--nvfp4-global-scale" : "--nvfp4-expected-amax",
               " applies to --dtype nvfp4 only, not ", KvDtypeName(c.dtype)));
  }
  if (c.fp8_per_tensor_scale && c.dtype != KvDtype::kFP8PerTensor) {
    return Status::InvalidArgument(
        StrCat("--fp8-per-tensor-scale applies to --dtype fp8_per_tensor only, not ",
               KvDtypeName(c.dtype)));
  }
  return c;
}

Status LoadModel(const LayoutOptions& o, LayoutReport& report) {
  if (o.model.empty() == o.hf_config.empty()) {
    return Status::InvalidArgument(
        StrCat("give exactly one of --model NAME (", ListPresets(), ") or --hf-config PATH"));
  }
  if (!o.model.empty()) {
    KVMESH_ASSIGN_OR_RETURN(report.model, ModelPreset(o.model));
    report.preset = AsciiLower(o.model);
  } else {
    KVMESH_ASSIGN_OR_RETURN(report.model, LoadModelSpecFromHfConfig(o.hf_config));
    report.hf_config = o.hf_config;
  }
  if (o.index_fp4) {
    if (!report.model.indexer) {
      return Status::InvalidArgument(
          StrCat("--index-fp4: ", report.model.name, " has no sparse-attention indexer"));
    }
    report.model.indexer->fp4 = true;
  }
  return Status::Ok();
}

Result<std::int64_t> PrimaryFreeBytes(const LayoutOptions& o, LayoutReport& report) {
  if (!o.gpu_memory.empty()) {
    auto bytes = ParseBytes(o.gpu_memory);
    if (!bytes.ok()) return bytes.status().WithContext("--gpu-memory");
    report.memory_kind = "given";
    report.memory_source = "--gpu-memory";
    return *bytes;
  }
  KVMESH_ASSIGN_OR_RETURN(const PrimaryMemory m, DetectPrimaryMemory());
  report.memory_kind = std::string(PrimaryMemoryKindName(m.kind));
  report.memory_source = m.source;
  return m.free_bytes;
}

void PrintPresets(std::ostream& out) {
  out << std::left << std::setw(16) << "PRESET" << std::setw(34) << "MODEL"
      << "SUMMARY\n";
  for (const ModelPresetInfo& p : ModelPresets()) {
    out << std::setw(16) << p.name << std::setw(34) << p.hf_id << p.summary << "\n";
  }
}

}  // namespace

Status RunLayout(const LayoutOptions& options, std::ostream& out) {
  if (AsciiLower(options.model) == "list" && options.hf_config.empty()) {
    PrintPresets(out);
    return Status::Ok();
  }
  LayoutReport report;
  KVMESH_RETURN_IF_ERROR(LoadModel(options, report));
  KVMESH_ASSIGN_OR_RETURN(const CacheConfig cache, MakeCacheConfig(options));
  KVMESH_ASSIGN_OR_RETURN(const std::int64_t free_bytes, PrimaryFreeBytes(options, report));
  KVMESH_ASSIGN_OR_RETURN(report.plan, BuildPoolPlan(report.model, cache, free_bytes));
  if (options.json) {
    PrintLayoutJson(report, out);
  } else {
    PrintLayoutText(report, out);
  }
  return Status::Ok();
}

void RegisterLayoutCommand(CLI::App& app, CommandOutcome& outcome) {
  auto options = std::make_shared<LayoutOptions>();
  CLI::App* sub = app.add_subcommand(
      "layout",
      "Show the pool plan of a model: pools, shapes, strides, sizes, and one block's "
      "layout in memory");
  auto* model = sub->add_option("--model", options->model,
                                "Built-in model preset ('list' lists them: " + ListPresets() + ")");
  auto* hf = sub->add_option("--hf-config", options->hf_config,
                             "Hugging Face config.json (or the directory holding it)");
  model->excludes(hf);
  hf->excludes(model);
  sub->add_option("--dtype", options->dtype,
                  "Cache dtype: bf16, fp16, fp8, fp8_per_tensor, int8, nvfp4")
      ->capture_default_str();
  sub->add_option("--layout", options->layout, "Order inside a layer: HND or NHD")
      ->capture_default_str();
  sub->add_option("--tokens-per-block", options->tokens_per_block,
                  "Tokens per block, a power of two > 1")
      ->capture_default_str();
  sub->add_option("--gpu-memory", options->gpu_memory,
                  "Free primary memory, e.g. 80GiB (default: detected: the GPU's free memory, or "
                  "MemAvailable without a GPU)");
  sub->add_option("--max-tokens", options->max_tokens,
                  "Upper bound on cached tokens, e.g. 256k (default: none)");
  sub->add_option("--free-gpu-memory-fraction", options->free_gpu_memory_fraction,
                  "Share of the free memory the pools may take, in (0, 1]")
      ->capture_default_str();
  sub->add_option("--pool-shares", options->pool_shares,
                  "Memory share of each pool in plan order, e.g. 0.75,0.25 (default: equal)");
  sub->add_option("--nvfp4-global-scale", options->nvfp4_global_scale,
                  "nvfp4: FP32 global scale gs of every pool (default 1.0)");
  sub->add_option("--nvfp4-expected-amax", options->nvfp4_expected_amax,
                  "nvfp4: expected amax; gs = 448*6/amax");
  sub->add_option("--fp8-per-tensor-scale", options->fp8_per_tensor_scale,
                  "fp8_per_tensor: FP32 scale of every pool (default 1.0)");
  sub->add_flag("--index-fp4", options->index_fp4,
                "Store the sparse-attention indexer K as FP4 instead of FP8");
  sub->add_flag("--json", options->json, "Print the stable JSON format (docs/kvctl.md)");
  sub->callback([options, &outcome] { outcome.Set(RunLayout(*options, std::cout)); });
}

}  // namespace kvmesh::cli
