# Relaunch under one group name on a long-lived store (TCP store process, Redis): a failed
# job's keys are never read by a later one. Forked ranks on 127.0.0.1; the Redis case starts
# its own redis-server (skipped where it is not installed). Run on the default CPU line and
# on Gloo (their rendezvous keys differ).
set(D ${CMAKE_CURRENT_LIST_DIR})
# 120 s a case: a relaunch after a missing rank waits out that rank (13 s measured).
dlpg_add_gtest(test_relaunch TIMEOUT 120 SOURCES ${D}/test_relaunch.cc ${D}/faults_util.cc
  LIBS dlpg_conformance_harness OpenSSL::Crypto)
dlpg_gtest_run(test_relaunch_gloo TARGET test_relaunch TIMEOUT 120
  ENVIRONMENT DLPG_CPU_BACKEND=gloo)
