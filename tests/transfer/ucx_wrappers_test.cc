// The RAII wrappers: options reach UCX (the TCP segment sizes change what UCX does), bad options
// and arguments become Status, UCX statuses map onto kvmesh codes, a worker pair connects over
// loopback and an endpoint closes cleanly.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "transfer/ucx_context.h"
#include "transfer/ucx_endpoint.h"
#include "transfer/ucx_memory.h"
#include "transfer/ucx_worker.h"

namespace kvmesh {
namespace {

UcxContextOptions TcpOptions(std::uint64_t segment) {
  UcxContextOptions options;
  options.tls = "tcp";
  options.net_devices = "lo";
  options.tcp_tx_seg_size = segment;
  options.tcp_rx_seg_size = segment;
  return options;
}

// ucp_ep_print_info of an endpoint from one worker to another of the same context.
std::string EndpointInfo(const UcxContextOptions& options) {
  auto context = UcxContext::Create(options);
  EXPECT_TRUE(context.ok()) << context.status();
  if (!context.ok()) return {};
  auto a = UcxWorker::Create(**context);
  auto b = UcxWorker::Create(**context);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return {};
  auto ep = UcxEndpoint::Create(**a, (*b)->address(), nullptr);
  EXPECT_TRUE(ep.ok()) << ep.status();
  if (!ep.ok()) return {};
  char* text = nullptr;
  std::size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  ucp_ep_print_info((*ep)->get(), stream);
  std::fclose(stream);
  std::string info(text, size);
  std::free(text);
  return info;
}

TEST(UcxContextTest, TcpSegmentSizesFromOptionsReachUcx) {
  // UCX's largest eager-short message over TCP is the TX segment less its 7-byte header.
  const std::string big = EndpointInfo(TcpOptions(256 * 1024));
  EXPECT_NE(big.find("262137"), std::string::npos) << big;
  const std::string small = EndpointInfo(TcpOptions(16 * 1024));
  EXPECT_NE(small.find("16377"), std::string::npos) << small;
}

TEST(UcxContextTest, BadOptionsAreInvalidArgument) {
  UcxContextOptions options = TcpOptions(0);
  options.tcp_tx_seg_size = 128 * 1024;
  options.tcp_rx_seg_size = 64 * 1024;
  EXPECT_EQ(UcxContext::Create(options).status().code(), StatusCode::kInvalidArgument);
  options = TcpOptions(0);
  options.extra = {{"RNDV_THRESH", "not-a-size"}};
  EXPECT_EQ(UcxContext::Create(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(UcxContextTest, UnknownTransportFailsToStart) {
  UcxContextOptions options;
  options.tls = "no_such_transport";
  EXPECT_FALSE(UcxContext::Create(options).ok());
}

TEST(UcxContextTest, StatusMapping) {
  EXPECT_TRUE(UcsToStatus(UCS_OK, "x").ok());
  EXPECT_EQ(UcsToStatus(UCS_ERR_CANCELED, "x").code(), StatusCode::kCancelled);
  EXPECT_EQ(UcsToStatus(UCS_ERR_TIMED_OUT, "x").code(), StatusCode::kTimedOut);
  EXPECT_EQ(UcsToStatus(UCS_ERR_CONNECTION_RESET, "x").code(), StatusCode::kPeerUnreachable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_ENDPOINT_TIMEOUT, "x").code(), StatusCode::kPeerUnreachable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_UNREACHABLE, "x").code(), StatusCode::kPeerUnreachable);
  EXPECT_EQ(UcsToStatus(UCS_ERR_NO_MEMORY, "x").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(UcsToStatus(UCS_ERR_INVALID_PARAM, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UcsToStatus(UCS_ERR_UNSUPPORTED, "x").code(), StatusCode::kNotSupported);
  EXPECT_EQ(UcsToStatus(UCS_ERR_IO_ERROR, "x").code(), StatusCode::kIoError);
  EXPECT_EQ(UcsToStatus(UCS_ERR_NO_ELEM, "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(UcsToStatus(UCS_ERR_BUSY, "x").code(), StatusCode::kInternal);
  EXPECT_EQ(UcsToStatus(UCS_ERR_CANCELED, "closing").message(), "closing: Request canceled");
}

TEST(UcxWorkerTest, WorkersConnectAndEndpointsClose) {
  auto context = UcxContext::Create(TcpOptions(0));
  ASSERT_TRUE(context.ok()) << context.status();
  auto a = UcxWorker::Create(**context);
  auto b = UcxWorker::Create(**context);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*a)->address().empty());
  EXPECT_NE((*a)->address(), (*b)->address());
  EXPECT_GE((*a)->event_fd(), 0);
  Result<bool> armed = (*a)->Arm();
  ASSERT_TRUE(armed.ok());

  EXPECT_EQ(UcxEndpoint::Create(**a, {}, nullptr).status().code(), StatusCode::kInvalidArgument);
  const WorkerAddress huge(128 * 1024, std::byte{0});
  EXPECT_EQ(UcxEndpoint::Create(**a, huge, nullptr).status().code(), StatusCode::kInvalidArgument);

  auto ep = UcxEndpoint::Create(**a, (*b)->address(), nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_FALSE((*ep)->CloseDone());
  (*ep)->StartClose(UcxCloseMode::kForce);
  for (int i = 0; i < 100000 && !(*ep)->CloseDone(); ++i) (*a)->Progress();
  EXPECT_TRUE((*ep)->CloseDone());
  EXPECT_FALSE((*ep)->failed());
  // Destroying an endpoint that was never closed closes it.
  auto other = UcxEndpoint::Create(**b, (*a)->address(), nullptr);
  ASSERT_TRUE(other.ok());
  other->reset();
}

TEST(UcxMemoryRegionTest, MapsExistingMemoryOnce) {
  auto context = UcxContext::Create(TcpOptions(0));
  ASSERT_TRUE(context.ok());
  std::vector<std::byte> memory(1 << 20);
  auto region = UcxMemoryRegion::Map(**context, memory.data(), memory.size());
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->base(), memory.data());
  EXPECT_EQ((*region)->length(), memory.size());
  EXPECT_NE((*region)->memh(), nullptr);
  EXPECT_EQ(UcxMemoryRegion::Map(**context, nullptr, 16).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(UcxMemoryRegion::Map(**context, memory.data(), 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvmesh
