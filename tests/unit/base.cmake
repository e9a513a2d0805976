# White-box tests of plugin/base's registries (parameters and log subsystems). The variables
# are set before the process starts, as a user would, because both are read once.
dlpg_add_gtest(test_base TIMEOUT 30 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_base.cc
  LIBS dlpg_obj ENVIRONMENT DLPG_DEBUG=INFO DLPG_DEBUG_SUBSYS=late_sub,STORE
  DLPG_TEST_CACHED=first DLPG_TEST_SECRET=hunter2 DLPG_TEST_LONG=12x)
