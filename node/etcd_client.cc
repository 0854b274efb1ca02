#include "node/etcd_client.h"

#include <openssl/evp.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace kvmesh {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Json = nlohmann::json;

// etcd's gateway writes 64-bit integers as strings ("694d7d5d2cd2c40a" never: decimal).
std::int64_t IntField(const Json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size() ? v : 0;
  }
  if (it->is_number_integer()) return it->get<std::int64_t>();
  return 0;
}

Result<Json> ParseJson(const std::string& text, std::string_view what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption(StrCat("etcd ", what, ": answer is not a JSON object"));
  }
  return j;
}

// One request and its response on `endpoint` ("host:port") within `timeout`.
Result<std::string> PostOnce(const std::string& endpoint, const std::string& path,
                             const std::string& body, std::chrono::milliseconds timeout) {
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("endpoint is not host:port");
  const std::string host = endpoint.substr(0, colon);
  const std::string port = endpoint.substr(colon + 1);
  net::io_context io;
  net::ip::tcp::resolver resolver(io);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return Status::PeerUnreachable(StrCat("etcd ", endpoint, ": ", ec.message()));
  beast::tcp_stream stream(io);
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, host);
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  beast::error_code result;
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code e, const net::ip::tcp::endpoint&) {
    if (e) {
      result = e;
      return;
    }
    http::async_write(stream, req, [&](beast::error_code we, std::size_t) {
      if (we) {
        result = we;
        return;
      }
      http::async_read(stream, buffer, res,
                       [&](beast::error_code re, std::size_t) { result = re; });
    });
  });
  io.run();
  if (result) return Status::PeerUnreachable(StrCat("etcd ", endpoint, ": ", result.message()));
  if (res.result() != http::status::ok) {
    return Status::IoError(StrCat("etcd ", endpoint, " ", path, ": http ", res.result_int(), " ",
                                  res.body().substr(0, 200)));
  }
  return std::move(res.body());
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return Status::Corruption("base64 length is not a multiple of 4");
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return Status::Corruption("bad base64");
  std::size_t size = static_cast<std::size_t>(n);
  // EVP_DecodeBlock counts the padding's bytes too.
  if (!text.empty() && text.back() == '=') --size;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --size;
  out.resize(size);
  return out;
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) const {
  Status last = Status::PeerUnreachable("etcd: no endpoint configured");
  for (const std::string& endpoint : endpoints_) {
    Result<std::string> r = PostOnce(endpoint, path, body, timeout_);
    if (r.ok() || r.status().code() != StatusCode::kPeerUnreachable) return r;
    last = r.status();
  }
  return last;
}

Result<std::int64_t> EtcdClient::GrantLease(std::int32_t ttl_s) const {
  KVMESH_ASSIGN_OR_RETURN(const std::string text,
                          Post("/v3/lease/grant", Json{{"TTL", ttl_s}}.dump()));
  KVMESH_ASSIGN_OR_RETURN(const Json j, ParseJson(text, "lease grant"));
  const std::int64_t id = IntField(j, "ID");
  if (id == 0) return Status::IoError(StrCat("etcd lease grant: no lease id in ", text));
  return id;
}

Result<std::int64_t> EtcdClient::KeepAlive(std::int64_t lease) const {
  KVMESH_ASSIGN_OR_RETURN(const std::string text,
                          Post("/v3/lease/keepalive", Json{{"ID", std::to_string(lease)}}.dump()));
  // A stream on the gateway: one JSON object per line; the first is the answer.
  KVMESH_ASSIGN_OR_RETURN(const Json j, ParseJson(text.substr(0, text.find('\n')), "keepalive"));
  const Json& r = j.contains("result") ? j["result"] : j;
  const std::int64_t ttl = IntField(r, "TTL");
  if (ttl <= 0) return Status::NotFound(StrCat("etcd lease ", lease, " is gone"));
  return ttl;
}

Status EtcdClient::RevokeLease(std::int64_t lease) const {
  Result<std::string> r = Post("/v3/lease/revoke", Json{{"ID", std::to_string(lease)}}.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, std::int64_t lease) const {
  Json body{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  Result<std::string> r = Post("/v3/kv/put", body.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Result<std::vector<EtcdKeyValue>> EtcdClient::ListPrefix(const std::string& prefix) const {
  std::string end = prefix;
  // The range end of a prefix: the prefix with its last byte incremented.
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(end.back() + 1);
  const Json body{{"key", Base64Encode(prefix)}, {"range_end", Base64Encode(end)}};
  KVMESH_ASSIGN_OR_RETURN(const std::string text, Post("/v3/kv/range", body.dump()));
  KVMESH_ASSIGN_OR_RETURN(const Json j, ParseJson(text, "range"));
  std::vector<EtcdKeyValue> out;
  auto kvs = j.find("kvs");
  if (kvs == j.end()) return out;
  if (!kvs->is_array()) return Status::Corruption("etcd range: kvs is not a list");
  for (const Json& kv : *kvs) {
    EtcdKeyValue e;
    KVMESH_ASSIGN_OR_RETURN(e.key, Base64Decode(kv.value("key", "")));
    KVMESH_ASSIGN_OR_RETURN(e.value, Base64Decode(kv.value("value", "")));
    e.lease = IntField(kv, "lease");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kvmesh
