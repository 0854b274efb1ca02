#include "node/rpc_convert.h"

#include <cstring>

#include "common/strings.h"

namespace kvmesh {
namespace {

constexpr std::uint32_t kMaxStatusCode = static_cast<std::uint32_t>(StatusCode::kPermissionDenied);

Result<ContentId> ContentIdFromBytes(const std::string& bytes, std::string_view field) {
  ContentId id;
  if (bytes.size() != sizeof(id.bytes)) {
    return Status::InvalidArgument(
        StrCat(field, " has ", bytes.size(), " bytes, not ", sizeof(id.bytes)));
  }
  std::memcpy(id.bytes.data(), bytes.data(), sizeof(id.bytes));
  return id;
}

// A duration in milliseconds from the wire, as the block manager holds it: negative or beyond
// kMaxRetentionDuration is refused here, before the conversion to nanoseconds could overflow.
Result<Nanos> DurationFromMs(std::int64_t ms, std::string_view field) {
  constexpr std::int64_t kMaxMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(kMaxRetentionDuration).count();
  if (ms < 0) return Status::InvalidArgument(StrCat(field, " ", ms, " is negative"));
  if (ms > kMaxMs) {
    return Status::InvalidArgument(StrCat(field, " ", ms, " is more than ", kMaxMs,
                                          " (100 years); leave it unset for no expiry"));
  }
  return std::chrono::milliseconds(ms);
}

std::string BytesOf(const ContentId& id) {
  return {reinterpret_cast<const char*>(id.bytes.data()), sizeof(id.bytes)};
}

}  // namespace

void SetError(rpc::Error* out, const Status& status) {
  out->set_code(static_cast<std::uint32_t>(status.code()));
  out->set_message(status.message());
}

Status StatusFromError(const rpc::Error& error) {
  if (error.code() == 0) return Status::Ok();
  if (error.code() > kMaxStatusCode) {
    return Status::Internal(StrCat("error code ", error.code(), ": ", error.message()));
  }
  return {static_cast<StatusCode>(error.code()), error.message()};
}

Result<SequenceOptions> FromProto(const rpc::SequenceOptions& in) {
  SequenceOptions o;
  o.domain.salt = in.domain().salt();
  o.domain.lora_id = in.domain().lora_id();
  for (int i = 0; i < in.multimodal_size(); ++i) {
    const rpc::MultimodalItem& m = in.multimodal(i);
    KVMESH_ASSIGN_OR_RETURN(const ContentId hash,
                            ContentIdFromBytes(m.hash(), StrCat("multimodal[", i, "].hash")));
    o.multimodal.push_back(MultimodalItem{hash, m.begin_token(), m.num_tokens()});
  }
  for (int i = 0; i < in.retention_size(); ++i) {
    const rpc::RetentionRange& r = in.retention(i);
    RetentionRange out;
    out.begin_token = r.begin_token();
    out.end_token = r.end_token();
    out.priority = r.priority();
    if (r.has_duration_ms()) {
      KVMESH_ASSIGN_OR_RETURN(
          out.duration, DurationFromMs(r.duration_ms(), StrCat("retention[", i, "].duration_ms")));
    }
    o.retention.push_back(out);
  }
  if (in.has_decode_priority()) o.decode_priority = in.decode_priority();
  if (in.has_decode_duration_ms()) {
    KVMESH_ASSIGN_OR_RETURN(o.decode_duration,
                            DurationFromMs(in.decode_duration_ms(), "decode_duration_ms"));
  }
  o.reuse_last_token = in.reuse_last_token();
  if (in.has_allow_partial_reuse()) o.allow_partial_reuse = in.allow_partial_reuse();
  return o;
}

void ToProto(const SequenceOptions& in, rpc::SequenceOptions* out) {
  out->mutable_domain()->set_salt(in.domain.salt);
  out->mutable_domain()->set_lora_id(in.domain.lora_id);
  for (const MultimodalItem& m : in.multimodal) {
    rpc::MultimodalItem* p = out->add_multimodal();
    p->set_hash(BytesOf(m.hash));
    p->set_begin_token(m.begin_token);
    p->set_num_tokens(m.num_tokens);
  }
  for (const RetentionRange& r : in.retention) {
    rpc::RetentionRange* p = out->add_retention();
    p->set_begin_token(r.begin_token);
    p->set_end_token(r.end_token);
    p->set_priority(r.priority);
    if (r.duration) {
      p->set_duration_ms(
          std::chrono::duration_cast<std::chrono::milliseconds>(*r.duration).count());
    }
  }
  out->set_decode_priority(in.decode_priority);
  if (in.decode_duration) {
    out->set_decode_duration_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(*in.decode_duration).count());
  }
  out->set_reuse_last_token(in.reuse_last_token);
  out->set_allow_partial_reuse(in.allow_partial_reuse);
}

void ToProto(const KvEventBatch& batch, rpc::EventBatch* out) {
  out->set_next_seq(batch.next_seq);
  if (batch.lost) {
    out->set_lost_first(batch.lost->first);
    out->set_lost_last(batch.lost->last);
  }
  out->mutable_events()->Reserve(static_cast<int>(batch.events.size()));
  for (const KvEvent& e : batch.events) {
    rpc::KvEvent* p = out->add_events();
    p->set_seq(e.seq);
    p->set_type(static_cast<std::uint32_t>(e.type));
    p->set_pool(e.pool.value);
    p->set_block(e.block.value);
    p->set_content_id(BytesOf(e.content_id));
    p->set_parent_id(BytesOf(e.parent_id));
    p->set_num_tokens(e.num_tokens);
    p->set_priority(e.priority);
    p->set_tier(static_cast<std::uint32_t>(e.tier));
    p->set_previous_tier(static_cast<std::uint32_t>(e.previous_tier));
  }
}

KvEventBatch FromProto(const rpc::EventBatch& in) {
  KvEventBatch b;
  b.next_seq = in.next_seq();
  if (in.lost_first() != 0 || in.lost_last() != 0)
    b.lost = KvEventGap{in.lost_first(), in.lost_last()};
  for (const rpc::KvEvent& p : in.events()) {
    KvEvent e;
    e.seq = p.seq();
    e.type = static_cast<KvEventType>(p.type());
    e.pool = PoolId{p.pool()};
    e.block = BlockId{p.block()};
    if (p.content_id().size() == sizeof(e.content_id.bytes)) {
      std::memcpy(e.content_id.bytes.data(), p.content_id().data(), sizeof(e.content_id.bytes));
    }
    if (p.parent_id().size() == sizeof(e.parent_id.bytes)) {
      std::memcpy(e.parent_id.bytes.data(), p.parent_id().data(), sizeof(e.parent_id.bytes));
    }
    e.num_tokens = p.num_tokens();
    e.priority = p.priority();
    e.tier = static_cast<KvTier>(p.tier());
    e.previous_tier = static_cast<KvTier>(p.previous_tier());
    b.events.push_back(e);
  }
  return b;
}

void ToProto(const BlockTable& table, rpc::BlockTable* out) {
  out->set_pool(table.pool.value);
  out->mutable_block_ids()->Add(table.block_ids.begin(), table.block_ids.end());
}

BlockTable FromProto(const rpc::BlockTable& in) {
  BlockTable t;
  t.pool = PoolId{in.pool()};
  t.block_ids.assign(in.block_ids().begin(), in.block_ids().end());
  return t;
}

}  // namespace kvmesh
