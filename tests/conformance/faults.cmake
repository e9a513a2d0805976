# Fault injection through the ABI: killed, stopped, idle and late peers, the store
# gone, aborts, destroy and re-creation after failures, every rank of a group killed. Ranks
# are forked processes over the real TCP store on 127.0.0.1. Tests named *Propagation*
# check what failure propagation and the flight recorder add (the culprit named within
# ~1.5 s, a skipped collective named).
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_faults TIMEOUT 900 SOURCES ${D}/test_faults.cc ${D}/test_faults_store.cc
  ${D}/test_faults_storehost.cc
  ${D}/test_faults_soak.cc ${D}/test_faults_p2p.cc
  ${D}/faults_util.cc LIBS dlpg_conformance_harness)
# Once per host-memory backend: test_faults with the default choice (these ranks share a
# host: shared memory), test_faults_gloo with Gloo forced. The cases expect what a user of
# either gets and check from the flight record that their collectives ran on the backend
# of their entry; sends and receives follow the same choice, per pair. The soak runs 200 cycles here;
# ci/sanitize.sh runs the full 1 000 on each backend.
set_tests_properties(test_faults PROPERTIES ENVIRONMENT "DLPG_SOAK_CYCLES=200")
add_test(NAME test_faults_gloo COMMAND test_faults)
set_tests_properties(test_faults_gloo PROPERTIES TIMEOUT 900 ENVIRONMENT
  "DLPG_SOAK_CYCLES=200;DLPG_CPU_BACKEND=gloo")
