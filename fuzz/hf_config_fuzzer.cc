// Fuzz target hf_config: the Hugging Face config.json loader (pool/hf_config.h, ParseHfConfig) on
// arbitrary text, and the pool plan kvnode builds from what it accepts.
//
// Input: the text of a config.json.
// Oracles: an error is kInvalidArgument or kNotSupported and names the source; an accepted spec
// validates (ModelSpec::Validate) and has a name; BuildPoolPlan of it (bf16 and nvfp4, 32 tokens
// per block, 1 GiB of memory: what `kvnode` and `kvctl layout` do with a config.json) either
// fails cleanly or gives pools with blocks whose sizes add up.
#include "common/check.h"
#include "fuzz/fuzz_input.h"
#include "pool/hf_config.h"
#include "pool/pool_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<ModelSpec> spec = ParseHfConfig(text, "fuzz.json");
  if (!spec.ok()) {
    KVMESH_CHECK(spec.status().IsInvalidArgument() || spec.status().IsNotSupported())
        << spec.status().ToString();
    KVMESH_CHECK(spec.status().message().starts_with("fuzz.json")) << spec.status().ToString();
    return 0;
  }
  const Status valid = spec->Validate();
  KVMESH_CHECK(valid.ok()) << valid.ToString();
  KVMESH_CHECK(!spec->name.empty());
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kNVFP4}) {
    CacheConfig cache;
    cache.dtype = dtype;
    Result<PoolPlan> plan = BuildPoolPlan(*spec, cache, std::int64_t{1} << 30);
    if (!plan.ok()) {
      KVMESH_CHECK(plan.status().IsInvalidArgument() || plan.status().IsResourceExhausted())
          << plan.status().ToString();
      continue;
    }
    KVMESH_CHECK(!plan->pools.empty());
    KVMESH_CHECK_LE(plan->TotalPoolBytes(), plan->budget_bytes);
    std::size_t layers = 0;
    for (const PoolSpec& p : plan->pools) {
      KVMESH_CHECK_GT(p.num_blocks, 0);
      KVMESH_CHECK_GT(p.bytes_per_block(), 0);
      layers += p.layers.size();
    }
    KVMESH_CHECK_EQ(layers, spec->layers.size());
  }
  return 0;
}
