// The control plane's building blocks: frames, the handshake MACs, secrets, message conversions,
// shared memory passed between mappings.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "node/auth.h"
#include "node/frame.h"
#include "node/rpc_convert.h"
#include "node/secret.h"
#include "node/shared_memory.h"

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

rpc::Frame StatusRequestFrame(std::uint64_t id) {
  rpc::Frame f;
  f.mutable_request()->set_id(id);
  f.mutable_request()->mutable_status();
  return f;
}

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

TEST(FrameTest, HeaderRoundTripAndLimits) {
  const FrameHeaderBytes h = EncodeFrameHeader(1234);
  auto decoded = DecodeFrameHeader(h, 4096);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->length, 1234u);
  EXPECT_EQ(decoded->version, kFrameVersion);
  auto too_big = DecodeFrameHeader(h, 1000);
  EXPECT_TRUE(too_big.status().IsInvalidArgument());
  EXPECT_THAT(too_big.status().message(), HasSubstr("1234 bytes exceeds the limit of 1000"));
  FrameHeaderBytes bad = h;
  bad[4] = std::byte{9};
  EXPECT_THAT(DecodeFrameHeader(bad, 4096).status().message(), HasSubstr("frame version 9"));
  bad = h;
  bad[6] = std::byte{1};
  EXPECT_THAT(DecodeFrameHeader(bad, 4096).status().message(), HasSubstr("flags"));
}

TEST(FrameTest, DecoderReassemblesFramesFedByteByByte) {
  std::string stream;
  for (std::uint64_t id = 1; id <= 3; ++id) stream += *EncodeFrame(StatusRequestFrame(id), 4096);
  FrameDecoder d(4096);
  std::vector<std::uint64_t> ids;
  for (char c : stream) {
    const auto b = static_cast<std::byte>(c);
    d.Feed({&b, 1});
    for (;;) {
      auto next = d.Next();
      ASSERT_TRUE(next.ok()) << next.status();
      if (!next->has_value()) break;
      ids.push_back((*next)->request().id());
    }
  }
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameTest, BadPayloadsAndUnknownTypes) {
  // A payload that does not parse.
  const std::string garbage = "\xff\xff\xff\xff\xff";
  EXPECT_TRUE(DecodeFramePayload(Bytes(garbage)).status().IsCorruption());
  // A frame with no known message (empty payload: the oneof is unset).
  EXPECT_THAT(DecodeFramePayload({}).status().message(), HasSubstr("unknown message type"));
  // A field number no version of the schema knows.
  const std::string unknown = "\xa8\x1f\x01";  // field 501, varint 1
  EXPECT_THAT(DecodeFramePayload(Bytes(unknown)).status().message(),
              HasSubstr("unknown message type"));
  // Encoding refuses what the receiver would refuse.
  rpc::Frame big = StatusRequestFrame(1);
  big.mutable_request()->mutable_admit()->mutable_tokens()->Resize(1000, 7);
  EXPECT_TRUE(EncodeFrame(big, 100).status().IsInvalidArgument());
  // After a bad header the decoder stays failed.
  FrameDecoder d(16);
  const std::string frame = *EncodeFrame(big, 1 << 20);
  d.Feed(Bytes(frame));
  EXPECT_FALSE(d.Next().ok());
  EXPECT_FALSE(d.Next().ok());
}

