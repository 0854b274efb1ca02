#include "tests/cli/live_node.h"

#include <cmath>

#include "kernels/append_kv.h"

namespace kvmesh::cli_test {

std::vector<std::string> NodeFlags(const node_test::KvnodeProcess& node) {
  return {"--node", node.tcp_address(), "--secret", node_test::kTestSecret};
}

std::vector<std::string> Kvctl(const node_test::KvnodeProcess& node,
                               std::vector<std::string> args) {
  for (std::string& f : NodeFlags(node)) args.push_back(std::move(f));
  return args;
}

std::vector<Token> TestPrompt(std::uint32_t seed, std::size_t n) {
  std::vector<Token> t(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& v : t) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<Token>(x % 50000);
  }
  return t;
}

Result<std::unique_ptr<LiveEngine>> LiveEngine::Attach(const node_test::KvnodeProcess& node,
                                                       const std::string& name) {
  KVMESH_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> c, node.Connect(name));
  std::vector<int> fds;
  KVMESH_ASSIGN_OR_RETURN(const rpc::AttachResponse a, c->Attach(&fds));
  KVMESH_ASSIGN_OR_RETURN(AttachedPools pools, AttachedPools::Map(a, std::move(fds)));
  return std::unique_ptr<LiveEngine>(new LiveEngine(std::move(c), std::move(pools)));
}

Status LiveEngine::Write(const std::vector<BlockTable>& tables, std::int64_t begin,
                         std::int64_t end, std::uint64_t seed) {
  if (end <= begin) return Status::Ok();
  for (std::size_t p = 0; p < tables.size(); ++p) {
    const KvPoolView& view = pools_.view(static_cast<int>(p));
    const PagedTensorLayout& d = view.layout.data();
    const auto rows = static_cast<std::size_t>(end - begin);
    const std::size_t width = static_cast<std::size_t>(d.num_heads) * d.inner;
    std::vector<float> k(rows * width), v(rows * width);
    const std::int32_t cu[2] = {0, static_cast<std::int32_t>(rows)};
    const auto start = static_cast<std::int32_t>(begin);
    for (std::int32_t layer = 0; layer < d.num_layers; ++layer) {
      for (std::size_t i = 0; i < k.size(); ++i) {
        const double x = static_cast<double>(seed) * 0.37 + static_cast<double>(begin) * 1.3 +
                         static_cast<double>(i) * 0.011 + layer * 0.7;
        k[i] = static_cast<float>(std::sin(x) * (1.0 + (i % 7)));
        v[i] = static_cast<float>(std::cos(x * 1.1) * 0.5);
      }
      AppendKvArgs a;
      a.pool = view;
      a.layer = layer;
      a.num_seqs = 1;
      a.cu_tokens = cu;
      a.start_pos = &start;
      a.block_table = tables[p].block_ids.data();
      a.max_blocks_per_seq = static_cast<std::int32_t>(tables[p].block_ids.size());
      a.act_dtype = ActDtype::kFP32;
      a.k = k.data();
      a.v = d.kv_factor == 2 ? v.data() : nullptr;
      a.total_tokens = cu[1];
      KVMESH_RETURN_IF_ERROR(cpu::AppendKv(a, nullptr));
    }
  }
  return Status::Ok();
}

Result<std::int64_t> LiveEngine::Run(std::uint64_t request_id, const std::vector<Token>& prompt,
                                     const SequenceOptions& options) {
  KVMESH_ASSIGN_OR_RETURN(const AdmitReply a, client_->Admit(request_id, prompt, options));
  KVMESH_RETURN_IF_ERROR(Write(a.result.tables, a.result.reused_tokens,
                               static_cast<std::int64_t>(prompt.size()), prompt.front()));
  KVMESH_RETURN_IF_ERROR(client_->StoreFullBlocks(request_id).status());
  KVMESH_RETURN_IF_ERROR(client_->Release(request_id));
  return a.result.reused_tokens;
}

}  // namespace kvmesh::cli_test
