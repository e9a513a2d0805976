# Fault injection through the ABI: killed, stopped, idle and late peers, the store
# gone, aborts, destroy and re-creation after failures, every rank of a group killed. Ranks
# are forked processes over the real TCP store on 127.0.0.1. Tests named *Propagation*
# check what failure propagation and the flight recorder add (the culprit named within
# ~1.5 s, a skipped collective named).
set(D ${CMAKE_CURRENT_LIST_DIR})
# A case gets the default budget (up to 9 s measured); the soak 120 s: its 200 create/destroy
# cycles (up to 9 s measured) slow down most with the host's load.
set(DLPG_FAULTS_TIMEOUTS SLOW [.]FaultsSoak[.] 120)
dlpg_add_gtest(test_faults ${DLPG_FAULTS_TIMEOUTS}
  ENVIRONMENT DLPG_SOAK_CYCLES=200
  SOURCES ${D}/test_faults.cc ${D}/test_faults_store.cc ${D}/test_faults_storehost.cc
  ${D}/test_faults_soak.cc ${D}/test_faults_p2p.cc ${D}/test_faults_vcoll.cc ${D}/faults_util.cc
  LIBS dlpg_conformance_harness)
# Once per host-memory backend: test_faults with the default choice (these ranks share a
# host: shared memory), test_faults_gloo with Gloo forced. The cases expect what a user of
# either gets and check from the flight record that their collectives ran on the backend
# of their run; sends and receives follow the same choice, per pair. The soak runs 200 cycles here;
# ci/sanitize.sh runs the full 1 000 on each backend.
dlpg_gtest_run(test_faults_gloo TARGET test_faults ${DLPG_FAULTS_TIMEOUTS}
  ENVIRONMENT DLPG_SOAK_CYCLES=200 DLPG_CPU_BACKEND=gloo)
