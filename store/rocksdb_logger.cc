#include "store/rocksdb_logger.h"

#include <cstdarg>
#include <cstdio>
#include <string_view>

#include "common/log.h"

namespace kvmesh {

RocksDbLogger::RocksDbLogger(std::string path)
    : rocksdb::Logger(rocksdb::InfoLogLevel::DEBUG_LEVEL), path_(std::move(path)) {}

void RocksDbLogger::Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  const bool fatal = level == rocksdb::InfoLogLevel::FATAL_LEVEL;
  if (!fatal && !spdlog::should_log(spdlog::level::debug)) return;
  char buffer[1024];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, copy);
  va_end(copy);
  if (n < 0) return;
  std::string_view line(buffer,
                        std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(buffer) - 1));
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (fatal) {
    KVMESH_LOG_ERROR("rocksdb path {} {}", path_, line);
  } else {
    KVMESH_LOG_DEBUG("rocksdb path {} {}", path_, line);
  }
}

}  // namespace kvmesh
