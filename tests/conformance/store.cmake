# The store's tests (TCP store, env://, file://, host callbacks, argument checks): the
# operations and the server's robustness, two files of one executable.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_store TIMEOUT 60 SOURCES ${D}/test_store_ops.cc ${D}/test_store_server.cc)
