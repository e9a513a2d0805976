# Stall warnings and trace files (test_stall.cc). Parameters are read once per process, so
# each case has its own entry with its environment; a case skips itself under the others.
# The stall warning and the dump run on both CPU backends (the watcher is core's).
set(D ${CMAKE_CURRENT_LIST_DIR})
# No entry without an environment: there every case would skip.
dlpg_add_gtest(test_stall NO_RUN SOURCES ${D}/test_stall.cc ${D}/faults_util.cc
  LIBS dlpg_conformance_harness)
foreach(be gloo shm)
  dlpg_gtest_run(test_stall_warn_${be} TARGET test_stall FILTER StallEnv.WarnsOnce*
    ENVIRONMENT DLPG_STALL_WARN_S=1 DLPG_CPU_BACKEND=${be})
  dlpg_gtest_run(test_stall_dump_${be} TARGET test_stall FILTER StallEnv.KilledRank*
    ENVIRONMENT DLPG_FLIGHT_RECORDER_DUMP=${CMAKE_CURRENT_BINARY_DIR}/stall_dump_${be}/
    DLPG_CPU_BACKEND=${be})
  dlpg_gtest_run(test_stall_notcalled_${be} TARGET test_stall
    FILTER StallEnv.NamesTheRankThatDidNotCall ENVIRONMENT DLPG_STALL_WARN_S=2 DLPG_CPU_BACKEND=${be})
endforeach()
dlpg_gtest_run(test_stall_file TARGET test_stall FILTER StallEnv.DebugFile*
  ENVIRONMENT DLPG_DEBUG=INFO DLPG_DEBUG_FILE=${CMAKE_CURRENT_BINARY_DIR}/stall_log/dlpg.%h.%p)
dlpg_gtest_run(test_stall_file_unwritable TARGET test_stall FILTER StallEnv.Unwritable*
  ENVIRONMENT DLPG_DEBUG=INFO DLPG_DEBUG_FILE=/no-such-dir-dlpg/log.%p)
