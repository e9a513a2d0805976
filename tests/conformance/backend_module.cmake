# Backend modules: the NCCL module missing (a path that does not exist) and broken (a library
# without its entry point: libdlpg.so itself). In both a CUDA tensor is UNSUPPORTED at the
# call, naming the module and the loader's reason, and CPU jobs run. ci/check-no-cuda.sh runs
# the same binary with the real module present but CUDA hidden.
set(D ${CMAKE_CURRENT_LIST_DIR})
dlpg_add_gtest(test_backend_module TIMEOUT 120 SOURCES ${D}/test_backend_module.cc
  LIBS dlpg_conformance_harness)
set(DLPG_MISSING_MODULE ${CMAKE_CURRENT_BINARY_DIR}/no-such-dir/libdlpg_nccl.so)
set_tests_properties(test_backend_module PROPERTIES ENVIRONMENT
  "DLPG_NCCL_BACKEND=${DLPG_MISSING_MODULE};DLPG_TEST_EXPECT_MODULE_FAIL=${DLPG_MISSING_MODULE}: cannot open shared object file")
add_test(NAME test_backend_module_broken COMMAND test_backend_module)
set_tests_properties(test_backend_module_broken PROPERTIES TIMEOUT 120 ENVIRONMENT
  "DLPG_NCCL_BACKEND=$<TARGET_FILE:dlpg>;DLPG_TEST_EXPECT_MODULE_FAIL=no entry point dlpg_nccl_backend_init")
