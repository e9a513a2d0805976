# White-box tests of the Gloo island: they call plugin/gloo's internal functions, so they
# link the plugin's objects (dlpg_obj) rather than reaching libdlpg.so through dlopen. The
# operations and the context's lifecycle are two files of one executable.
dlpg_add_gtest(gloo_island_test TIMEOUT 120 SOURCES gloo_island_ops_test.cc
  gloo_island_ctx_test.cc LIBS dlpg_obj)
target_include_directories(gloo_island_test PRIVATE ${PROJECT_SOURCE_DIR}/plugin)
