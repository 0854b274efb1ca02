#include "node/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>

#include "common/check.h"

namespace kvmesh {
namespace {

void AppendU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void AppendU64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void AppendField(std::string& out, std::string_view field) {
  AppendU32(out, static_cast<std::uint32_t>(field.size()));
  out.append(field);
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
  std::size_t len = 0;
  const unsigned char* out =
      EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(),
                reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac.data(),
                mac.size(), &len);
  KVMESH_CHECK(out != nullptr && len == kAuthMacBytes) << "HMAC-SHA256 failed";
  return {reinterpret_cast<const char*>(mac.data()), len};
}

std::string Transcript(std::string_view side, std::uint32_t protocol_version) {
  std::string t;
  AppendField(t, "kvmesh-auth-v1");
  AppendField(t, side);
  AppendU32(t, protocol_version);
  return t;
}

}  // namespace

Result<std::string> MakeAuthNonce() {
  std::string nonce(kAuthNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    return Status::Internal("RAND_bytes failed");
  }
  return nonce;
}

std::string ClientMac(std::string_view secret, std::uint32_t protocol_version,
                      std::string_view server_nonce, std::string_view client_nonce,
                      std::string_view client_name, std::uint32_t role) {
  std::string t = Transcript("client", protocol_version);
  AppendField(t, server_nonce);
  AppendField(t, client_nonce);
  AppendField(t, client_name);
  AppendU32(t, role);
  return HmacSha256(secret, t);
}

std::string ServerMac(std::string_view secret, std::uint32_t protocol_version,
                      std::string_view client_nonce, std::string_view server_nonce,
                      std::uint64_t session_id) {
  std::string t = Transcript("server", protocol_version);
  AppendField(t, client_nonce);
  AppendField(t, server_nonce);
  AppendU64(t, session_id);
  return HmacSha256(secret, t);
}

bool MacEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kvmesh
