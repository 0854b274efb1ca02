#include "common/log.h"

#include "common/strings.h"

namespace kvmesh {

Status SetLogLevel(std::string_view level) {
  const std::string name = AsciiLower(level);
  const auto parsed = spdlog::level::from_str(name);
  // from_str maps unknown names to `off`; only "off" itself may mean off.
  if (parsed == spdlog::level::off && name != "off") {
    return Status::InvalidArgument(
        StrCat("unknown log level '", level, "': use trace, debug, info, warn, error or off"));
  }
  spdlog::set_level(parsed);
  return Status::Ok();
}

}  // namespace kvmesh
