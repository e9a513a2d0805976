# Failure propagation and the flight recorder. test_flight_env
# runs the flight tests that need the ring size and the TRACE level set in the environment
# (parameters are read once per process).
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_propagation SOURCES ${D}/test_propagation.cc
  LIBS dlpg_conformance_harness)
# FlightEnv.* skip without their environment: only test_flight_env runs them.
dlpg_add_gtest(test_flight FILTER -FlightEnv.* SOURCES ${D}/test_flight.cc
  LIBS dlpg_conformance_harness)
dlpg_gtest_run(test_flight_env TARGET test_flight FILTER FlightEnv.*
  ENVIRONMENT DLPG_FLIGHT_RECORDER_ENTRIES=8 DLPG_DEBUG=TRACE)
# The first collective's missing rank and the abort's dump with Gloo forced: on Gloo the
# first collective also connects the group, whose rendezvous names the missing rank too.
dlpg_gtest_run(test_propagation_gloo TARGET test_propagation
  FILTER PropagationTimeout.FirstCollective*:PropagationTimeout.OnlyTheFailing*
  ENVIRONMENT DLPG_CPU_BACKEND=gloo)
