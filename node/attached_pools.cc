#include "node/attached_pools.h"

#include <unistd.h>

#include "common/strings.h"

namespace kvmesh {
namespace {

Status CheckComponent(const rpc::PoolDescriptor& d, const rpc::PoolComponentMemory& m,
                      const PagedTensorLayout& l, const std::vector<SharedMemory>& memory) {
  const std::string where = StrCat("pool ", d.pool(), " component ", m.component());
  if (m.memory_index() >= memory.size()) {
    return Status::Corruption(StrCat(where, ": memory_index ", m.memory_index(), " of ",
                                     memory.size(), " memory objects"));
  }
  if (l.BytesPerBlock() <= 0 ||
      static_cast<std::uint64_t>(l.BytesPerBlock()) != m.bytes_per_block()) {
    return Status::Corruption(StrCat(where, ": layout gives ", l.BytesPerBlock(),
                                     " bytes per block, bytes_per_block says ",
                                     m.bytes_per_block()));
  }
  if (d.num_blocks() <= 0 ||
      m.bytes_per_block() * static_cast<std::uint64_t>(d.num_blocks()) != m.bytes()) {
    return Status::Corruption(StrCat(where, ": bytes ", m.bytes(), " is not ", d.num_blocks(),
                                     " blocks of ", m.bytes_per_block()));
  }
  const std::size_t size = memory[m.memory_index()].size();
  if (m.offset() > size || m.bytes() > size - m.offset()) {
    return Status::Corruption(StrCat(where, ": [", m.offset(), ", +", m.bytes(),
                                     ") lies outside its memory object of ", size, " bytes"));
  }
  return Status::Ok();
}

}  // namespace

Result<AttachedPools> AttachedPools::Map(const rpc::AttachResponse& attach, std::vector<int> fds) {
  AttachedPools out;
  out.attach_ = attach;
  std::size_t next_fd = 0;
  Status failed;
  for (const rpc::MemoryObject& mo : attach.memory()) {
    if (mo.kind() != rpc::MemoryObject::KIND_MEMFD) {
      failed = Status::NotSupported("CUDA IPC pool memory: this client maps host memory only");
      break;
    }
    if (next_fd >= fds.size()) {
      failed = Status::Corruption(StrCat("the node described ", attach.memory_size(),
                                         " memory objects and sent ", fds.size(), " descriptors"));
      break;
    }
    Result<SharedMemory> m = SharedMemory::Map(fds[next_fd], mo.bytes());
    fds[next_fd++] = -1;  // owned by the mapping (or closed by Map on error)
    if (!m.ok()) {
      failed = m.status();
      break;
    }
    out.memory_.push_back(std::move(m).value());
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  KVMESH_RETURN_IF_ERROR(failed);
  for (const rpc::PoolDescriptor& d : attach.pools()) {
    KvPoolView view;
    view.layout.dtype = static_cast<KvDtype>(d.dtype());
    view.num_blocks = d.num_blocks();
    view.pool_scale = d.pool_scale();
    for (const rpc::PoolComponentMemory& m : d.components()) {
      if (m.component() >= static_cast<std::uint32_t>(kNumKvComponents)) {
        return Status::Corruption(StrCat("pool ", d.pool(), ": component ", m.component()));
      }
      PagedTensorLayout& l = view.layout.components[m.component()];
      l.order = static_cast<KvLayout>(m.order());
      l.num_layers = m.num_layers();
      l.kv_factor = m.kv_factor();
      l.num_heads = m.num_heads();
      l.tokens_per_block = m.tokens_per_block();
      l.inner = m.inner();
      l.bits = m.bits();
      KVMESH_RETURN_IF_ERROR(CheckComponent(d, m, l, out.memory_));
      view.base[m.component()] =
          static_cast<std::uint8_t*>(out.memory_[m.memory_index()].data()) + m.offset();
    }
    if (!view.layout.data().present()) {
      return Status::Corruption(StrCat("pool ", d.pool(), " has no data component"));
    }
    out.views_.push_back(view);
  }
  return out;
}

}  // namespace kvmesh