TEST(AuthTest, MacsBindEveryFieldAndCompareInConstantTime) {
  const std::string secret = "0123456789abcdef0123";
  const std::string sn(kAuthNonceBytes, 'S');
  const std::string cn(kAuthNonceBytes, 'C');
  const std::string mac = ClientMac(secret, 1, sn, cn, "engine", 1);
  EXPECT_EQ(mac.size(), kAuthMacBytes);
  EXPECT_TRUE(MacEquals(mac, ClientMac(secret, 1, sn, cn, "engine", 1)));
  EXPECT_FALSE(MacEquals(mac, ClientMac("0123456789abcdef0124", 1, sn, cn, "engine", 1)));
  EXPECT_FALSE(MacEquals(mac, ClientMac(secret, 2, sn, cn, "engine", 1)));
  EXPECT_FALSE(MacEquals(mac, ClientMac(secret, 1, cn, sn, "engine", 1)));
  EXPECT_FALSE(MacEquals(mac, ClientMac(secret, 1, sn, cn, "engine2", 1)));
  EXPECT_FALSE(MacEquals(mac, ClientMac(secret, 1, sn, cn, "engine", 2)));
  // The server's MAC is not the client's (a reflected MAC does not authenticate the node).
  EXPECT_FALSE(MacEquals(mac, ServerMac(secret, 1, cn, sn, 0)));
  EXPECT_FALSE(MacEquals(mac, mac.substr(0, 31)));
  auto n1 = MakeAuthNonce();
  auto n2 = MakeAuthNonce();
  ASSERT_TRUE(n1.ok() && n2.ok());
  EXPECT_EQ(n1->size(), kAuthNonceBytes);
  EXPECT_NE(*n1, *n2);
}

class SecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvmesh_secret_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(SecretTest, SourcesAndErrors) {
  EXPECT_EQ(LoadSecret({"inline-secret-16b", "", ""})->secret, "inline-secret-16b");
  EXPECT_THAT(LoadSecret({"short", "", ""}).status().message(), HasSubstr("at least 16"));
  EXPECT_THAT(LoadSecret({"inline-secret-16b", "X", ""}).status().message(), HasSubstr("one way"));
  ::setenv("KVMESH_TEST_SECRET_VAR", "from-the-environment", 1);
  auto env = LoadSecret({"", "KVMESH_TEST_SECRET_VAR", ""});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->secret, "from-the-environment");
  EXPECT_THAT(env->origin, HasSubstr("KVMESH_TEST_SECRET_VAR"));
  EXPECT_THAT(LoadSecret({"", "KVMESH_TEST_UNSET_VAR", ""}).status().message(),
              HasSubstr("KVMESH_TEST_UNSET_VAR is not set"));
  {
    // Nothing configured and $KVMESH_SECRET unset: the error says how to give a secret.
    const char* had = std::getenv("KVMESH_SECRET");
    const std::string saved = had != nullptr ? had : "";
    ::unsetenv("KVMESH_SECRET");
    const Status none = LoadSecret({"", "", ""}).status();
    if (had != nullptr) ::setenv("KVMESH_SECRET", saved.c_str(), 1);
    EXPECT_THAT(none.message(), HasSubstr("KVMESH_SECRET is not set"));
    EXPECT_THAT(none.message(), HasSubstr("openssl rand -hex 32"));
    EXPECT_THAT(none.message(), HasSubstr("control.secret_file"));
  }
  const std::string path = (dir_ / "secret").string();
  { std::ofstream(path) << "a-secret-in-a-file\n"; }
  ::chmod(path.c_str(), 0600);
  auto file = LoadSecret({"", "", path});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->secret, "a-secret-in-a-file");  // the trailing newline is not part of it
  EXPECT_TRUE(file->warning.empty());
  ::chmod(path.c_str(), 0644);
  EXPECT_THAT(LoadSecret({"", "", path})->warning, HasSubstr("chmod 600"));
  EXPECT_TRUE(LoadSecret({"", "", (dir_ / "missing").string()}).status().IsNotFound());
  ::unsetenv("KVMESH_SECRET");
  EXPECT_THAT(LoadSecret({}).status().message(), HasSubstr("KVMESH_SECRET"));
}

