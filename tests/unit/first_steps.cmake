# The messages a newcomer meets first (a CUDA tensor without a driver, a complex tensor, a
# misspelled store URL), run against the built plugin through the conformance harness.
dlpg_add_gtest(test_first_steps TIMEOUT 180 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_first_steps.cc
  LIBS dlpg_conformance_harness)
