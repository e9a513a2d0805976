# Launcher detection (plugin/store/launcher.c): the pure function over made-up environments
# (white-box, dlpg_obj), and jobs of forked processes that carry a simulated launcher's
# variables and meet through dlpg_group_create_from_env (the conformance harness, dlopen).
dlpg_add_gtest(test_launcher TIMEOUT 30 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launcher.cc
  LIBS dlpg_obj)
dlpg_add_gtest(test_launcher_jobs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launcher_jobs.cc
  LIBS dlpg_conformance_harness)
# mpirun -np 4 dlpg-demo: one 4-rank job (Debian's openmpi-bin, ci/install-deps.sh).
find_program(DLPG_MPIRUN mpirun)
if(DLPG_MPIRUN)
  dlpg_add_plain_test(launch_mpirun_demo TIMEOUT 180 COMMAND bash
    ${PROJECT_SOURCE_DIR}/tests/launch/mpirun_demo.sh $<TARGET_FILE:dlpg-demo> 4)
endif()
