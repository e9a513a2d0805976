# White-box tests of plugin/core (links the object library for internal functions).
dlpg_add_gtest(test_core TIMEOUT 120 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_core.cc
  LIBS dlpg_obj)
# Core finds the NCCL module through the RUNPATH (it is not beside the test binary).
set_target_properties(test_core PROPERTIES BUILD_RPATH ${PROJECT_BINARY_DIR})
# The NCCL backend's support rule is a pure function (no CUDA): tested with fake versions.
target_sources(test_core PRIVATE ${PROJECT_SOURCE_DIR}/plugin/nccl/rules.c)
