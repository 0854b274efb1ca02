// Fuzz target engine_service: the request dispatch of node/engine_service.h
// (EngineService::Handle) on a real small node core (fuzz/node_rig.h: pools in shared memory, a
// TieredCache with a host tier, the OperatorService), driven by arbitrary rpc::Request messages:
// the engine's requests and the operator's (Pools, ListBlocks, Tree, InspectBlock, Stats, Evict,
// Flush, EngineReport).
//
// Input: [options u8][frames...] — the bytes a client sends after the handshake: frames
// (node/frame.h, limit 4 MiB) decoded by a FrameDecoder; the Request of each (other frames are
// skipped) goes to one of two sessions (the low bit of its id) of one engine on the Unix socket,
// at most 64 requests. A request's timeout_ms (which Handle does not see: the server turns it
// into a deadline) advances the rig's manual clock first, so retention durations expire.
// The options byte picks tensor_parallel_size 1 or 2, block reuse, partial reuse, the eviction
// policy and the host tier. A fresh rig per input: every input runs alone.
// Oracles: Handle never crashes and always answers — an error with a known non-zero code, or
// the body of the request's kind; every answer fits a frame; after both sessions close (as when
// the connection drops) the block manager's invariants hold and no sequence, private block or
// pin is left.
#include "common/check.h"
#include "common/log.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/node_rig.h"
#include "fuzz/quiet_protobuf.h"
#include "node/frame.h"

namespace kvmesh::fuzz {
namespace {

constexpr int kMaxRequests = 64;
constexpr std::uint32_t kMaxCode = static_cast<std::uint32_t>(StatusCode::kPermissionDenied);

// The response body a successful request of each kind carries.
rpc::Response::BodyCase ExpectedBody(rpc::Request::BodyCase c) {
  switch (c) {
    case rpc::Request::kAttach: return rpc::Response::kAttach;
    case rpc::Request::kAdmit: return rpc::Response::kAdmit;
    case rpc::Request::kStoreFullBlocks: return rpc::Response::kStoreFullBlocks;
    case rpc::Request::kAppendTokens: return rpc::Response::kAppendTokens;
    case rpc::Request::kRelease: return rpc::Response::kRelease;
    case rpc::Request::kPrefetch: return rpc::Response::kPrefetch;
    case rpc::Request::kLookup: return rpc::Response::kLookup;
    case rpc::Request::kPollEvents: return rpc::Response::kEvents;
    case rpc::Request::kStatus: return rpc::Response::kStatus;
    case rpc::Request::kPools: return rpc::Response::kPools;
    case rpc::Request::kListBlocks: return rpc::Response::kListBlocks;
    case rpc::Request::kTree: return rpc::Response::kTree;
    case rpc::Request::kInspectBlock: return rpc::Response::kInspectBlock;
    case rpc::Request::kStats: return rpc::Response::kStats;
    case rpc::Request::kEvict: return rpc::Response::kEvict;
    case rpc::Request::kFlush: return rpc::Response::kFlush;
    case rpc::Request::kEngineReport: return rpc::Response::kEngineReport;
    default: return rpc::Response::BODY_NOT_SET;
  }
}

void CheckAnswer(const rpc::Request& request, const HandlerResult& result) {
  const rpc::Response& r = result.response;
  if (r.has_error() && r.error().code() != 0) {
    KVMESH_CHECK_LE(r.error().code(), kMaxCode) << r.error().message();
    KVMESH_CHECK(!r.error().message().empty()) << "an error without a message";
    KVMESH_CHECK_EQ(r.body_case(), rpc::Response::BODY_NOT_SET) << "an error with a body";
    KVMESH_CHECK(result.fds.empty()) << "descriptors with an error";
    return;
  }
  KVMESH_CHECK_NE(request.body_case(), rpc::Request::BODY_NOT_SET) << "an empty request succeeded";
  KVMESH_CHECK_EQ(r.body_case(), ExpectedBody(request.body_case()))
      << "request kind " << request.body_case();
  rpc::Frame f;
  *f.mutable_response() = r;
  KVMESH_CHECK(EncodeFrame(f, 4u << 20).ok()) << "an answer larger than a frame";
}

void CheckClean(TieredCache& cache) {
  cache.WaitForPrefetches();
  BlockManager& m = cache.manager();
  const Status invariants = m.CheckInvariants();
  KVMESH_CHECK(invariants.ok()) << invariants.ToString();
  const BlockManagerStats s = m.GetStats();
  KVMESH_CHECK_EQ(s.running_sequences, 0) << "sequences left after the sessions closed";
  for (const PoolStats& p : s.pools) {
    KVMESH_CHECK_EQ(p.private_blocks, 0) << "pool " << p.name;
    KVMESH_CHECK_EQ(p.pinned_blocks, 0) << "pool " << p.name;
  }
}

}  // namespace
}  // namespace kvmesh::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  using namespace kvmesh::fuzz;
  kvmesh::fuzz::QuietProtobuf();
  static const bool quiet = [] { return SetLogLevel("off").ok(); }();
  (void)quiet;
  FuzzInput in(data, size);
  const std::uint8_t opts = in.U8();
  NodeRigOptions o;
  o.tensor_parallel_size = (opts & 1) != 0 ? 2 : 1;
  o.enable_block_reuse = (opts & 2) == 0;
  o.enable_partial_reuse = (opts & 4) == 0;
  o.policy = (opts & 8) != 0 ? EvictionPolicyKind::kLru : EvictionPolicyKind::kPriorityLru;
  o.host_tier = (opts & 16) == 0;
  NodeRig rig(o);
  EngineService& service = rig.service();

  std::shared_ptr<SessionState> sessions[2];
  for (int i = 0; i < 2; ++i) {
    SessionInfo info;
    info.session_id = static_cast<std::uint64_t>(i + 1);
    info.role = rpc::CLIENT_ROLE_ENGINE;
    info.client_name = "fuzz";
    info.peer = "unix";
    info.local = true;
    sessions[i] = service.OpenSession(info);
  }
  FrameDecoder decoder(4u << 20);
  decoder.Feed(AsBytes(in.Rest()));
  for (int n = 0; n < kMaxRequests;) {
    Result<std::optional<rpc::Frame>> next = decoder.Next();
    if (next.ok() && !next->has_value()) break;
    if (!next.ok()) {
      if (next.status().IsInvalidArgument() && next.status().message() != "unknown message type") {
        break;  // a bad header: the stream ends here, as the server closes the connection
      }
      continue;
    }
    if (!(*next)->has_request()) continue;
    const rpc::Request& request = (*next)->request();
    rig.clock()->Advance(std::chrono::milliseconds(request.timeout_ms()));
    const HandlerResult result = service.Handle(*sessions[request.id() & 1], request);
    CheckAnswer(request, result);
    ++n;
  }
  for (auto& s : sessions) service.CloseSession(*s);
  CheckClean(rig.cache());
  return 0;
}
