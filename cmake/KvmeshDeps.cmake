# Third-party dependencies, all from Debian packages (scripts/bootstrap installs them).
#
# The full build needs every one of them. The kernels-only build (KVMESH_KERNELS_ONLY=ON) needs just
# the CUDA toolkit and GoogleTest; the parts of common/ and pool/ that use OpenSSL (content ids) or
# nlohmann-json (Hugging Face config.json) are built only when those packages happen to be present.
find_package(Threads REQUIRED)

if(KVMESH_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

if(KVMESH_KERNELS_ONLY)
  find_package(OpenSSL QUIET)
  find_package(nlohmann_json 3 QUIET CONFIG)
  find_package(spdlog QUIET CONFIG)
else()
  find_package(OpenSSL REQUIRED)
  find_package(nlohmann_json 3 REQUIRED CONFIG)
  find_package(spdlog REQUIRED CONFIG)
  find_package(fmt REQUIRED CONFIG)
  find_package(CLI11 REQUIRED CONFIG)
  # store/: the RocksDB tier (RocksDB::rocksdb-shared) and bundle checksums (XXH3, libxxhash).
  find_package(RocksDB REQUIRED CONFIG)
  find_path(KVMESH_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
  find_library(KVMESH_XXHASH_LIBRARY xxhash REQUIRED)
  if(KVMESH_BUILD_BENCH)
    find_package(benchmark REQUIRED CONFIG)
  endif()
endif()

set(KVMESH_HAVE_OPENSSL ${OpenSSL_FOUND})
set(KVMESH_HAVE_JSON ${nlohmann_json_FOUND})
set(KVMESH_HAVE_SPDLOG ${spdlog_FOUND})
message(STATUS "kvmesh: openssl=${KVMESH_HAVE_OPENSSL} json=${KVMESH_HAVE_JSON} spdlog=${KVMESH_HAVE_SPDLOG}")
