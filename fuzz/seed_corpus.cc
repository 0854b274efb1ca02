// kvmesh_fuzz_seeds OUT_DIR: writes the binary seed inputs of the fuzz targets into
// OUT_DIR/<target>/ (fuzz/corpus/ in the tree): real frames, request streams of an engine session,
// handshakes and bundles, in each target's input format (the comment at the top of each
// fuzz/<target>_fuzzer.cc). The text seeds (configs, trace lines, config.json files) are copies of
// real files, not generated. Run it again after a change of the protocol or of the bundle format.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/check.h"
#include "fuzz/bundle_shapes.h"
#include "node/auth.h"
#include "node/frame.h"
#include "pool/block_ids.h"
#include "pool/pool_storage.h"
#include "store/block_bundle.h"
#include "store/layer_range_codec.h"

namespace kvmesh::fuzz {
namespace {

namespace fs = std::filesystem;

fs::path out_dir;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = out_dir / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << bytes;
}

std::string Framed(const rpc::Frame& f) { return std::move(EncodeFrame(f, 4u << 20)).value(); }

std::vector<Token> Prompt(int n, Token base) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = base + i * 7 % 1000;
  return t;
}

rpc::Frame Request(std::uint64_t id) {
  rpc::Frame f;
  f.mutable_request()->set_id(id);
  return f;
}

rpc::Frame Admit(std::uint64_t id, std::uint64_t request_id, const std::vector<Token>& tokens,
                 bool options) {
  rpc::Frame f = Request(id);
  rpc::AdmitRequest* a = f.mutable_request()->mutable_admit();
  a->set_request_id(request_id);
  a->mutable_tokens()->Add(tokens.begin(), tokens.end());
  if (options) {
    rpc::SequenceOptions* o = a->mutable_options();
    o->mutable_domain()->set_salt("tenant-a");
    o->mutable_domain()->set_lora_id(3);
    rpc::RetentionRange* r = o->add_retention();
    r->set_begin_token(0);
    r->set_end_token(8);
    r->set_priority(90);
    r->set_duration_ms(1000);
    o->set_decode_priority(10);
    o->set_decode_duration_ms(500);
    rpc::MultimodalItem* m = o->add_multimodal();
    m->set_hash(std::string(16, '\x5a'));
    m->set_begin_token(8);
    m->set_num_tokens(4);
  }
  return f;
}

rpc::Frame Store(std::uint64_t id, std::uint64_t request_id) {
  rpc::Frame f = Request(id);
  f.mutable_request()->mutable_store_full_blocks()->set_request_id(request_id);
  return f;
}

rpc::Frame Append(std::uint64_t id, std::uint64_t request_id, const std::vector<Token>& tokens) {
  rpc::Frame f = Request(id);
  rpc::AppendTokensRequest* a = f.mutable_request()->mutable_append_tokens();
  a->set_request_id(request_id);
  a->mutable_tokens()->Add(tokens.begin(), tokens.end());
  return f;
}

rpc::Frame Release(std::uint64_t id, std::uint64_t request_id) {
  rpc::Frame f = Request(id);
  f.mutable_request()->mutable_release()->set_request_id(request_id);
  return f;
}

rpc::Frame Lookup(std::uint64_t id, const std::vector<Token>& tokens) {
  rpc::Frame f = Request(id);
  f.mutable_request()->mutable_lookup()->mutable_tokens()->Add(tokens.begin(), tokens.end());
  return f;
}

rpc::Frame Prefetch(std::uint64_t id, const std::vector<Token>& tokens) {
  rpc::Frame f = Request(id);
  f.mutable_request()->mutable_prefetch()->mutable_tokens()->Add(tokens.begin(), tokens.end());
  return f;
}

rpc::Frame Simple(std::uint64_t id, int kind) {
  rpc::Frame f = Request(id);
  switch (kind) {
    case 0: f.mutable_request()->mutable_attach(); break;
    case 1: f.mutable_request()->mutable_status(); break;
    case 2: f.mutable_request()->mutable_poll_events()->set_from_seq(1); break;
    default: f.mutable_request()->mutable_subscribe_events()->set_from_seq(1); break;
  }
  return f;
}

// An engine's session: admit, write (store), append, look up, release, admit again (a hit).
std::string EngineSession() {
  const std::vector<Token> p = Prompt(40, 100);
  std::string s;
  s += Framed(Simple(1, 0));
  s += Framed(Admit(2, 7, p, true));
  s += Framed(Store(3, 7));
  s += Framed(Append(4, 7, {5, 6, 7, 8, 9}));
  s += Framed(Store(5, 7));
  s += Framed(Lookup(6, p));
  s += Framed(Release(7, 7));
  s += Framed(Admit(8, 9, p, true));
  s += Framed(Prefetch(9, p));
  s += Framed(Simple(10, 2));
  s += Framed(Simple(11, 1));
  return s;
}

