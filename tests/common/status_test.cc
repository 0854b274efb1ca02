#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/result.h"

namespace kvmesh {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(StatusTest, CodesAndMessages) {
  const Status s = Status::InvalidArgument("tokens_per_block 3 is not a power of two");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.ToString(), "invalid_argument: tokens_per_block 3 is not a power of two");
  EXPECT_EQ(Status::Corruption("x").code(), StatusCode::kCorruption);
  EXPECT_EQ(Status::ResourceExhausted("x").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusCodeName(StatusCode::kPeerUnreachable), "peer_unreachable");
}

TEST(StatusTest, WithContextPrefixesErrorsOnly) {
  EXPECT_EQ(Status::NotFound("block 3").WithContext("onboard").message(), "onboard: block 3");
  EXPECT_TRUE(Status::Ok().WithContext("anything").ok());
}

Status FailsWhen(bool fail) {
  if (fail) return Status::IoError("disk");
  return Status::Ok();
}

Status Chain(bool fail) {
  KVMESH_RETURN_IF_ERROR(FailsWhen(fail));
  return Status::AlreadyExists("reached the end");
}

TEST(StatusTest, ReturnIfError) {
  EXPECT_EQ(Chain(true).code(), StatusCode::kIoError);
  EXPECT_EQ(Chain(false).code(), StatusCode::kAlreadyExists);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KVMESH_ASSIGN_OR_RETURN(int h, Half(x));
  KVMESH_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(ResultTest, ValueOrError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_FALSE(Quarter(6).ok());
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_EQ(Quarter(6).value_or(-1), -1);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> r = Status::NotFound("nothing");
  EXPECT_DEATH({ (void)r.value(); }, "value\\(\\) of an error Result");
}

}  // namespace
}  // namespace kvmesh
