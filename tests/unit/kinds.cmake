# The operation-kind table (plugin/core/group/op_kinds.h): the names and facts generated from it,
# the kinds a backend table lists (a module's 0 read as ABI v1's nine), validation refusing a
# kind the serving backend does not list, the self-send rule at validation, and the CPU
# backends' reduce rules agreeing with what their issue paths can run (the pair is judged
# once, at validation). Registers a test backend line of its own: its own executable, so
# the registry other tests see stays the build's.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_kinds TIMEOUT 120 SOURCES ${D}/test_kinds.cc LIBS dlpg_obj)
target_include_directories(test_kinds PRIVATE ${PROJECT_SOURCE_DIR}/plugin)