// Prompts that overfill the pools (evictions, offload to the host tier), then the first again
// (restored from the host tier).
std::string EvictAndRestore() {
  std::string s;
  std::uint64_t id = 1;
  for (int i = 0; i < 6; ++i) {
    const auto r = static_cast<std::uint64_t>(100 + i);
    s += Framed(Admit(id++, r, Prompt(60, 1000 * (i + 1)), false));
    s += Framed(Store(id++, r));
    s += Framed(Release(id++, r));
  }
  s += Framed(Lookup(id++, Prompt(60, 1000)));
  s += Framed(Prefetch(id++, Prompt(60, 2000)));
  s += Framed(Admit(id++, 200, Prompt(60, 1000), false));
  s += Framed(Simple(id++, 1));
  return s;
}

// The operator's requests (kvctl pools, blocks, tree, inspect, stats, evict, flush) over a pool
// that an engine filled first, as kvctl sends them (node/operator_service.h).
std::string OperatorSession() {
  std::string s;
  std::uint64_t id = 1;
  for (int i = 0; i < 3; ++i) {
    const auto r = static_cast<std::uint64_t>(300 + i);
    s += Framed(Admit(id++, r, Prompt(24, 500 * (i + 1)), i == 0));
    s += Framed(Store(id++, r));
    s += Framed(Release(id++, r));
  }
  auto op = [&id](auto fill) {
    rpc::Frame f = Request(id++);
    fill(f.mutable_request());
    return Framed(f);
  };
  s += op([](rpc::Request* q) { q->mutable_pools(); });
  s += op([](rpc::Request* q) {
    rpc::ListBlocksRequest* l = q->mutable_list_blocks();
    l->set_limit(4);
    l->set_tiers(true);
  });
  s += op([](rpc::Request* q) {
    rpc::ListBlocksRequest* l = q->mutable_list_blocks();
    l->set_cursor(2);
    l->set_pool(1);
    l->set_min_priority(10);
    l->set_max_priority(90);
  });
  s += op([](rpc::Request* q) { q->mutable_tree(); });
  s += op([](rpc::Request* q) {
    rpc::TreeRequest* t = q->mutable_tree();
    t->set_prefix("a");
    t->set_max_depth(2);
    t->set_max_nodes(8);
  });
  s += op([](rpc::Request* q) { q->mutable_inspect_block()->set_content_id("3"); });
  s += op([](rpc::Request* q) { q->mutable_stats(); });
  s += op([](rpc::Request* q) {
    rpc::EvictRequest* e = q->mutable_evict();
    e->set_below_priority(50);
    e->set_dry_run(true);
  });
  s += op([](rpc::Request* q) { q->mutable_evict()->set_content_id("c"); });
  s += op([](rpc::Request* q) { q->mutable_flush(); });
  s += op([](rpc::Request* q) {
    rpc::EngineReportRequest* e = q->mutable_engine_report();
    e->set_requests(3);
    e->set_checks(3);
  });
  s += Framed(Lookup(id++, Prompt(24, 500)));
  s += Framed(Simple(id++, 1));
  return s;
}

void FrameDecoderSeeds() {
  const std::string session = EngineSession();
  rpc::Frame hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_server_nonce(std::string(kAuthNonceBytes, 'n'));
  hello.mutable_hello()->set_node_id("node-1");
  rpc::Frame response;
  response.mutable_response()->set_id(3);
  response.mutable_response()->mutable_store_full_blocks()->set_stored_blocks(2);
  // [limit selector][chunking seed][stream]
  Write("frame_decoder", "hello", std::string("\x00\x07", 2) + Framed(hello));
  Write("frame_decoder", "engine_session", std::string("\x01\x13", 2) + session);
  Write("frame_decoder", "response", std::string("\x01\x02", 2) + Framed(response));
  Write("frame_decoder", "truncated", std::string("\x01\x05", 2) + session.substr(0, 50));
  std::string bad_version = Framed(response);
  bad_version[4] = '\x02';
  Write("frame_decoder", "bad_version", std::string("\x01\x01", 2) + bad_version);
  Write("frame_decoder", "over_limit", std::string("\x00\x09", 2) + session);
}

