# Fault injection through the ABI: killed, stopped, idle and late peers, the store
# gone, aborts, destroy and re-creation after failures. Ranks are forked processes over the
# real TCP store on 127.0.0.1. Tests named *Propagation* check what failure propagation and
# the flight recorder add (the culprit named within ~1.5 s, a skipped collective named).
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_faults TIMEOUT 900 SOURCES ${D}/test_faults.cc ${D}/test_faults_store.cc
  ${D}/test_faults_storehost.cc
  ${D}/test_faults_soak.cc
  ${D}/faults_util.cc LIBS dlpg_conformance_harness)
# The soak runs 200 cycles here; ci/sanitize.sh runs the full 1 000. The cases name what
# the Gloo path says (lost connections, its rendezvous), so they run on Gloo; the
# shared-memory backend's faults are tests/unit/test_shm_faults.cc's and test_propagation's.
set_tests_properties(test_faults PROPERTIES ENVIRONMENT
  "DLPG_SOAK_CYCLES=200;DLPG_CPU_BACKEND=gloo")
