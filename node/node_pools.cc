#include "node/node_pools.h"

#include "common/strings.h"
#include "node/device_memory.h"

namespace kvmesh {
namespace {

constexpr std::uint64_t kComponentAlign = 4096;

std::uint64_t AlignUp(std::uint64_t v) {
  return (v + kComponentAlign - 1) / kComponentAlign * kComponentAlign;
}

}  // namespace

Result<ModelSpec> RankModelSpec(const ModelSpec& model, int tp) {
  if (tp < 1) return Status::InvalidArgument(StrCat("tensor_parallel_size ", tp, " is below 1"));
  if (tp == 1) return model;
  ModelSpec m = model;
  if (m.num_attention_heads % tp != 0) {
    return Status::InvalidArgument(StrCat("tensor_parallel_size ", tp, " does not divide the ",
                                          m.num_attention_heads, " query heads of ", m.name));
  }
  m.num_attention_heads /= tp;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    LayerSpec& l = m.layers[i];
    if (l.num_kv_heads == 1) continue;  // MLA latent or MQA: every rank keeps the one head
    if (l.num_kv_heads % tp != 0) {
      return Status::InvalidArgument(StrCat("tensor_parallel_size ", tp, " does not divide the ",
                                            l.num_kv_heads, " KV heads of layer ", i, " of ",
                                            m.name));
    }
    l.num_kv_heads /= tp;
  }
  KVMESH_RETURN_IF_ERROR(m.Validate().WithContext(StrCat("rank model of ", model.name)));
  return m;
}

std::vector<RankPool> NodePools::PlanRankPools(const PoolPlan& plan, int tensor_parallel_size) {
  std::vector<RankPool> out;
  for (const PoolSpec& spec : plan.pools) {
    for (int r = 0; r < tensor_parallel_size; ++r) {
      RankPool p;
      p.index = static_cast<int>(out.size());
      p.plan_pool = spec.id;
      p.rank = r;
      p.name = tensor_parallel_size == 1
                   ? PoolKeyString(spec.key)
                   : StrCat(PoolKeyString(spec.key), " rank ", r, "/", tensor_parallel_size);
      p.window = spec.key.window;
      p.layout = spec.layout;
      p.num_blocks = spec.num_blocks;
      p.pool_scale = spec.pool_scale.value;
      p.layers = spec.layers;
      std::uint64_t offset = 0;
      for (int c = 0; c < kNumKvComponents; ++c) {
        const PagedTensorLayout& comp = p.layout.components[c];
        if (!comp.present()) continue;
        p.component_offset[c] = offset;
        offset = AlignUp(offset + static_cast<std::uint64_t>(comp.BytesPerBlock()) *
                                      static_cast<std::uint64_t>(p.num_blocks));
      }
      p.bytes = offset;
      out.push_back(std::move(p));
    }
  }
  return out;
}

Result<NodePools> NodePools::CreateHost(const PoolPlan& plan, int tensor_parallel_size,
                                        bool prefault) {
  NodePools out;
  out.tp_ = tensor_parallel_size;
  out.pools_ = PlanRankPools(plan, tensor_parallel_size);
  for (const RankPool& p : out.pools_) {
    KVMESH_ASSIGN_OR_RETURN(
        SharedMemory mem, SharedMemory::Create(StrCat("kvmesh-pool-", p.index), p.bytes, prefault));
    out.bases_.push_back(static_cast<std::uint8_t*>(mem.data()));
    out.fds_.push_back(mem.fd());
    out.memory_.push_back(std::move(mem));
  }
  return out;
}

Result<NodePools> NodePools::CreateEmulated(const PoolPlan& plan, int tensor_parallel_size,
                                            EmulatedDevice* device) {
  NodePools out;
  out.tp_ = tensor_parallel_size;
  out.emulated_ = true;
  out.pools_ = PlanRankPools(plan, tensor_parallel_size);
  for (RankPool& p : out.pools_) {
    p.device = p.rank;
    Result<EmulatedDevice::Memory> mem = device->Allocate(p.bytes, p.device);
    if (!mem.ok()) return mem.status().WithContext(StrCat("pool ", p.name));
    out.bases_.push_back(reinterpret_cast<std::uint8_t*>(mem->device));
    out.fds_.push_back(mem->fd);
  }
  return out;
}

