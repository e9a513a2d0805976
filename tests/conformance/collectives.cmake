# The conformance suite proper (ABI.md): collectives, p2p, bad input, group lifecycle and
# the public structs' layout. The gtest binaries reach the plugin only via dlopen +
# dlpg_get_api (DLPG_PLUGIN=/path/to/libother.so checks another plugin).

# The harness, shared by every conformance binary.
add_library(dlpg_conformance_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/harness.cc)
target_include_directories(dlpg_conformance_harness PUBLIC
  ${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(dlpg_conformance_harness PUBLIC GTest::gtest dlpack::dlpack
  Threads::Threads ${CMAKE_DL_LIBS})
target_compile_definitions(dlpg_conformance_harness PRIVATE
  DLPG_DEFAULT_PLUGIN="$<TARGET_FILE:dlpg>")

set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_collectives SOURCES ${D}/test_collectives.cc ${D}/test_collectives_async.cc
  ${D}/test_reduce_ex.cc ${D}/test_vcoll.cc LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_p2p SOURCES ${D}/test_p2p.cc ${D}/test_p2p_async.cc ${D}/test_p2p_tags.cc
  ${D}/test_p2p_anysource.cc
  LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_errors SOURCES ${D}/test_errors_inputs.cc ${D}/test_errors_peers.cc
  LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_group SOURCES ${D}/test_group.cc LIBS dlpg_conformance_harness)
# Host memory has two backends, chosen per group: ranks of one host (these tests) get the
# shared-memory one by default (sends and receives too, decided per pair); the same binaries
# run again with Gloo forced, so both pass the same suite.
foreach(t test_collectives test_errors test_p2p)
  dlpg_gtest_run(${t}_gloo TARGET ${t} ENVIRONMENT DLPG_CPU_BACKEND=gloo)
endforeach()
# Sends and receives on shared memory again with pair slots of 4 KiB, so every message
# above a few KiB is pipelined through hundreds of chunks.
dlpg_gtest_run(test_p2p_smallslot TARGET test_p2p FILTER *P2PTags*:*P2PAsync*:*P2PAnySource*
  ENVIRONMENT DLPG_SHM_P2P_SLOT_BYTES=4096)

# The rooted and uneven collectives on shared memory with slots of 4 KiB, so that every
# stream larger than a few KiB takes many steps (the windows split blocks at any byte).
dlpg_gtest_run(test_collectives_smallslot TARGET test_collectives FILTER *VColl*
  ENVIRONMENT DLPG_CPU_BACKEND=shm DLPG_SHM_SLOT_BYTES=4096)

# The shm backend with helper threads forced (the 2-core CI machine starts none by default):
# the 64 MiB cases (fresh outputs, faulted in first) and asynchronous works through the ABI,
# the team started on the group's worker.
dlpg_gtest_run(test_collectives_threads TARGET test_collectives
  FILTER *CollectivesLarge*:*AsyncWork*:*Allreduce*
  ENVIRONMENT DLPG_CPU_BACKEND=shm DLPG_SHM_THREADS=3)

# The header as plain C99, pedantic, warnings as errors; layout of the public structs.
add_executable(test_abi_c ${D}/test_abi_c.c)
set_target_properties(test_abi_c PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
  C_EXTENSIONS OFF)
target_compile_options(test_abi_c PRIVATE -Werror -pedantic)
target_include_directories(test_abi_c PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_abi_c PRIVATE dlpg dlpack::dlpack)
dlpg_add_plain_test(test_abi_c TIMEOUT 30 COMMAND $<TARGET_FILE:test_abi_c>)
