#include "node/tcp_endpoint.h"

#include <boost/asio/ip/address.hpp>
#include <cstdlib>

#include "common/strings.h"

namespace kvmesh {

Result<boost::asio::ip::tcp::endpoint> ParseTcpEndpoint(std::string_view setting,
                                                        const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Status::InvalidArgument(StrCat(setting, " '", text, "' is not host:port"));
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  const boost::asio::ip::address address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    return Status::InvalidArgument(
        StrCat(setting, " '", text, "': '", host, "' is not an IP address"));
  }
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) {
    return Status::InvalidArgument(StrCat(setting, " '", text, "': bad port '", port_text, "'"));
  }
  return boost::asio::ip::tcp::endpoint(address, static_cast<std::uint16_t>(port));
}

Status ListenError(std::string_view setting, const std::string& text,
                   const boost::system::error_code& ec) {
  std::string message = StrCat(setting, " ", text, ": ", ec.message());
  if (ec == boost::system::errc::address_in_use) {
    message +=
        StrCat(" (another process listens there, perhaps another kvnode: give each node its ",
               "own ", setting, "; port 0 takes any free one)");
  }
  return Status::FailedPrecondition(message);
}

}  // namespace kvmesh
