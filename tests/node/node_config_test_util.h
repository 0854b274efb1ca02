// Helpers of the node_config tests: parse text that must fail (its message) or succeed (its value).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "node/node_config.h"

namespace kvmesh {

// The message of a parse that must fail with kInvalidArgument.
inline std::string ParseError(std::string_view text) {
  Result<NodeConfig> r = ParseNodeConfig(text, "kvnode.yaml");
  if (r.ok()) return "(parsed)";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  return r.status().message();
}

inline NodeConfig ParseOk(std::string_view text, const std::string& base_dir = "") {
  Result<NodeConfig> r = ParseNodeConfig(text, "kvnode.yaml", base_dir);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << text;
  return r.ok() ? *r : NodeConfig{};
}

}  // namespace kvmesh
