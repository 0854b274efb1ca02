// ParseTcpEndpoint (node/tcp_endpoint.h): the "host:port" of tcp_listen and metrics.listen — the
// forms a listen setting takes, and a clear error naming the setting for each malformed one.
#include "node/tcp_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvmesh {
namespace {

using ::testing::HasSubstr;

TEST(TcpEndpointTest, ReadsIpv4Ipv6LocalhostAndAnyPort) {
  auto v4 = ParseTcpEndpoint("tcp_listen", "10.1.2.3:7420");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(v4->address().to_string(), "10.1.2.3");
  EXPECT_EQ(v4->port(), 7420);
  auto v6 = ParseTcpEndpoint("tcp_listen", "[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_TRUE(v6->address().is_v6());
  EXPECT_TRUE(v6->address().is_loopback());
  EXPECT_EQ(v6->port(), 0);
  auto local = ParseTcpEndpoint("metrics.listen", "localhost:65535");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(local->address().to_string(), "127.0.0.1");
  EXPECT_EQ(local->port(), 65535);
  auto any = ParseTcpEndpoint("tcp_listen", "0.0.0.0:9000");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->address().is_unspecified());
}

TEST(TcpEndpointTest, EachMalformedFormIsRefusedNamingTheSetting) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"7420", "is not host:port"},
      {":7420", "is not host:port"},
      {"127.0.0.1:", "is not host:port"},
      {"", "is not host:port"},
      {"kvnode-1:7420", "'kvnode-1' is not an IP address"},
      {"127.0.0.1:74x0", "bad port '74x0'"},
      {"127.0.0.1:65536", "bad port '65536'"},
      {"127.0.0.1:-1", "bad port '-1'"},
  };
  for (const auto& c : cases) {
    auto r = ParseTcpEndpoint("metrics.listen", c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr("metrics.listen '")) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(TcpEndpointTest, AnAddressInUseSaysWhatToDo) {
  const Status in_use =
      ListenError("metrics.listen", "127.0.0.1:9470",
                  boost::system::errc::make_error_code(boost::system::errc::address_in_use));
  EXPECT_EQ(in_use.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(in_use.message(), HasSubstr("metrics.listen 127.0.0.1:9470: "));
  EXPECT_THAT(in_use.message(), HasSubstr("give each node its own metrics.listen"));
  EXPECT_THAT(in_use.message(), HasSubstr("port 0 takes any free one"));
  const Status denied =
      ListenError("tcp_listen", "10.0.0.1:80",
                  boost::system::errc::make_error_code(boost::system::errc::permission_denied));
  EXPECT_EQ(denied.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(denied.message(), HasSubstr("tcp_listen 10.0.0.1:80: "));
  EXPECT_THAT(denied.message(), ::testing::Not(HasSubstr("another kvnode")));
}

}  // namespace
}  // namespace kvmesh
