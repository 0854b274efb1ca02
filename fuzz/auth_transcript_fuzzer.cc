// Fuzz target auth_transcript: the server side of the handshake's transcript (node/auth.h) on
// arbitrary AuthRequests.
//
// Input: [secret length u8][secret (16..79 bytes)][server nonce: 32 bytes][AuthRequest bytes].
// The AuthRequest is what a client sent (a serialised rpc::AuthRequest; unparsable: skipped); the
// node recomputes ClientMac over its own nonce and the request's fields and compares.
// Oracles:
//   - ClientMac and ServerMac are 32 bytes and deterministic;
//   - MacEquals(expected, mac) is exactly byte equality (any length, any content);
//   - the transcript is unambiguous: moving bytes across the boundary of two variable-length
//     fields (server nonce | client nonce, client nonce | client name), or changing the role, the
//     version or one byte of the secret, changes the MAC — a client cannot reuse a MAC for other
//     fields;
//   - the client and the server transcripts are apart: ServerMac over the same nonces never equals
//     ClientMac.
#include "common/check.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/quiet_protobuf.h"
#include "node/auth.h"
#include "node/proto/kvmesh_rpc.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvmesh;
  kvmesh::fuzz::QuietProtobuf();
  fuzz::FuzzInput in(data, size);
  const std::size_t secret_len = kMinSecretBytes + in.U8() % 64;
  std::string secret = in.String(secret_len);
  if (secret.size() < kMinSecretBytes) return 0;  // the node refuses shorter secrets
  const std::string server_nonce = in.String(kAuthNonceBytes);
  rpc::AuthRequest a;
  const auto rest = in.Rest();
  if (!a.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) return 0;

  const auto role = static_cast<std::uint32_t>(a.role());
  const std::string expected = ClientMac(secret, a.protocol_version(), server_nonce,
                                         a.client_nonce(), a.client_name(), role);
  KVMESH_CHECK_EQ(expected.size(), kAuthMacBytes);
  KVMESH_CHECK(expected == ClientMac(secret, a.protocol_version(), server_nonce, a.client_nonce(),
                                     a.client_name(), role))
      << "ClientMac is not deterministic";
  KVMESH_CHECK_EQ(MacEquals(expected, a.mac()), expected == a.mac());
  KVMESH_CHECK_EQ(MacEquals(a.mac(), a.client_nonce()), a.mac() == a.client_nonce());
  KVMESH_CHECK(MacEquals(expected, expected));

  // Field boundaries: the same bytes split differently are another transcript.
  const std::string& cn = a.client_nonce();
  for (std::size_t k = 1; k <= std::min<std::size_t>(cn.size(), 3); ++k) {
    const std::string moved_to_name = cn.substr(cn.size() - k) + a.client_name();
    KVMESH_CHECK(expected != ClientMac(secret, a.protocol_version(), server_nonce,
                                       cn.substr(0, cn.size() - k), moved_to_name, role))
        << "client nonce | client name boundary is ambiguous";
    const std::string moved_to_server = server_nonce + cn.substr(0, k);
    KVMESH_CHECK(expected != ClientMac(secret, a.protocol_version(), moved_to_server, cn.substr(k),
                                       a.client_name(), role))
        << "server nonce | client nonce boundary is ambiguous";
  }
  KVMESH_CHECK(expected != ClientMac(secret, a.protocol_version(), server_nonce, cn,
                                     a.client_name(), role + 1));
  KVMESH_CHECK(expected != ClientMac(secret, a.protocol_version() + 1, server_nonce, cn,
                                     a.client_name(), role));
  secret[secret.size() / 2] = static_cast<char>(secret[secret.size() / 2] ^ 1);
  KVMESH_CHECK(expected !=
               ClientMac(secret, a.protocol_version(), server_nonce, cn, a.client_name(), role))
      << "the MAC does not depend on the secret";
  secret[secret.size() / 2] = static_cast<char>(secret[secret.size() / 2] ^ 1);

  const std::string server = ServerMac(secret, a.protocol_version(), cn, server_nonce, 1);
  KVMESH_CHECK_EQ(server.size(), kAuthMacBytes);
  KVMESH_CHECK(server != expected) << "client and server transcripts collide";
  KVMESH_CHECK(server != ServerMac(secret, a.protocol_version(), cn, server_nonce, 2));
  return 0;
}
