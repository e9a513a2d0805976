# The store's tests (TCP store, env://, file://, host callbacks, argument checks): the
# operations, the server's robustness and authentication, in one executable; the Redis
# tests start their own redis-server (skipped where it is not installed). The raw-socket
# attackers compute the handshake's HMACs with libcrypto. (The server's resource limits are
# dlpg's own DLPG_STORE_* parameters: tests/unit/store_limits.cmake.)
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_store SOURCES ${D}/test_store_ops.cc ${D}/test_store_server.cc
  ${D}/test_store_auth.cc ${D}/test_store_redis.cc LIBS OpenSSL::Crypto)
