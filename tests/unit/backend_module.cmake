# dlpg's own module loader (its backend ABI, DLPG_NCCL_BACKEND, its words): white-box, not
# part of the conformance suite another plugin is held to (that suite checks only the
# status a CUDA tensor gets where no backend serves it, test_errors_inputs.cc).
# Backend modules: the NCCL module missing (a path that does not exist), broken (a library
# without its entry point: libdlpg.so itself) and of another backend ABI (fake modules built
# here, fake_backend_module.c). In each a CUDA tensor is UNSUPPORTED at the call, naming the
# module and the loader's reason (for another ABI: both versions or sizes), and CPU jobs run.
# ci/check-no-cuda.sh runs the same binary with the real module present but CUDA hidden.
set(D ${CMAKE_CURRENT_LIST_DIR})
# OtherAbiNamesBothSides skips without a module of another ABI: only the _abi_ runs have it.
set(DLPG_MISSING_MODULE ${CMAKE_CURRENT_BINARY_DIR}/no-such-dir/libdlpg_nccl.so)
dlpg_add_gtest(test_backend_module FILTER -*.OtherAbiNamesBothSides
  ENVIRONMENT DLPG_NCCL_BACKEND=${DLPG_MISSING_MODULE}
  "DLPG_TEST_EXPECT_MODULE_FAIL=${DLPG_MISSING_MODULE}: cannot open shared object file"
  SOURCES ${D}/test_backend_module.cc LIBS dlpg_conformance_harness)
dlpg_gtest_run(test_backend_module_broken TARGET test_backend_module
  FILTER -*.OtherAbiNamesBothSides ENVIRONMENT DLPG_NCCL_BACKEND=$<TARGET_FILE:dlpg>
  "DLPG_TEST_EXPECT_MODULE_FAIL=no entry point dlpg_backend_init_v1")

# Fake modules of another ABI: name -> kind, and the text the failure must contain.
set(DLPG_FAKE_MODULES v2 table host verror)
set(DLPG_FAKE_KIND_v2 1)
set(DLPG_FAKE_EXPECT_v2 "libdlpg_fake_v2.so: module speaks backend ABI v2, this libdlpg.so speaks v1 (rebuild the module from the same dlpg version)")
set(DLPG_FAKE_KIND_table 2)
set(DLPG_FAKE_EXPECT_table "libdlpg_fake_table.so: module speaks backend ABI v2 (a backend table of 4096 bytes), this libdlpg.so speaks v1 (|bytes) (rebuild the module from the same dlpg version)")
set(DLPG_FAKE_KIND_host 3)
set(DLPG_FAKE_EXPECT_host "libdlpg_fake_host.so: module needs a host table of 65536 bytes, this libdlpg.so (backend ABI v1) offers ")
set(DLPG_FAKE_KIND_verror 4)
set(DLPG_FAKE_EXPECT_verror "its initialisation failed: libdlpg_fake_verror.so: module needs a host table of 65536 bytes, this libdlpg.so (backend ABI v1) offers ")
foreach(f ${DLPG_FAKE_MODULES})
  add_library(dlpg_fake_${f} MODULE ${D}/fake_backend_module.c)
  target_include_directories(dlpg_fake_${f} PRIVATE ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/plugin)
  target_link_libraries(dlpg_fake_${f} PRIVATE dlpack::dlpack)
  target_compile_definitions(dlpg_fake_${f} PRIVATE DLPG_FAKE_KIND=${DLPG_FAKE_KIND_${f}})
  target_compile_options(dlpg_fake_${f} PRIVATE -fvisibility=hidden)
  set_target_properties(dlpg_fake_${f} PROPERTIES OUTPUT_NAME dlpg_fake_${f})
  target_link_options(dlpg_fake_${f} PRIVATE -Wl,--no-undefined)
  add_dependencies(test_backend_module dlpg_fake_${f})
  dlpg_gtest_run(test_backend_module_abi_${f} TARGET test_backend_module
    FILTER BackendModule.CudaTensorWithoutModuleIsUnsupported:BackendModule.OtherAbiNamesBothSides
    ENVIRONMENT DLPG_NCCL_BACKEND=$<TARGET_FILE:dlpg_fake_${f}>
    "DLPG_TEST_EXPECT_MODULE_FAIL=${DLPG_FAKE_EXPECT_${f}}" DLPG_TEST_EXPECT_ABI_MISMATCH=1)
endforeach()
