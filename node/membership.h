// Membership: keeps a PeerTable (node/peer_table.h) equal to the cluster's members, from a static
// list (cluster.peers) or from etcd (cluster.etcd), and advertises this node to the others.
//
// Static: the table is filled once at Start with every listed peer but this node; it never
// changes. Only node_id and control_address are known of a static peer.
//
// Etcd (over its v3 JSON gateway, node/etcd_client.h), on one background thread:
//   join       grant a lease of lease_ttl_s, put <prefix><node_id> = this node's PeerInfo (JSON)
//              attached to it; the lease id is the node's incarnation;
//   alive      keep the lease alive every lease_ttl_s / 3;
//   view       every poll_interval, list <prefix> and replace the table with what is there (this
//              node left out) — a poll, not a watch: the gateway's watch is a long-lived chunked
//              stream; a list of a few dozen small keys every 500 ms is simpler and bounded;
//   lapse      a member whose lease lapses loses its key in etcd, so the next list drops it (within
//              lease_ttl_s + poll_interval of its last keepalive); when this node's own lease is
//              found gone (keepalive answers no TTL), it joins again with a new lease;
//   etcd down  the table keeps the last view; the error is logged once per outage; calls are
//              retried with exponential backoff (100 ms doubling to 5 s);
//   leave      Stop() revokes the lease (its key goes at once) and joins the thread.
//
// Thread safety: thread-safe. The table's listeners run on the membership thread (static: on the
// thread that calls Start).
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "node/node_config.h"
#include "node/peer_table.h"

namespace kvmesh {

// A PeerInfo as JSON and back (the value of a member key in etcd); kCorruption when it does not
// parse or lacks node_id or control_address.
std::string EncodePeerInfo(const PeerInfo& info);
[[nodiscard]] Result<PeerInfo> DecodePeerInfo(std::string_view json);

class Membership {
 public:
  virtual ~Membership() = default;
  // REQUIRES: `table` outlives the membership; self.node_id == table->self_id().
  // kNone: a membership that does nothing. Etcd: returns at once; the first join and list happen
  // on the thread (WaitForFirstView waits for them).
  static Result<std::unique_ptr<Membership>> Start(const ClusterSection& config, PeerInfo self,
                                                   PeerTable* table);
  // Advertises a changed self (a UCX worker address that became known); etcd: put again.
  virtual void UpdateSelf(PeerInfo self) = 0;
  // True once the table holds a view read from the source (static: at once), waiting up to
  // `timeout`.
  [[nodiscard]] virtual bool WaitForFirstView(std::chrono::milliseconds timeout) = 0;
  // Leaves the cluster (etcd: revokes the lease); idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

}  // namespace kvmesh
