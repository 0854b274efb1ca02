// Control-plane authentication: a challenge–response over a shared secret, both ways.
//
//   node   → client  Hello{protocol_version, server_nonce (32 random bytes), node_id}
//   client → node    AuthRequest{protocol_version, client_nonce (32 random bytes), client_name,
//                                role, mac = ClientMac(secret, ...)}
//   node   → client  AuthResult{ok, server_mac = ServerMac(secret, ...), session_id}
//                    or AuthResult{error permission_denied} and the connection is closed
//
//   ClientMac = HMAC-SHA256(secret, "kvmesh-auth-v1" | "client" | protocol_version | server_nonce |
//                                   client_nonce | client_name | role)
//   ServerMac = HMAC-SHA256(secret, "kvmesh-auth-v1" | "server" | protocol_version | client_nonce |
//                                   server_nonce | session_id)
// with every variable-length field prefixed by its length (u32 LE), so no two transcripts encode
// alike. The secret never crosses the wire; both nonces are fresh per connection, so a recorded
// handshake cannot be replayed; MACs are compared in constant time (CRYPTO_memcmp). The client
// checks ServerMac, so it also knows it talks to a node that holds the secret.
//
// Thread safety: pure functions (OpenSSL's HMAC and RAND_bytes are thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvmesh {

inline constexpr std::uint32_t kProtocolVersion = 1;
inline constexpr std::size_t kAuthNonceBytes = 32;
inline constexpr std::size_t kAuthMacBytes = 32;
inline constexpr std::size_t kMinSecretBytes = 16;

// kNonceBytes random bytes from OpenSSL's CSPRNG (kInternal if it fails).
Result<std::string> MakeAuthNonce();

std::string ClientMac(std::string_view secret, std::uint32_t protocol_version,
                      std::string_view server_nonce, std::string_view client_nonce,
                      std::string_view client_name, std::uint32_t role);
std::string ServerMac(std::string_view secret, std::uint32_t protocol_version,
                      std::string_view client_nonce, std::string_view server_nonce,
                      std::uint64_t session_id);

// Constant-time comparison (false for different lengths, which are not secret).
bool MacEquals(std::string_view a, std::string_view b);

}  // namespace kvmesh
