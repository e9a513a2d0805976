# Children on shared memory in areas of the parent's segment: split and subset children
# against references, destroy orders, a child of a child, many cycles, a full pool falling
# back (test_subteam.cc); a member that dies or never comes before the child's first
# operation, named (test_subteam_faults.cc). test_subteam_pool2 runs them with a pool of 2
# areas, so children beyond it make segments of their own.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_subteam TIMEOUT 120
  SOURCES ${D}/test_subteam.cc ${D}/test_subteam_faults.cc ${D}/child_check.cc ${D}/faults_util.cc
  LIBS dlpg_conformance_harness)
dlpg_gtest_run(test_subteam_pool2 TARGET test_subteam TIMEOUT 120 ENVIRONMENT DLPG_SHM_POOL_AREAS=2)