void RpcConvertSeeds() {
  const auto body = [](const rpc::Frame& f) { return f.SerializeAsString(); };
  Write("rpc_convert", "admit_options", body(Admit(2, 7, Prompt(20, 5), true)));
  Write("rpc_convert", "lookup", body(Lookup(3, Prompt(9, 1))));
  Write("rpc_convert", "prefetch", body(Prefetch(4, Prompt(9, 1))));
  Write("rpc_convert", "append", body(Append(5, 7, {1, 2, 3})));
  rpc::Frame events;
  rpc::EventBatch* b = events.mutable_response()->mutable_events();
  b->set_next_seq(9);
  b->set_lost_first(2);
  b->set_lost_last(3);
  rpc::KvEvent* e = b->add_events();
  e->set_seq(4);
  e->set_type(1);
  e->set_pool(0);
  e->set_block(12);
  e->set_content_id(std::string(16, 'c'));
  e->set_parent_id(std::string(16, 'p'));
  e->set_num_tokens(4);
  e->set_priority(35);
  Write("rpc_convert", "events", body(events));
  rpc::Frame admitted;
  rpc::AdmitResponse* a = admitted.mutable_response()->mutable_admit();
  a->set_reused_tokens(8);
  rpc::BlockTable* t = a->add_tables();
  t->set_pool(1);
  for (int i : {3, 4, -1, 9}) t->add_block_ids(i);
  Write("rpc_convert", "admit_response", body(admitted));
  rpc::Frame error;
  error.mutable_response()->mutable_error()->set_code(8);
  error.mutable_response()->mutable_error()->set_message("pool full");
  Write("rpc_convert", "error", body(error));
  rpc::Frame refused;
  refused.mutable_auth_result()->mutable_error()->set_code(99);
  refused.mutable_auth_result()->mutable_error()->set_message("unknown code");
  Write("rpc_convert", "auth_refused", body(refused));
}

void EngineServiceSeeds() {
  // [options][frames]: options bit 0 tensor parallel 2, 1 no block reuse, 2 no partial reuse,
  // 3 lru, 4 no host tier.
  Write("engine_service", "session", std::string(1, '\x00') + EngineSession());
  Write("engine_service", "session_tp2_lru", std::string(1, '\x09') + EngineSession());
  Write("engine_service", "evict_restore", std::string(1, '\x00') + EvictAndRestore());
  Write("engine_service", "evict_no_host", std::string(1, '\x10') + EvictAndRestore());
  Write("engine_service", "no_reuse", std::string(1, '\x06') + EngineSession());
  Write("engine_service", "operator", std::string(1, '\x00') + OperatorSession());
  Write("engine_service", "operator_lru_no_host", std::string(1, '\x18') + OperatorSession());
}

std::string AuthRequestBytes(const std::string& secret, const std::string& server_nonce,
                             bool correct) {
  rpc::AuthRequest a;
  a.set_protocol_version(kProtocolVersion);
  a.set_client_nonce(std::string(kAuthNonceBytes, 'c'));
  a.set_client_name("vllm-worker-0");
  a.set_role(rpc::CLIENT_ROLE_ENGINE);
  std::string mac = ClientMac(secret, kProtocolVersion, server_nonce, a.client_nonce(),
                              a.client_name(), static_cast<std::uint32_t>(a.role()));
  if (!correct) mac[0] = static_cast<char>(mac[0] ^ 1);
  a.set_mac(mac);
  return a.SerializeAsString();
}

void AuthSeeds() {
  const std::string secret = "a-shared-secret-of-32-bytes-0123";
  const std::string nonce(kAuthNonceBytes, 's');
  // [secret length - 16][secret][server nonce][AuthRequest]
  const std::string head =
      std::string(1, static_cast<char>(secret.size() - kMinSecretBytes)) + secret + nonce;
  Write("auth_transcript", "correct", head + AuthRequestBytes(secret, nonce, true));
  Write("auth_transcript", "wrong_mac", head + AuthRequestBytes(secret, nonce, false));
}

void HandshakeSeeds() {
  // [flags: 1 authenticate, 2 tcp][name length][name][role][stream]
  const std::string kvctl = std::string("\x05kvctl", 6);
  Write("control_handshake", "session_unix",
        std::string(1, '\x01') + kvctl + std::string(1, '\x01') + EngineSession());
  Write("control_handshake", "session_tcp",
        std::string(1, '\x03') + kvctl + std::string(1, '\x02') + EngineSession());
  Write("control_handshake", "evict_restore",
        std::string(1, '\x01') + kvctl + std::string(1, '\x01') + EvictAndRestore());
  rpc::Frame auth;
  auth.mutable_auth_request()->ParseFromString(
      AuthRequestBytes("not-the-node-secret-xxxx", std::string(kAuthNonceBytes, 's'), true));
  Write("control_handshake", "wrong_secret",
        std::string(1, '\x00') + kvctl + std::string(1, '\x01') + Framed(auth));
  Write("control_handshake", "request_first",
        std::string(1, '\x00') + kvctl + std::string(1, '\x01') + Framed(Simple(1, 1)));
  std::string bad_header = Framed(Simple(1, 1));
  bad_header[6] = '\x01';  // flags
  Write("control_handshake", "bad_header_after_auth",
        std::string(1, '\x01') + kvctl + std::string(1, '\x01') + bad_header);
  const std::string operator_role(1, static_cast<char>(rpc::CLIENT_ROLE_OPERATOR));
  Write("control_handshake", "operator",
        std::string(1, '\x01') + kvctl + operator_role + OperatorSession());
  Write("control_handshake", "subscribe",
        std::string(1, '\x01') + kvctl + std::string(1, '\x01') + Framed(Simple(1, 3)) +
            EngineSession());
}

