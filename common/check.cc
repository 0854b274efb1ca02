#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace kvmesh::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << "check failed at " << file << ":" << line << ": " << condition << " ";
}

CheckFailure::~CheckFailure() {
  const std::string text = stream_.str();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvmesh::internal
