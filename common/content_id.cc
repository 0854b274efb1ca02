#include "common/content_id.h"

#include <openssl/evp.h>

#include "common/check.h"
#include "common/strings.h"

namespace kvmesh {

std::string ContentId::ToHex() const { return HexEncode(bytes.data(), bytes.size()); }

Result<ContentId> ContentId::FromHex(std::string_view hex) {
  if (hex.size() != 2 * kBytes) {
    return Status::InvalidArgument(
        StrCat("content id must be ", 2 * kBytes, " hex characters, got ", hex.size()));
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  ContentId id;
  for (std::size_t i = 0; i < kBytes; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return Status::InvalidArgument(StrCat("content id '", hex, "' is not hex"));
    id.bytes[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return id;
}

namespace {

// SHA-256 fetched once per process: initialising a context with an already fetched algorithm
// takes no lock and allocates nothing, unlike EVP_sha256(), which is looked up on every init.
const EVP_MD* FetchedSha256() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  KVMESH_CHECK(md != nullptr) << "EVP_MD_fetch(SHA256)";
  return md;
}

void Begin(EVP_MD_CTX* ctx) {
  KVMESH_CHECK(EVP_DigestInit_ex2(ctx, FetchedSha256(), nullptr) == 1) << "EVP_DigestInit_ex2";
}

}  // namespace

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  KVMESH_CHECK(impl_->ctx != nullptr) << "EVP_MD_CTX_new";
  Begin(impl_->ctx);
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::Update(const void* data, std::size_t size) {
  KVMESH_CHECK(EVP_DigestUpdate(impl_->ctx, data, size) == 1) << "EVP_DigestUpdate";
}

std::array<std::uint8_t, 32> Sha256::Finish() {
  std::array<std::uint8_t, 32> out{};
  unsigned int len = 0;
  KVMESH_CHECK(EVP_DigestFinal_ex(impl_->ctx, out.data(), &len) == 1 && len == 32)
      << "EVP_DigestFinal_ex";
  Begin(impl_->ctx);  // ready for the next message, with the algorithm fetched once
  return out;
}

ContentId Sha256::FinishContentId() {
  const auto digest = Finish();
  ContentId id;
  std::memcpy(id.bytes.data(), digest.data(), ContentId::kBytes);
  return id;
}

std::array<std::uint8_t, 32> Sha256::Digest(const void* data, std::size_t size) {
  Sha256 h;
  h.Update(data, size);
  return h.Finish();
}

}  // namespace kvmesh
