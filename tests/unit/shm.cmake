# White-box tests of the shared-memory engine (plugin/shm): ranks are forked processes that
# meet through a real TCP store; the engine is reached through its internal header, so the
# test links the plugin's objects (dlpg_obj). Operations, faults and the pair engine of
# sends and receives (test_shm_pair.cc) are files of one executable.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_shm SOURCES ${D}/test_shm_ops.cc ${D}/test_shm_faults.cc
  ${D}/test_shm_pair.cc ${D}/test_shm_handout.cc
  ${D}/test_shm_eager.cc ${D}/test_shm_team.cc
  LIBS dlpg_obj)
target_include_directories(test_shm PRIVATE ${PROJECT_SOURCE_DIR}/plugin
  ${PROJECT_SOURCE_DIR}/tests/conformance)
