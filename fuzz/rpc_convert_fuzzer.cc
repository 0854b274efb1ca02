// Fuzz target rpc_convert: node/rpc_convert.h — the conversion of every message field that comes
// from the network into kvmesh's types.
//
// Input: a serialised rpc::Frame (what a frame's payload holds). For a Request, every body's
// fields are converted as the engine service converts them: the SequenceOptions of Admit,
// Prefetch and Lookup (FromProto), the tokens (TokensOf). For a Response (what a client reads
// from a node), the EventBatch, the block tables of Admit and the error (StatusFromError). Any
// AuthResult error too.
// Oracles: an accepted SequenceOptions converts back (ToProto) and again (FromProto) to the same
// value; a rejected one is kInvalidArgument; TokensOf covers exactly the message's tokens;
// EventBatch and BlockTable round-trip through ToProto; StatusFromError never gives OK for a
// non-zero code, and SetError of its result keeps a known code.
#include "common/check.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/quiet_protobuf.h"
#include "node/rpc_convert.h"

namespace kvmesh::fuzz {
namespace {

bool SameOptions(const SequenceOptions& a, const SequenceOptions& b) {
  if (!(a.domain == b.domain) || a.decode_priority != b.decode_priority ||
      a.decode_duration != b.decode_duration || a.reuse_last_token != b.reuse_last_token ||
      a.allow_partial_reuse != b.allow_partial_reuse ||
      a.multimodal.size() != b.multimodal.size() || a.retention.size() != b.retention.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.multimodal.size(); ++i) {
    const MultimodalItem& x = a.multimodal[i];
    const MultimodalItem& y = b.multimodal[i];
    if (!(x.hash == y.hash) || x.begin_token != y.begin_token || x.num_tokens != y.num_tokens) {
      return false;
    }
  }
  for (std::size_t i = 0; i < a.retention.size(); ++i) {
    const RetentionRange& x = a.retention[i];
    const RetentionRange& y = b.retention[i];
    if (x.begin_token != y.begin_token || x.end_token != y.end_token || x.priority != y.priority ||
        x.duration != y.duration) {
      return false;
    }
  }
  return true;
}

void CheckOptions(const rpc::SequenceOptions& in) {
  Result<SequenceOptions> o = FromProto(in);
  if (!o.ok()) {
    KVMESH_CHECK(o.status().IsInvalidArgument()) << o.status().ToString();
    return;
  }
  rpc::SequenceOptions back;
  ToProto(*o, &back);
  Result<SequenceOptions> again = FromProto(back);
  KVMESH_CHECK(again.ok()) << "an accepted SequenceOptions is refused after ToProto: "
                           << again.status().ToString();
  KVMESH_CHECK(SameOptions(*o, *again)) << "SequenceOptions changed through ToProto/FromProto";
}

void CheckTokens(const google::protobuf::RepeatedField<std::int32_t>& tokens) {
  const std::span<const Token> span = TokensOf(tokens);
  KVMESH_CHECK_EQ(span.size(), static_cast<std::size_t>(tokens.size()));
  for (int i = 0; i < tokens.size(); ++i) KVMESH_CHECK_EQ(span[i], tokens.Get(i));
}

void CheckRequest(const rpc::Request& r) {
  switch (r.body_case()) {
    case rpc::Request::kAdmit:
      CheckTokens(r.admit().tokens());
      CheckOptions(r.admit().options());
      break;
    case rpc::Request::kPrefetch:
      CheckTokens(r.prefetch().tokens());
      CheckOptions(r.prefetch().options());
      break;
    case rpc::Request::kLookup:
      CheckTokens(r.lookup().tokens());
      CheckOptions(r.lookup().options());
      break;
    case rpc::Request::kAppendTokens: CheckTokens(r.append_tokens().tokens()); break;
    default: break;  // the other bodies carry only integers, taken as they are
  }
}

void CheckError(const rpc::Error& e) {
  const Status s = StatusFromError(e);
  KVMESH_CHECK_EQ(s.ok(), e.code() == 0);
  rpc::Error back;
  SetError(&back, s);
  if (e.code() != 0 && s.code() != StatusCode::kInternal) {
    KVMESH_CHECK_EQ(back.code(), e.code());
    KVMESH_CHECK(back.message() == e.message());
  }
}

void CheckEvents(const rpc::EventBatch& in) {
  const KvEventBatch b = FromProto(in);
  KVMESH_CHECK_EQ(b.events.size(), static_cast<std::size_t>(in.events_size()));
  rpc::EventBatch back;
  ToProto(b, &back);
  const KvEventBatch again = FromProto(back);
  KVMESH_CHECK_EQ(again.events.size(), b.events.size());
  KVMESH_CHECK_EQ(again.next_seq, b.next_seq);
  KVMESH_CHECK_EQ(again.lost.has_value(), b.lost.has_value());
  for (std::size_t i = 0; i < b.events.size(); ++i) {
    KVMESH_CHECK_EQ(again.events[i].seq, b.events[i].seq);
    KVMESH_CHECK(again.events[i].content_id == b.events[i].content_id);
  }
}

void CheckTable(const rpc::BlockTable& in) {
  const BlockTable t = FromProto(in);
  rpc::BlockTable back;
  ToProto(t, &back);
  KVMESH_CHECK_EQ(back.pool(), in.pool());
  KVMESH_CHECK_EQ(back.block_ids_size(), in.block_ids_size());
  KVMESH_CHECK(FromProto(back).block_ids == t.block_ids);
}

void CheckResponse(const rpc::Response& r) {
  if (r.has_error()) CheckError(r.error());
  if (r.has_events()) CheckEvents(r.events());
  if (r.has_admit()) {
    for (const rpc::BlockTable& t : r.admit().tables()) CheckTable(t);
  }
}

}  // namespace
}  // namespace kvmesh::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  kvmesh::fuzz::QuietProtobuf();
  rpc::Frame frame;
  if (!frame.ParseFromArray(data, static_cast<int>(size))) return 0;
  switch (frame.kind_case()) {
    case rpc::Frame::kRequest: fuzz::CheckRequest(frame.request()); break;
    case rpc::Frame::kResponse: fuzz::CheckResponse(frame.response()); break;
    case rpc::Frame::kAuthResult:
      if (frame.auth_result().has_error()) fuzz::CheckError(frame.auth_result().error());
      break;
    default: break;
  }
  return 0;
}
