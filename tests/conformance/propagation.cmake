# Failure propagation and the flight recorder. test_flight_env
# runs the flight tests that need the ring size and the TRACE level set in the environment
# (parameters are read once per process).
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_propagation TIMEOUT 240 SOURCES ${D}/test_propagation.cc
  LIBS dlpg_conformance_harness)
dlpg_add_gtest(test_flight TIMEOUT 120 SOURCES ${D}/test_flight.cc LIBS dlpg_conformance_harness)
add_test(NAME test_flight_env COMMAND test_flight --gtest_filter=FlightEnv.*)
set_tests_properties(test_flight_env PROPERTIES TIMEOUT 60
  ENVIRONMENT "DLPG_FLIGHT_RECORDER_ENTRIES=8;DLPG_DEBUG=TRACE")
# The first collective's missing rank and the abort's dump with Gloo forced: on Gloo the
# first collective also connects the group, whose rendezvous names the missing rank too.
add_test(NAME test_propagation_gloo COMMAND test_propagation
  --gtest_filter=PropagationTimeout.FirstCollective*:PropagationTimeout.OnlyTheFailing*)
set_tests_properties(test_propagation_gloo PROPERTIES TIMEOUT 120
  ENVIRONMENT "DLPG_CPU_BACKEND=gloo")
