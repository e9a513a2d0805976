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
target_compile_options(dlpg_conformance_harness PRIVATE -Wall -Wextra)

set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_collectives TIMEOUT 600 SOURCES ${D}/test_collectives.cc
  ${D}/test_collectives_async.cc
  LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_p2p TIMEOUT 300 SOURCES ${D}/test_p2p.cc ${D}/test_p2p_async.cc
  LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_errors TIMEOUT 120 SOURCES ${D}/test_errors_inputs.cc
  ${D}/test_errors_peers.cc LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_group TIMEOUT 300 SOURCES ${D}/test_group.cc LIBS dlpg_conformance_harness)
# Host memory has two backends, chosen per group: ranks of one host (these tests) get the
# shared-memory one by default; the same binaries run again with Gloo forced, so both pass
# the same suite. (Sends and receives are Gloo's under either.)
foreach(t test_collectives test_errors)
  add_test(NAME ${t}_gloo COMMAND ${t})
  get_test_property(${t} TIMEOUT ${t}_timeout)
  set_tests_properties(${t}_gloo PROPERTIES TIMEOUT ${${t}_timeout} ENVIRONMENT
    "DLPG_CPU_BACKEND=gloo")
endforeach()

# The header as plain C99, pedantic, warnings as errors; layout of the public structs.
add_executable(test_abi_c ${D}/test_abi_c.c)
set_target_properties(test_abi_c PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
  C_EXTENSIONS OFF)
target_compile_options(test_abi_c PRIVATE -Wall -Wextra -Werror -pedantic)
target_include_directories(test_abi_c PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_abi_c PRIVATE dlpg dlpack::dlpack)
add_test(NAME test_abi_c COMMAND test_abi_c)
set_tests_properties(test_abi_c PROPERTIES TIMEOUT 30)
