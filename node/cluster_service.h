// ClusterService: the control-plane side of the cluster prefix directory — the peer messages
// DirectoryUpdate and DirectoryLocate (role PEER only, from a current member), and ClusterLookup
// (any authenticated client): for a prompt, how many of its tokens each node holds as a prefix
// and in which tier, answered from the directory (node/prefix_directory.h) without asking every
// node, and the node a router should pick.
//
// ClusterLookup: the prompt's reusable full blocks' content ids (as the block manager derives
// them, so the same model namespace, salt and LoRA id are needed), located at their homes; a
// node's prefix is the run of blocks from the first that the directory lists it as holding. The
// pick is the longest prefix, then the most tokens in the pool, then the node id. Blocks whose
// home did not answer count as held by nobody (unreachable_homes says which).
//
// FillStatus: this node's view of the cluster for kvctl status — membership and its health, the
// members (this node included), its directory shard.
//
// Thread safety: thread-safe (called on the server's workers).
#pragma once

#include "node/prefix_directory.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "node/request_handler.h"
#include "store/tiered_cache.h"

namespace kvmesh {

class ClusterService {
 public:
  // REQUIRES: every pointer outlives the service. `self_address`: the control address this node
  // advertises to the others.
  ClusterService(PrefixDirectory* directory, PeerTable* peers, TieredCache* cache,
                 std::string self_address)
      : directory_(directory),
        peers_(peers),
        cache_(cache),
        self_address_(std::move(self_address)) {}

  static bool Handles(rpc::Request::BodyCase body);
  [[nodiscard]] Status Handle(const SessionInfo& session, const rpc::Request& request,
                              rpc::Response* out);
  void FillStatus(rpc::ClusterStatus* out) const;

 private:
  [[nodiscard]] Status Lookup(const rpc::ClusterLookupRequest& in,
                              std::chrono::milliseconds timeout, rpc::ClusterLookupResponse* out);

  PrefixDirectory* const directory_;
  PeerTable* const peers_;
  TieredCache* const cache_;
  const std::string self_address_;
};

}  // namespace kvmesh