TEST(RpcConvertTest, OptionsRoundTripAndValidation) {
  SequenceOptions o;
  o.domain.salt = "tenant-a";
  o.domain.lora_id = 7;
  o.retention.push_back(RetentionRange{0, 64, 80, std::chrono::seconds(5)});
  o.decode_priority = 20;
  o.reuse_last_token = true;
  o.allow_partial_reuse = false;
  MultimodalItem item;
  item.hash.bytes[0] = 9;
  item.begin_token = 3;
  item.num_tokens = 4;
  o.multimodal.push_back(item);
  rpc::SequenceOptions p;
  ToProto(o, &p);
  auto back = FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->domain, o.domain);
  ASSERT_EQ(back->retention.size(), 1u);
  EXPECT_EQ(back->retention[0].priority, 80);
  EXPECT_EQ(*back->retention[0].duration, std::chrono::seconds(5));
  EXPECT_EQ(back->decode_priority, 20);
  EXPECT_TRUE(back->reuse_last_token);
  EXPECT_FALSE(back->allow_partial_reuse);
  ASSERT_EQ(back->multimodal.size(), 1u);
  EXPECT_EQ(back->multimodal[0].hash.bytes[0], 9);
  // What a peer could send that no kvmesh type holds.
  p.mutable_multimodal(0)->set_hash("short");
  EXPECT_THAT(FromProto(p).status().message(), HasSubstr("multimodal[0].hash has 5 bytes"));
  rpc::SequenceOptions neg;
  neg.add_retention()->set_duration_ms(-1);
  EXPECT_THAT(FromProto(neg).status().message(), HasSubstr("negative"));
  // A duration whose nanoseconds overflow an int64 (what the fuzzer found: the conversion wrapped
  // and the value changed through ToProto) is refused, as is one past the 100-year bound; the
  // bound itself is accepted and round-trips.
  constexpr std::int64_t kMaxMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(kMaxRetentionDuration).count();
  for (const std::int64_t ms : {std::numeric_limits<std::int64_t>::max(), kMaxMs + 1}) {
    rpc::SequenceOptions huge;
    huge.add_retention()->set_duration_ms(ms);
    EXPECT_TRUE(FromProto(huge).status().IsInvalidArgument()) << ms;
    huge.Clear();
    huge.set_decode_duration_ms(ms);
    EXPECT_THAT(FromProto(huge).status().message(), HasSubstr("100 years")) << ms;
  }
  rpc::SequenceOptions longest;
  longest.set_decode_duration_ms(kMaxMs);
  auto accepted = FromProto(longest);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  rpc::SequenceOptions again;
  ToProto(*accepted, &again);
  EXPECT_EQ(again.decode_duration_ms(), kMaxMs);
  // Unset optional fields keep the block manager's defaults.
  auto defaults = FromProto(rpc::SequenceOptions());
  EXPECT_EQ(defaults->decode_priority, kDefaultPriority);
  EXPECT_TRUE(defaults->allow_partial_reuse);
}

TEST(RpcConvertTest, StatusCodesTravel) {
  rpc::Error e;
  SetError(&e, Status::ResourceExhausted("full"));
  const Status back = StatusFromError(e);
  EXPECT_TRUE(back.IsResourceExhausted());
  EXPECT_EQ(back.message(), "full");
  SetError(&e, Status::PermissionDenied("no"));
  EXPECT_EQ(StatusFromError(e).code(), StatusCode::kPermissionDenied);
  e.set_code(200);
  EXPECT_EQ(StatusFromError(e).code(), StatusCode::kInternal);
  EXPECT_TRUE(StatusFromError(rpc::Error()).ok());
}

TEST(SharedMemoryTest, TwoMappingsSeeTheSameBytesAndTheObjectCannotShrink) {
  auto a = SharedMemory::Create("kvmesh-test", 1 << 16, /*prefault=*/true);
  ASSERT_TRUE(a.ok()) << a.status();
  std::memset(a->data(), 0x5a, a->size());
  const int dup = ::fcntl(a->fd(), F_DUPFD_CLOEXEC, 0);  // what SCM_RIGHTS hands a receiver
  auto b = SharedMemory::Map(dup, 1 << 16);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(static_cast<unsigned char*>(b->data())[12345], 0x5a);
  static_cast<unsigned char*>(b->data())[7] = 0x11;
  EXPECT_EQ(static_cast<unsigned char*>(a->data())[7], 0x11);
  EXPECT_NE(::ftruncate(b->fd(), 0), 0);  // sealed: a client cannot pull pages from the node
  const int dup2 = ::fcntl(a->fd(), F_DUPFD_CLOEXEC, 0);
  EXPECT_TRUE(SharedMemory::Map(dup2, 1 << 20).status().IsInvalidArgument());
  EXPECT_TRUE(SharedMemory::Create("kvmesh-test", 0, false).status().IsInvalidArgument());
}

}  // namespace
}  // namespace kvmesh
