# White-box tests of the scoped rendezvous (plugin/core/group/rendezvous.c) and of the Gloo
# context's creation over it: stale keys of earlier jobs, keys removed, ranks named.
dlpg_add_gtest(test_rendezvous SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_rendezvous.cc
  LIBS dlpg_obj)
target_include_directories(test_rendezvous PRIVATE ${PROJECT_SOURCE_DIR}/plugin)
