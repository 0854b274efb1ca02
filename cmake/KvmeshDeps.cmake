# Third-party dependencies, all from Debian packages (scripts/bootstrap installs them).
#
# The full build needs every one of them. The kernels-only build (KVMESH_KERNELS_ONLY=ON) needs just
# the CUDA toolkit and GoogleTest; the parts of common/ and pool/ that use OpenSSL (content ids) or
# nlohmann-json (Hugging Face config.json) are built only when those packages happen to be present.
find_package(Threads REQUIRED)

# KVMESH_GTEST_SOURCE_DIR: a GoogleTest source tree (e.g. a copy of Debian's /usr/src/googletest)
# built as part of this project instead of find_package(GTest) — for bare CUDA machines without the
# package (scripts/gpu-check --gtest-source). It provides the same GTest:: targets.
set(KVMESH_GTEST_SOURCE_DIR "" CACHE PATH "GoogleTest source tree to build instead of find_package(GTest)")
if(KVMESH_BUILD_TESTS AND KVMESH_GTEST_SOURCE_DIR)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  # GoogleTest is third-party code: build it without kvmesh's warning flags (-Werror).
  get_directory_property(kvmesh_saved_compile_options COMPILE_OPTIONS)
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "")
  add_subdirectory(${KVMESH_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${kvmesh_saved_compile_options}")
  foreach(lib gtest gtest_main gmock gmock_main)
    if(NOT TARGET GTest::${lib})  # GoogleTest >= 1.11 defines these aliases itself
      add_library(GTest::${lib} ALIAS ${lib})
    endif()
  endforeach()
  message(STATUS "kvmesh: GoogleTest built from ${KVMESH_GTEST_SOURCE_DIR}")
elseif(KVMESH_BUILD_TESTS)
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
  # transfer/: UCX (Debian libucx-dev 1.13, pkg-config module `ucx`: ucp, uct, ucs, ucm) as
  # PkgConfig::UCX; ucx_perftest (ucx-utils) is the transfer benchmark's baseline.
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx>=1.13)
  # kvnode's readiness and shutdown progress to systemd (sd_notify; Debian libsystemd-dev).
  pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
  # node/: the control plane's schema (protobuf), Boost.Asio, the YAML config (yaml-cpp; Debian's
  # 0.7 has no namespace in its imported target).
  find_package(Protobuf REQUIRED)
  find_package(Boost 1.74 REQUIRED)
  find_package(yaml-cpp REQUIRED CONFIG)
  if(KVMESH_BUILD_BENCH)
    find_package(benchmark REQUIRED CONFIG)
  endif()
endif()

foreach(pair "OPENSSL;OpenSSL_FOUND" "JSON;nlohmann_json_FOUND" "SPDLOG;spdlog_FOUND")
  list(GET pair 0 name)
  list(GET pair 1 found)
  if(${found})
    set(KVMESH_HAVE_${name} ON)
  else()
    set(KVMESH_HAVE_${name} OFF)
  endif()
endforeach()
message(STATUS "kvmesh: openssl=${KVMESH_HAVE_OPENSSL} json=${KVMESH_HAVE_JSON} spdlog=${KVMESH_HAVE_SPDLOG}")
