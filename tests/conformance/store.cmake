# The store's tests (TCP store, env://, file://, host callbacks, argument checks): the
# operations, the server's robustness, authentication and resource limits, in one
# executable. The raw-socket attackers compute the handshake's HMACs with libcrypto.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_store TIMEOUT 120 SOURCES ${D}/test_store_ops.cc ${D}/test_store_server.cc
  ${D}/test_store_auth.cc LIBS OpenSSL::Crypto)
