# White-box tests of the Gloo island: they call plugin/gloo's internal functions, so they
# link the plugin's objects (dlpg_obj) rather than reaching libdlpg.so through dlopen. The
# operations and the context's lifecycle are two files of one executable.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_gloo_island SOURCES ${D}/test_gloo_island_ops.cc
  ${D}/test_gloo_island_ctx.cc LIBS dlpg_obj)
target_include_directories(test_gloo_island PRIVATE ${PROJECT_SOURCE_DIR}/plugin)
