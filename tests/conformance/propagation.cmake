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
