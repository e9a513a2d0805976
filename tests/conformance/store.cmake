# The store's tests (TCP store, env://, file://, host callbacks, argument checks): the
# operations, the server's robustness, authentication and resource limits, in one
# executable; the Redis tests start their own redis-server (skipped where it is not
# installed). The raw-socket attackers compute the handshake's HMACs with libcrypto; the
# descriptor-exhaustion test runs dlpg-store with a low descriptor limit.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_store TIMEOUT 180 SOURCES ${D}/test_store_ops.cc ${D}/test_store_server.cc
  ${D}/test_store_auth.cc ${D}/test_store_limits.cc ${D}/test_store_redis.cc LIBS OpenSSL::Crypto)
if(TARGET dlpg-store)
  target_compile_definitions(test_store PRIVATE DLPG_STORE_BIN="$<TARGET_FILE:dlpg-store>")
  add_dependencies(test_store dlpg-store)
endif()
