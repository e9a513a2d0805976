// dlpg_group_split on CUDA: a group that already holds an NCCL communicator splits it
// eagerly (ncclCommSplit) into the child's, whose first allreduce is checked against the
// reference; then a split before any CUDA operation, whose child makes its own lazily.
// Skipped without a GPU, like the rest of test_cuda.
#include "cuda_matrix.h"

namespace {

TEST(CudaSplit, WorldOneSplitAfterAllreduce) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "split1");
    Matrix m{e.api, g, Layout{1, 0, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);  // the parent's communicator exists
    dlpg_group_t *child = nullptr;
    CT_OK(e.api, e.api->group_split(g, 0, 0, nullptr, &child));
    CT_ASSERT(child != nullptr, "no child");
    Matrix mc{e.api, child, Layout{1, 0, {0}}, 5000};
    mc.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    mc.Allreduce(DT::I32, DLPG_MAX, true, 77, false);
    // A rank without a color still takes part in the split of the parent's communicator.
    dlpg_group_t *none = reinterpret_cast<dlpg_group_t *>(0x1);
    CT_OK(e.api, e.api->group_split(g, DLPG_SPLIT_NONE, 0, nullptr, &none));
    CT_EXPECT(none == nullptr, "a negative color got a group");
    CT_OK(e.api, e.api->group_destroy(g));  // the child outlives its parent
    mc.Allreduce(DT::F32, DLPG_SUM, false, 64, false);
    CT_OK(e.api, e.api->group_destroy(child));
  }));
}

TEST(CudaSplit, WorldOneSplitBeforeAnyCudaOp) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "split0");
    dlpg_group_t *child = nullptr;
    CT_OK(e.api, e.api->group_split(g, 3, 0, nullptr, &child));
    CT_ASSERT(child != nullptr, "no child");
    Matrix mc{e.api, child, Layout{1, 0, {0}}};
    mc.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    CT_OK(e.api, e.api->group_destroy(child));
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

}  // namespace
