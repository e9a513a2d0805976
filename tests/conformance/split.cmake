# dlpg_group_split: children checked against an MPI_Comm_split reference, nested splits,
# destroy orders, the parent's abort, a rank that never splits (test_split.cc). Forked ranks
# and threads on 127.0.0.1; once per host-memory backend: the default choice (shared memory)
# and Gloo forced.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_split SOURCES ${D}/test_split.cc ${D}/child_check.cc LIBS dlpg_conformance_harness)
dlpg_gtest_run(test_split_gloo TARGET test_split ENVIRONMENT DLPG_CPU_BACKEND=gloo)
