# CUDA conformance tests (the NCCL path): built only when the plugin has NCCL. They need no
# GPU to build and skip at run time on a machine with fewer GPUs than each case needs, so
# CI without GPUs passes. The test links the CUDA runtime itself for cudaMalloc/cudaMemcpy;
# the plugin is still reached only through dlopen + dlpg_get_api.
if(DLPG_HAVE_NCCL)
  dlpg_add_gtest(test_cuda TIMEOUT 900
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_ops.cc ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_faults.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/cuda_util.cc
    LIBS CUDA::cudart)
endif()
