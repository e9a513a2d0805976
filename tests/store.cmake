# The store's tests (TCP store, env://, file://, host callbacks, argument checks).
dlpg_add_gtest(test_store TIMEOUT 60 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_store.cc)
