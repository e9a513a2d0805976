# White-box tests of plugin/core (links the object library for internal functions).
dlpg_add_gtest(test_core TIMEOUT 120 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/core_test.cc
  LIBS dlpg_obj)
