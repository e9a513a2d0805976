# CUDA conformance tests (the NCCL path): built only when CUDA and NCCL are found. They need
# no GPU to build and skip at run time on a machine with fewer GPUs than each case needs, so
# CI without GPUs passes. The test links the CUDA runtime itself for cudaMalloc/cudaMemcpy;
# the plugin is still reached only through dlopen + dlpg_get_api.
if(DLPG_HAVE_NCCL AND DLPG_BUILD_CUDA_TESTS)
  set(D ${CMAKE_CURRENT_LIST_DIR})
  # 120 s a case: NCCL communicators take seconds to create, and a case makes several.
  dlpg_add_gtest(test_cuda TIMEOUT 120
    SOURCES ${D}/test_cuda_ops.cc ${D}/test_cuda_faults.cc ${D}/test_cuda_p2p.cc
    ${D}/test_cuda_split.cc ${D}/test_cuda_vcoll.cc ${D}/cuda_util.cc
    LIBS CUDA::cudart)
  # The CUDA IPC path (ranks sharing cuda:0): its own binary, so the GPU script runs it alone.
  dlpg_add_gtest(test_cuda_ipc TIMEOUT 300
    SOURCES ${D}/test_cuda_ipc.cc ${D}/test_cuda_ipc_direct.cc ${D}/cuda_util.cc
    LIBS CUDA::cudart)
endif()
