# The fuzz targets: fuzz/<name>_fuzzer.cc each, with the libraries it links. Included by
# fuzz/CMakeLists.txt (the libFuzzer executables, KVMESH_FUZZ=ON) and tests/fuzz/CMakeLists.txt
# (the corpus replay tests, in every build), so the two lists cannot drift apart.
set(KVMESH_FUZZ_TARGETS
  auth_transcript
  bundle_codec
  control_handshake
  engine_service
  frame_decoder
  hf_config
  layer_range_codec
  node_config
  rpc_convert
  trace_reader)

set(KVMESH_FUZZ_LIBS_auth_transcript kvmesh_node_protocol)
set(KVMESH_FUZZ_LIBS_bundle_codec kvmesh_store ${KVMESH_XXHASH_LIBRARY})
set(KVMESH_FUZZ_LIBS_control_handshake kvmesh_fuzz_node_rig)
set(KVMESH_FUZZ_LIBS_engine_service kvmesh_fuzz_node_rig)
set(KVMESH_FUZZ_LIBS_frame_decoder kvmesh_node_protocol)
set(KVMESH_FUZZ_LIBS_hf_config kvmesh_pool)
set(KVMESH_FUZZ_LIBS_layer_range_codec kvmesh_store ${KVMESH_XXHASH_LIBRARY})
set(KVMESH_FUZZ_LIBS_node_config kvmesh_node_config)
set(KVMESH_FUZZ_LIBS_rpc_convert kvmesh_node_protocol)
set(KVMESH_FUZZ_LIBS_trace_reader kvmesh_pool)

# The small node core the request-driving targets share (fuzz/node_rig.h).
if(NOT TARGET kvmesh_fuzz_node_rig)
  add_library(kvmesh_fuzz_node_rig STATIC ${PROJECT_SOURCE_DIR}/fuzz/node_rig.cc)
  target_link_libraries(kvmesh_fuzz_node_rig PUBLIC kvmesh_node)
endif()

# kvmesh_add_fuzz_executable(EXE NAME [SOURCES...]): EXE built from fuzz/NAME_fuzzer.cc (and the
# extra sources) with NAME's libraries.
function(kvmesh_add_fuzz_executable exe name)
  add_executable(${exe} ${PROJECT_SOURCE_DIR}/fuzz/${name}_fuzzer.cc ${ARGN})
  target_link_libraries(${exe} PRIVATE ${KVMESH_FUZZ_LIBS_${name}})
  if(name STREQUAL "bundle_codec" OR name STREQUAL "layer_range_codec")
    target_include_directories(${exe} SYSTEM PRIVATE ${KVMESH_XXHASH_INCLUDE_DIR})
  endif()
endfunction()
