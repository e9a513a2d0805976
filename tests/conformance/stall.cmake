# Stall warnings and trace files (test_stall.cc). Parameters are read once per process, so
# each case has its own entry with its environment; a case skips itself under the others.
# The stall warning and the dump run on both CPU backends (the watcher is core's).
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_stall TIMEOUT 120 SOURCES ${D}/test_stall.cc ${D}/faults_util.cc
  LIBS dlpg_conformance_harness)
set_tests_properties(test_stall PROPERTIES TIMEOUT 60)
foreach(be gloo shm)
  add_test(NAME test_stall_warn_${be} COMMAND test_stall --gtest_filter=StallEnv.WarnsOnce*)
  set_tests_properties(test_stall_warn_${be} PROPERTIES TIMEOUT 120
    ENVIRONMENT "DLPG_STALL_WARN_S=1;DLPG_CPU_BACKEND=${be}")
  add_test(NAME test_stall_notcalled_${be} COMMAND test_stall
    --gtest_filter=StallEnv.NamesTheRankThatDidNotCall)
  set_tests_properties(test_stall_notcalled_${be} PROPERTIES TIMEOUT 120
    ENVIRONMENT "DLPG_STALL_WARN_S=2;DLPG_CPU_BACKEND=${be}")
  add_test(NAME test_stall_dump_${be} COMMAND test_stall --gtest_filter=StallEnv.KilledRank*)
  set_tests_properties(test_stall_dump_${be} PROPERTIES TIMEOUT 120
    ENVIRONMENT "DLPG_FLIGHT_RECORDER_DUMP=${CMAKE_CURRENT_BINARY_DIR}/stall_dump_${be}/;DLPG_CPU_BACKEND=${be}")
endforeach()
add_test(NAME test_stall_file COMMAND test_stall --gtest_filter=StallEnv.DebugFile*)
set_tests_properties(test_stall_file PROPERTIES TIMEOUT 120
  ENVIRONMENT "DLPG_DEBUG=INFO;DLPG_DEBUG_FILE=${CMAKE_CURRENT_BINARY_DIR}/stall_log/dlpg.%h.%p")
add_test(NAME test_stall_file_unwritable COMMAND test_stall --gtest_filter=StallEnv.Unwritable*)
set_tests_properties(test_stall_file_unwritable PROPERTIES TIMEOUT 120
  ENVIRONMENT "DLPG_DEBUG=INFO;DLPG_DEBUG_FILE=/no-such-dir-dlpg/log.%p")
