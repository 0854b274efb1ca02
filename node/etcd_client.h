// EtcdClient: the few etcd v3 calls membership needs, over etcd's JSON gateway (HTTP POST of JSON
// to /v3/..., keys and values base64, 64-bit integers as decimal strings), on Boost.Beast.
//
// Each call opens a connection to the first endpoint that answers (in the order given), sends one
// request and reads one response within `timeout`; nothing is kept between calls. Errors:
// kPeerUnreachable (no endpoint could be reached, or timed out), kCorruption (an answer that does
// not parse), kNotFound (an unknown lease), kIoError (another HTTP or etcd error).
//
// Thread safety: thread-safe (calls share nothing but the options).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace kvmesh {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t lease = 0;
};

class EtcdClient {
 public:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {}

  // A lease of `ttl_s` seconds; its id.
  [[nodiscard]] Result<std::int64_t> GrantLease(std::int32_t ttl_s) const;
  // Renews a lease; its remaining TTL in seconds. kNotFound when the lease is gone (lapsed or
  // revoked).
  [[nodiscard]] Result<std::int64_t> KeepAlive(std::int64_t lease) const;
  [[nodiscard]] Status RevokeLease(std::int64_t lease) const;
  // Puts key = value, attached to `lease` (0: none).
  [[nodiscard]] Status Put(const std::string& key, const std::string& value,
                           std::int64_t lease) const;
  // Every key starting with `prefix`, in key order.
  [[nodiscard]] Result<std::vector<EtcdKeyValue>> ListPrefix(const std::string& prefix) const;

 private:
  // POSTs `body` (JSON) to `path`; the response's body (JSON) on HTTP 200.
  [[nodiscard]] Result<std::string> Post(const std::string& path, const std::string& body) const;

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
};

std::string Base64Encode(std::string_view bytes);
[[nodiscard]] Result<std::string> Base64Decode(std::string_view text);

}  // namespace kvmesh
