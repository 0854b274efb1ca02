#include "fuzz/node_rig.h"

#include "common/check.h"
#include "common/strings.h"
#include "pool/block_manager_plan.h"
#include "pool/pool_plan.h"

namespace kvmesh::fuzz {
namespace {

ModelSpec RigModel() {
  ModelSpec m;
  m.name = "fuzz/two-layer";
  m.family = "llama";
  m.num_attention_heads = 4;
  m.layers = {LayerSpec{0, 2, 16}, LayerSpec{16, 2, 16}};  // full; sliding over 16 tokens
  return m;
}

}  // namespace

NodeRig::NodeRig(const NodeRigOptions& o) {
  if (o.manual_clock) clock_ = std::make_unique<ManualClock>();
  auto rank_model = RankModelSpec(RigModel(), o.tensor_parallel_size);
  KVMESH_CHECK(rank_model.ok()) << rank_model.status().ToString();
  CacheConfig cache;
  cache.tokens_per_block = 4;
  cache.max_tokens = 256;  // 64 blocks over the two pools
  auto plan = BuildPoolPlan(*rank_model, cache, std::int64_t{1} << 30);
  KVMESH_CHECK(plan.ok()) << plan.status().ToString();
  plan_ = std::move(plan).value();
  auto pools = NodePools::CreateHost(plan_, o.tensor_parallel_size, /*prefault=*/false);
  KVMESH_CHECK(pools.ok()) << pools.status().ToString();
  pools_ = std::move(pools).value();

  TieredCacheOptions t;
  t.manager = FromPoolPlan(plan_);
  t.manager.pools = pools_.ManagerPools();
  if (o.tensor_parallel_size > 1) {
    t.manager.key_namespace.pool_group += StrCat("/tp", o.tensor_parallel_size);
  }
  t.manager.eviction_policy = o.policy;
  t.manager.event_capacity = 256;
  t.manager.enable_partial_reuse = o.enable_partial_reuse;
  t.env.pool_memory = pools_.views();
  t.env.clock = clock_.get();
  t.env.hash_seed = 1;
  t.offload.host_capacity_bytes = o.host_tier ? 24 << 10 : 0;
  t.offload.host_memory = HostMemoryKind::kAligned;
  t.offload.host_prefault = false;
  t.offload.offload_min_priority = 0;
  t.offload.copy_threads = o.copy_threads;
  if (!o.disk_path.empty()) {
    RocksDbTierOptions d;
    d.path = o.disk_path;
    d.capacity_bytes = 1 << 20;
    d.write_buffer_bytes = 1 << 20;
    t.offload.disk = d;
  }
  auto created = TieredCache::Create(std::move(t));
  KVMESH_CHECK(created.ok()) << created.status().ToString();
  cache_ = std::move(created).value();

  NodeDescription& d = description_;
  d.node_id = "fuzz";
  d.version = "0";
  d.device = "cpu";
  d.model_name = plan_.model_name;
  d.dtype = "bf16";
  d.kv_layout = "HND";
  d.num_layers = 2;
  d.num_attention_heads = 4;
  d.enable_block_reuse = o.enable_block_reuse;
  metrics_ = std::make_unique<NodeMetrics>();
  OperatorContext oc;
  oc.description = &description_;
  oc.plan = &plan_;
  oc.pools = &pools_;
  oc.cache = cache_.get();
  oc.metrics = metrics_.get();
  oc.eviction_policy = std::string(EvictionPolicyName(o.policy));
  oc.offload_min_priority = 0;
  operator_ = std::make_unique<OperatorService>(std::move(oc));
  service_ = std::make_unique<EngineService>(description_, cache_.get(), &pools_);
  service_->SetMetrics(metrics_.get());
  service_->SetOperator(operator_.get());
}

NodeRig::~NodeRig() {
  service_.reset();
  operator_.reset();
  cache_.reset();  // before the pools it points into
}

}  // namespace kvmesh::fuzz
