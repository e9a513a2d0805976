# White-box tests of plugin/core (links the object library for internal functions).
dlpg_add_gtest(test_core TIMEOUT 120 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_core.cc
  LIBS dlpg_obj)
