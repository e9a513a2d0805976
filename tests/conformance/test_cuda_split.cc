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

// The NCCL communicator settings of dlpg_group_options_t reach ncclCommInitRankConfig and
// the child's ncclCommSplit (which NCCL would refuse if they were malformed): the
// operations on both communicators give the reference results. (What NCCL made of them,
// DLPG_DEBUG=INFO logs with each communicator: test_torch_cuda_surface.py reads it.)
TEST(CudaSplit, WorldOneNcclSettings) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = 60;
    o.name = "nccl-settings";
    o.nccl_min_ctas = 1;
    o.nccl_max_ctas = 2;
    o.nccl_cga_cluster_size = 0;
    o.nccl_comm_name = "dlpg-conformance";
    dlpg_group_t *g = nullptr;
    CT_OK(e.api, e.api->group_create(e.store, 0, 1, &o, &g));
    Matrix m{e.api, g, Layout{1, 0, {0}}};
    m.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    dlpg_group_options_t co = DLPG_GROUP_OPTIONS_INIT;
    co.nccl_max_ctas = 4;  // the rest inherited
    dlpg_group_t *child = nullptr;
    CT_OK(e.api, e.api->group_split(g, 0, 0, &co, &child));
    CT_ASSERT(child != nullptr, "no child");
    Matrix mc{e.api, child, Layout{1, 0, {0}}, 5000};
    mc.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);
    CT_OK(e.api, e.api->group_destroy(child));
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

}  // namespace