void BundleSeeds() {
  int i = 0;
  for (const auto& [g, scale] : BundleShapes()) {
    auto layout = MakeKvPoolLayout(g);
    KVMESH_CHECK(layout.ok());
    auto codec = BundleCodec::Create(*layout, scale);
    KVMESH_CHECK(codec.ok());
    const PoolMemorySpec spec{*layout, 1, scale};
    auto storage = PoolStorage::Allocate(std::span(&spec, 1));
    KVMESH_CHECK(storage.ok());
    FillSourceBlock(storage->view(0), 0);
    std::string bundle(static_cast<std::size_t>(codec->bundle_bytes()), '\0');
    KVMESH_CHECK(codec
                     ->Encode(storage->view(0), 0, BundleId(1),
                              std::as_writable_bytes(std::span(bundle.data(), bundle.size())))
                     .ok());
    const std::string name = std::string(KvDtypeName(g.dtype)) + "_" +
                             std::string(KvLayoutName(g.layout)) + (g.index_layers ? "_mla" : "");
    const char c = static_cast<char>(i);
    // [codec][mode][...]: mode 0 the bundle itself; mode 1 edits of the target's own bundle;
    // mode 2 edits, checksum recomputed.
    Write("bundle_codec", "raw_" + name, std::string{c, '\x00'} + bundle);
    Write("bundle_codec", "edit_table_" + name, std::string{c, '\x01', '\x44', '\x00', '\x01'});
    Write("bundle_codec", "resealed_" + name, std::string{c, '\x02', '\x60', '\x00', '\x80'});
    ++i;
  }
}

// layer_range_codec: [codec][mode][begin][end][...] (fuzz/layer_range_codec_fuzzer.cc): each
// shape's whole range and its first layer as they travel, edits of them, with and without a new
// checksum, and a range beyond the pool's layers.
void LayerRangeSeeds() {
  int i = 0;
  for (const auto& [g, scale] : BundleShapes()) {
    auto layout = MakeKvPoolLayout(g);
    KVMESH_CHECK(layout.ok());
    auto codec = LayerRangeCodec::Create(*layout, scale);
    KVMESH_CHECK(codec.ok());
    const PoolMemorySpec spec{*layout, 1, scale};
    auto storage = PoolStorage::Allocate(std::span(&spec, 1));
    KVMESH_CHECK(storage.ok());
    FillSourceBlock(storage->view(0), 0);
    const std::string name = std::string(KvDtypeName(g.dtype)) + "_" +
                             std::string(KvLayoutName(g.layout)) + (g.index_layers ? "_mla" : "");
    const char c = static_cast<char>(i);
    const auto layers = static_cast<char>(codec->num_layers());
    for (const LayerSpan r : {LayerSpan{0, codec->num_layers()}, LayerSpan{0, 1}}) {
      std::string piece(static_cast<std::size_t>(codec->Bytes(r)), '\0');
      KVMESH_CHECK(codec
                       ->Encode(storage->view(0), 0, BundleId(1), r,
                                std::as_writable_bytes(std::span(piece.data(), piece.size())))
                       .ok());
      const std::string range = std::string{static_cast<char>(r.begin), static_cast<char>(r.end)};
      const std::string tag = name + "_" + std::to_string(r.begin) + "_" + std::to_string(r.end);
      Write("layer_range_codec", "raw_" + tag, std::string{c, '\x00'} + range + piece);
      Write("layer_range_codec", "edit_header_" + tag,
            std::string{c, '\x01'} + range + std::string{'\x30', '\x00', '\x01'});
      Write("layer_range_codec", "resealed_" + tag,
            std::string{c, '\x02'} + range + std::string{'\x50', '\x00', '\x80'});
    }
    Write("layer_range_codec", "beyond_" + name,
          std::string{c, '\x01', '\x00', static_cast<char>(layers + 1)});
    ++i;
  }
}

}  // namespace
}  // namespace kvmesh::fuzz

int main(int argc, char** argv) {
  using namespace kvmesh::fuzz;
  if (argc != 2) {
    std::cerr << "usage: kvmesh_fuzz_seeds OUT_DIR (fuzz/corpus)\n";
    return 2;
  }
  out_dir = argv[1];
  FrameDecoderSeeds();
  RpcConvertSeeds();
  EngineServiceSeeds();
  AuthSeeds();
  HandshakeSeeds();
  BundleSeeds();
  LayerRangeSeeds();
  std::cout << "seeds written to " << out_dir.string() << "\n";
  return 0;
}
