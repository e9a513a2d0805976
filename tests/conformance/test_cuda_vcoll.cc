// CUDA conformance tests of the rooted and uneven collectives on the NCCL path (what they
// check: cuda_vmatrix.h; even counts go out as one NCCL collective, uneven ones as sends and
// receives or one reduce per block). World size 1 on one GPU; two processes on two GPUs
// skip with fewer. Builds into test_cuda (cuda.cmake).
#include "cuda_vmatrix.h"

namespace {

using vcoll::VMatrix;

TEST(CudaVcoll, WorldOneOneGpu) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "v1");
    VMatrix m{e.api, g, 1, 0, 0};
    m.Run();
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

TEST(CudaVcoll, TwoProcessesTwoGpus) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 200, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "v2");
    VMatrix m{e.api, g, 2, e.rank, e.rank};
    m.Run();
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

}  // namespace
