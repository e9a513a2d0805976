# One warning per unknown or malformed value of dlpg's variables: each case runs the binary
# again with the variable set from the start (the variables are read once per process).
dlpg_add_gtest(test_param_warnings TIMEOUT 120 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_param_warnings.cc
  LIBS dlpg_obj)
