# White-box tests of plugin/core (links the object library for internal functions).
# Core finds the NCCL module through the RUNPATH (it is not beside the test binary), and
# through DLPG_NCCL_BACKEND: under AddressSanitizer (ci/sanitize.sh) dlopen is intercepted by
# libasan, whose own (empty) RUNPATH is then the one searched.
set(DLPG_CORE_ENV)
if(TARGET dlpg_nccl)
  set(DLPG_CORE_ENV ENVIRONMENT DLPG_NCCL_BACKEND=$<TARGET_FILE:dlpg_nccl>)
endif()
dlpg_add_gtest(test_core ${DLPG_CORE_ENV} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_core.cc
  LIBS dlpg_obj)
set_target_properties(test_core PROPERTIES BUILD_RPATH ${PROJECT_BINARY_DIR})
# The NCCL backend's support rule is a pure function (no CUDA): tested with fake versions.
target_sources(test_core PRIVATE ${PROJECT_SOURCE_DIR}/plugin/nccl/rules.c)
# The CUDA module's choice between NCCL and its CUDA IPC path: a pure rule (no CUDA).
dlpg_add_gtest(test_route_rule SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_route_rule.cc
  ${PROJECT_SOURCE_DIR}/plugin/nccl/route_rule.c LIBS dlpg_obj)
# The hosts' agreement of the CUDA IPC path's in-place collectives: shared memory, no CUDA.
dlpg_add_gtest(test_ipc_board TIMEOUT 120 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ipc_board.cc
  ${PROJECT_SOURCE_DIR}/plugin/nccl/ipc_board.c LIBS dlpg_obj)
