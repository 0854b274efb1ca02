// Fuzz target node_config: the YAML config loader (node/node_config.h, ParseNodeConfig) on
// arbitrary text.
//
// Input: the text of a config file, parsed as "fuzz.yaml" with relative paths resolved against
// /fuzz-base.
// Oracles: an error is kInvalidArgument and names the source ("fuzz.yaml..."); an accepted config
// passes its own Validate() (ParseNodeConfig's contract: the checks ran), its relative paths were
// resolved (data_dir is absolute), and EffectiveCacheConfig() gives a CacheConfig that validates.
#include "common/check.h"
#include "fuzz/fuzz_input.h"
#include "node/node_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<NodeConfig> c = ParseNodeConfig(text, "fuzz.yaml", "/fuzz-base");
  if (!c.ok()) {
    KVMESH_CHECK(c.status().IsInvalidArgument()) << c.status().ToString();
    KVMESH_CHECK(c.status().message().starts_with("fuzz.yaml")) << c.status().ToString();
    return 0;
  }
  const Status valid = c->Validate();
  KVMESH_CHECK(valid.ok()) << "an accepted config does not validate: " << valid.ToString();
  KVMESH_CHECK(c->data_dir.starts_with("/")) << "data_dir '" << c->data_dir << "' not resolved";
  const CacheConfig cache = c->EffectiveCacheConfig();
  const Status cache_valid = cache.Validate();
  KVMESH_CHECK(cache_valid.ok()) << cache_valid.ToString();
  return 0;
}
