// Conversions between kvmesh's types and the control-plane messages (node/proto/kvmesh_rpc.proto).
//
// Messages from the network are validated here, at the edge: FromProto returns kInvalidArgument
// naming the field for anything a kvmesh type cannot hold (a priority or a code out of range, a
// content hash of the wrong size, negative positions). What the block manager checks itself
// (ordering of ranges, token counts) is left to it.
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <vector>

#include "common/result.h"
#include "node/proto/kvmesh_rpc.pb.h"
#include "pool/block_manager.h"
#include "pool/kv_events.h"

namespace kvmesh {

void SetError(rpc::Error* out, const Status& status);
// OK for an unset error or code 0; an unknown code becomes kInternal with the code in the message.
Status StatusFromError(const rpc::Error& error);

Result<SequenceOptions> FromProto(const rpc::SequenceOptions& in);
void ToProto(const SequenceOptions& in, rpc::SequenceOptions* out);

void ToProto(const KvEventBatch& batch, rpc::EventBatch* out);
KvEventBatch FromProto(const rpc::EventBatch& in);

void ToProto(const BlockTable& table, rpc::BlockTable* out);
BlockTable FromProto(const rpc::BlockTable& in);

// The tokens of a request as a span over the message's storage.
inline std::span<const Token> TokensOf(const google::protobuf::RepeatedField<std::int32_t>& f) {
  return {f.data(), static_cast<std::size_t>(f.size())};
}

}  // namespace kvmesh
