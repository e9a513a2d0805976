# Relaunch under one group name on a long-lived store (TCP store process, Redis): a failed
# job's keys are never read by a later one. Forked ranks on 127.0.0.1; the Redis case starts
# its own redis-server (skipped where it is not installed). Run on the default CPU line and
# on Gloo (their rendezvous keys differ).
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_relaunch TIMEOUT 900 SOURCES ${D}/test_relaunch.cc ${D}/faults_util.cc
  LIBS dlpg_conformance_harness OpenSSL::Crypto)
add_test(NAME test_relaunch_gloo COMMAND test_relaunch)
set_tests_properties(test_relaunch_gloo PROPERTIES TIMEOUT 900 ENVIRONMENT DLPG_CPU_BACKEND=gloo)
