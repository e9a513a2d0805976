# The TCP store server's bounded resources. Every limit is one of dlpg's own DLPG_STORE_*
# parameters, made small for the test, and each refusal names the parameter: dlpg's tests,
# not the conformance suite's (which another plugin, without these parameters, is held to).
# The store helpers and the raw-socket attackers (HMACs from libcrypto) are the conformance
# suite's; the descriptor-exhaustion test runs dlpg-store with a low descriptor limit.
dlpg_add_gtest(test_store_limits SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_limits.cc
  LIBS OpenSSL::Crypto)
target_include_directories(test_store_limits PRIVATE ${PROJECT_SOURCE_DIR}/tests/conformance)
if(TARGET dlpg-store)
  target_compile_definitions(test_store_limits PRIVATE DLPG_STORE_BIN="$<TARGET_FILE:dlpg-store>")
  add_dependencies(test_store_limits dlpg-store)
endif()

# Connections that never complete a frame: their memory (measured in a dlpg-store process),
# the bound on unfinished requests, and the slots they hold.
dlpg_add_gtest(test_store_conns SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_conns.cc
  LIBS OpenSSL::Crypto)
target_include_directories(test_store_conns PRIVATE ${PROJECT_SOURCE_DIR}/tests/conformance)
if(TARGET dlpg-store)
  target_compile_definitions(test_store_conns PRIVATE DLPG_STORE_BIN="$<TARGET_FILE:dlpg-store>")
  add_dependencies(test_store_conns dlpg-store)
endif()
