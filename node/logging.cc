#include "node/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>

#include "common/log.h"
#include "common/strings.h"

namespace kvmesh {
namespace {

// %j: the message, escaped for a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"': dest.append(std::string_view("\\\"")); break;
        case '\\': dest.append(std::string_view("\\\\")); break;
        case '\n': dest.append(std::string_view("\\n")); break;
        case '\r': dest.append(std::string_view("\\r")); break;
        case '\t': dest.append(std::string_view("\\t")); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            const char esc[] = {'\\', 'u', '0', '0', kHex[(c >> 4) & 0xf], kHex[c & 0xf]};
            dest.append(esc, esc + sizeof(esc));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

Status SetupNodeLogging(std::string_view level, std::string_view format) {
  KVMESH_RETURN_IF_ERROR(SetLogLevel(level));
  auto logger =
      std::make_shared<spdlog::logger>("kvnode", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_level(spdlog::get_level());
  if (format == "text") {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %-5l %v");
  } else if (format == "json") {
    auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    f->add_flag<JsonMessageFlag>('j').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":"%j"})");
    logger->set_formatter(std::move(f));
  } else {
    return Status::InvalidArgument(StrCat("unknown log format '", format, "': use text or json"));
  }
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

}  // namespace kvmesh
