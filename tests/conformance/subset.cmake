# dlpg_group_create_subset: random member lists checked against a reference (child ranks,
# allreduce and allgather on random per-rank data), the same list twice, a member that never
# calls, a parent whose rank 0 has not admitted anybody yet, bad arguments (test_subset.cc).
# Forked ranks and threads on 127.0.0.1; once per host-memory backend: the default choice
# (shared memory) and Gloo forced.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_subset SOURCES ${D}/test_subset.cc ${D}/child_check.cc LIBS dlpg_conformance_harness)
dlpg_gtest_run(test_subset_gloo TARGET test_subset ENVIRONMENT DLPG_CPU_BACKEND=gloo)
