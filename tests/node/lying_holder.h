// A holder that lies, for the requester's verification tests (peer_fetch_test, handoff_test): a
// BlockSource that corrupts or swaps blocks, a streaming sender's LayerRangeSource that does the
// same to layer ranges, and a control server handler that answers only peer requests through a
// PeerService of its own and, optionally, a HandoffSender's stream requests (so that the lying
// services can stand in for a node under that node's id and engine).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "node/control_server.h"
#include "node/handoff.h"
#include "node/layer_range_service.h"
#include "node/peer_service.h"
#include "node/request_handler.h"

namespace kvmesh::node_test {

// A holder's block source that lies (or forgets): flips a byte in the middle of block
// `corrupt_at`'s bundle — or, with `corrupt_last`, its last payload byte (the end of its last
// component range: what a one-pass decode reads last) — (its payload, copied out of the pool into
// the slot first, so the pool itself stays right), or sends the bundle of the next block in place
// of block `foreign_at` (a valid bundle of another content id).
class LyingSource final : public BlockSource {
 public:
  // `missing_at`: block `missing_at` of a fetch (and so every one after it) is said not to be
  // held any more, as after an eviction between HaveBlocks and FetchBlocks.
  LyingSource(BlockSource* inner, std::vector<BundleCodec> codecs, int corrupt_at, int foreign_at,
              int missing_at = -1, bool corrupt_last = false)
      : inner_(inner),
        codecs_(std::move(codecs)),
        corrupt_at_(corrupt_at),
        foreign_at_(foreign_at),
        missing_at_(missing_at),
        corrupt_last_(corrupt_last) {}
  Held Count(std::span<const ContentId> ids) override { return inner_->Count(ids); }
  bool Encode(std::span<const ContentId> ids, std::size_t i,
              std::span<const std::span<std::byte>> slots, Prepared* out) override {
    if (static_cast<int>(i) == missing_at_) return false;
    const std::size_t asked = static_cast<int>(i) == foreign_at_ && i + 1 < ids.size() ? i + 1 : i;
    if (!inner_->Encode(ids, asked, slots, out)) return false;
    if (static_cast<int>(i) == corrupt_at_) {
      for (const BundleRange& r : codecs_[0].data_ranges()) {
        const std::byte*& from =
            out->payload[0][static_cast<std::size_t>(std::max(r.component, 0))];
        if (r.component < 0 || from == nullptr) continue;
        std::memcpy(slots[0].data() + r.offset, from, static_cast<std::size_t>(r.length));
        from = nullptr;
      }
      std::span<std::byte> b = slots[0].first(static_cast<std::size_t>(codecs_[0].bundle_bytes()));
      std::size_t at = b.size() / 2;
      if (corrupt_last_) {
        for (const BundleRange& r : codecs_[0].data_ranges()) {
          if (r.component >= 0) at = static_cast<std::size_t>(r.offset + r.length - 1);
        }
      }
      b[at] ^= std::byte{0x40};
    }
    return true;
  }

 private:
  BlockSource* const inner_;
  const std::vector<BundleCodec> codecs_;
  const int corrupt_at_;
  const int foreign_at_;
  const int missing_at_;
  const bool corrupt_last_;
};

// A streaming sender's ranges that lie: every range is written whole (no seal-only ranges sent
// from the pool), with a payload byte flipped in the ranges of block `corrupt_at` of each fetch,
// or the range of the next block (a valid range of another content id) in place of block
// `foreign_at`'s.
class LyingLayerSource final : public LayerRangeSource {
 public:
  LyingLayerSource(LayerRangeSource* inner, std::vector<LayerRangeCodec> codecs, int corrupt_at,
                   int foreign_at)
      : inner_(inner),
        codecs_(std::move(codecs)),
        corrupt_at_(corrupt_at),
        foreign_at_(foreign_at) {}
  [[nodiscard]] bool seal_only() const override { return false; }
  Status EncodeSeal(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                    std::span<std::byte> seal) override {
    return inner_->EncodeSeal(q, i, pool, seal);
  }
  Status Encode(const LayerRangeRequest& q, std::size_t i, std::size_t pool,
                std::span<std::byte> out) override {
    const std::size_t asked =
        static_cast<int>(i) == foreign_at_ && i + 1 < q.blocks.size() ? i + 1 : i;
    KVMESH_RETURN_IF_ERROR(inner_->Encode(q, asked, pool, out));
    if (static_cast<int>(i) == corrupt_at_) {
      const BundleRange payload = codecs_[pool].Parts(q.ranges[pool]).parts[1];
      out[static_cast<std::size_t>(payload.offset + payload.length / 2)] ^= std::byte{0x40};
    }
    return Status::Ok();
  }

 private:
  LayerRangeSource* const inner_;
  const std::vector<LayerRangeCodec> codecs_;
  const int corrupt_at_;
  const int foreign_at_;
};

// A control server that answers only peer requests, through a PeerService of its own, and the
// stream requests of a HandoffSender when one is given.
class PeerOnlyHandler final : public RequestHandler {
 public:
  explicit PeerOnlyHandler(PeerService* service, HandoffSender* sender = nullptr)
      : service_(service), sender_(sender) {}
  std::shared_ptr<SessionState> OpenSession(const SessionInfo& info) override {
    return std::make_shared<SessionState>(info);
  }
  HandlerResult Handle(SessionState& s, const rpc::Request& request) override {
    HandlerResult r;
    Status st = sender_ != nullptr && HandoffSender::Serves(request)
                    ? sender_->HandlePeer(s.info(), request, &r.response)
                : PeerService::Handles(request.body_case())
                    ? service_->Handle(s.info(), request, &r.response)
                    : Status::NotSupported("peer requests only");
    if (!st.ok()) {
      r.response.clear_body();
      r.response.mutable_error()->set_code(static_cast<std::uint32_t>(st.code()));
      r.response.mutable_error()->set_message(st.message());
    }
    return r;
  }
  void CloseSession(SessionState&) override {}
  KvEventBatch PollEvents(std::uint64_t, std::size_t) override { return {}; }

 private:
  PeerService* service_;
  HandoffSender* sender_;
};

// A control server on 127.0.0.1 (a free port) that says it is `node_id` and answers through
// `handler` (which outlives it).
inline Result<std::unique_ptr<ControlServer>> StartPeerOnlyServer(const std::string& node_id,
                                                                  const std::string& secret,
                                                                  RequestHandler* handler) {
  ControlServerOptions so;
  so.node_id = node_id;
  so.secret = secret;
  so.tcp_listen = "127.0.0.1:0";
  return ControlServer::Start(so, handler);
}

}  // namespace kvmesh::node_test