Result<NodePools> NodePools::CreateDevice(const PoolPlan& plan, int tensor_parallel_size,
                                          int first_device) {
  NodePools out;
  out.tp_ = tensor_parallel_size;
  out.pools_ = PlanRankPools(plan, tensor_parallel_size);
  for (int r = 0; r < tensor_parallel_size; ++r) {
    KVMESH_ASSIGN_OR_RETURN(CudaDeviceInfo info, QueryCudaDevice(first_device + r));
    out.devices_.push_back(std::move(info));
  }
  for (RankPool& p : out.pools_) {
    p.device = first_device + p.rank;
    Result<DeviceMemory> mem = DeviceMemory::Allocate(p.device, p.bytes);
    if (!mem.ok()) return mem.status().WithContext(StrCat("pool ", p.name));
    out.bases_.push_back(static_cast<std::uint8_t*>(mem->data()));
    out.fds_.push_back(-1);
    out.device_memory_.push_back(std::move(mem).value());
  }
  return out;
}

std::vector<KvPoolView> NodePools::views() const {
  std::vector<KvPoolView> v;
  v.reserve(pools_.size());
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const RankPool& p = pools_[i];
    KvPoolView view;
    view.layout = p.layout;
    view.num_blocks = p.num_blocks;
    view.pool_scale = p.pool_scale;
    std::uint8_t* base = bases_[i];
    for (int c = 0; c < kNumKvComponents; ++c) {
      if (p.layout.components[c].present()) view.base[c] = base + p.component_offset[c];
    }
    v.push_back(view);
  }
  return v;
}

std::vector<BlockPoolConfig> NodePools::ManagerPools() const {
  std::vector<BlockPoolConfig> out;
  out.reserve(pools_.size());
  for (const RankPool& p : pools_) out.push_back(BlockPoolConfig{p.name, p.num_blocks, p.window});
  return out;
}

std::int64_t NodePools::total_bytes() const {
  std::int64_t total = 0;
  for (const RankPool& p : pools_) total += static_cast<std::int64_t>(p.bytes);
  return total;
}

void NodePools::DescribeForAttach(rpc::AttachResponse* out, std::vector<int>* fds) const {
  for (std::size_t i = 0; i < pools_.size(); ++i) {
    const RankPool& p = pools_[i];
    rpc::PoolDescriptor* d = out->add_pools();
    d->set_pool(p.index);
    d->set_plan_pool(p.plan_pool.value);
    d->set_rank(p.rank);
    d->set_key(p.name);
    d->set_window(p.window);
    d->set_dtype(static_cast<std::uint32_t>(p.layout.dtype));
    d->set_num_blocks(p.num_blocks);
    d->set_pool_scale(p.pool_scale);
    // An emulated device's pools are host memory to an engine.
    const int engine_device = emulated_ ? -1 : p.device;
    d->set_device(engine_device);
    d->mutable_layers()->Add(p.layers.begin(), p.layers.end());
    for (int c = 0; c < kNumKvComponents; ++c) {
      const PagedTensorLayout& comp = p.layout.components[c];
      if (!comp.present()) continue;
      rpc::PoolComponentMemory* m = d->add_components();
      m->set_component(static_cast<std::uint32_t>(c));
      m->set_memory_index(static_cast<std::uint32_t>(out->memory_size()));
      m->set_offset(p.component_offset[c]);
      m->set_bytes(static_cast<std::uint64_t>(comp.BytesPerBlock()) *
                   static_cast<std::uint64_t>(p.num_blocks));
      m->set_bytes_per_block(static_cast<std::uint64_t>(comp.BytesPerBlock()));
      m->set_order(static_cast<std::uint32_t>(comp.order));
      m->set_num_layers(comp.num_layers);
      m->set_kv_factor(comp.kv_factor);
      m->set_num_heads(comp.num_heads);
      m->set_tokens_per_block(comp.tokens_per_block);
      m->set_inner(comp.inner);
      m->set_bits(comp.bits);
    }
    rpc::MemoryObject* mo = out->add_memory();
    mo->set_bytes(p.bytes);
    mo->set_device(engine_device);
    if (fds_[i] >= 0) {
      mo->set_kind(rpc::MemoryObject::KIND_MEMFD);
      fds->push_back(fds_[i]);
    } else {
      mo->set_kind(rpc::MemoryObject::KIND_CUDA_IPC);
      mo->set_cuda_ipc_handle(device_memory_[i].ipc_handle());
      mo->set_device_uuid(devices_[static_cast<std::size_t>(p.rank)].uuid);
    }
  }
}

}  // namespace kvmesh
