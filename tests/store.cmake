# The store's tests (TCP store, env://, file://, host callbacks, argument checks): the
# operations and the server's robustness, two files of one executable.
dlpg_add_gtest(test_store TIMEOUT 60 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_store_ops.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/test_store_server.cc)
