// CUDA point-to-point: sends and receives to self inside a batch
// (one GPU), a send/recv between two ranks of a 3-rank group that never waits for the idle
// third rank (pairwise communicators), a receive with a work handle that does not hold the
// caller's stream, and a ring that receives before it sends without a batch. Scenarios run
// in forked children; tests skip when the machine has fewer GPUs than they need.
#include <chrono>

#include "cuda_matrix.h"

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// World size 1: a send to self and a receive from self in one batch, with work handles and
// without, on the communicator of this rank alone; outside a batch refused at the call.
TEST(CudaP2p, SendToSelfInBatchWorldOne) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "self1");
    for (int64_t n : {int64_t(1), int64_t(4099), int64_t(1) << 20}) {
      DevTensor s(0, DT::F32, n), r(0, DT::F32, n), s2(0, DT::I32, n), r2(0, DT::I32, n);
      s.Upload(Data(DT::F32, DLPG_SUM, 70, 0, n));
      s2.Upload(Data(DT::I32, DLPG_SUM, 71, 0, n));
      r.Upload(std::vector<double>((size_t)n, 0.0));
      r2.Upload(std::vector<double>((size_t)n, 0.0));
      dlpg_work_t *w[2] = {};
      CT_OK(e.api, e.api->group_start(g));
      CT_OK(e.api, e.api->recv(g, r.dl(), 0, 0, nullptr, &w[0]));
      CT_OK(e.api, e.api->send(g, s.dl(), 0, 0, nullptr, &w[1]));
      CT_OK(e.api, e.api->send(g, s2.dl(), 0, 1, nullptr, nullptr));
      CT_OK(e.api, e.api->recv(g, r2.dl(), 0, 1, nullptr, nullptr));
      CT_OK(e.api, e.api->group_end(g));
      Wait(e.api, w[0]);
      Wait(e.api, w[1]);
      CT_CUDA(cudaDeviceSynchronize());  // the pair without works is ordered on the stream
      CheckVec(CT_STR("self recv with work, n=" << n), DT::F32, DLPG_SUM, r.Download(),
               Data(DT::F32, DLPG_SUM, 70, 0, n));
      CheckVec(CT_STR("self recv without work, n=" << n), DT::I32, DLPG_SUM, r2.Download(),
               Data(DT::I32, DLPG_SUM, 71, 0, n));
    }
    // Collectives still run on the group's own communicator beside the self one.
    DevTensor a(0, DT::F32, 100);
    a.Upload(Data(DT::F32, DLPG_SUM, 72, 0, 100));
    DLTensor *ta = a.dl();
    CT_OK(e.api, e.api->allreduce(g, &ta, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    CT_CUDA(cudaDeviceSynchronize());
    CheckVec("allreduce after self p2p", DT::F32, DLPG_SUM, a.Download(), Data(DT::F32, DLPG_SUM, 72, 0, 100));
    dlpg_work_t *w = nullptr;
    DevTensor s(0, DT::F32, 8);
    dlpg_status_t st = e.api->send(g, s.dl(), 0, 0, nullptr, &w);
    CT_EXPECT(st == DLPG_ERR_INVALID_ARGUMENT, "send to self outside a batch: " << e.api->status_name(st));
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

// Ranks 0 and 1 of a 3-rank group exchange as the group's first CUDA operation; rank 2 only
// creates and destroys its group. With a group-wide communicator this waits for rank 2
// until the deadline.
TEST(CudaP2p, PairNeedsOnlyItsTwoRanks) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(3, 3, 120, [](Env &e) {
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 3, "pair3", 30);
    if (e.rank < 2) {
      CT_CUDA(cudaSetDevice(e.rank));
      const int64_t n = 1 << 16;
      DevTensor s(e.rank, DT::F32, n), r(e.rank, DT::F32, n);
      s.Upload(Data(DT::F32, DLPG_SUM, 80, e.rank, n));
      auto t0 = std::chrono::steady_clock::now();
      dlpg_work_t *w[2] = {};
      CT_OK(e.api, e.api->group_start(g));
      CT_OK(e.api, e.api->send(g, s.dl(), 1 - e.rank, 0, nullptr, &w[0]));
      CT_OK(e.api, e.api->recv(g, r.dl(), 1 - e.rank, 0, nullptr, &w[1]));
      CT_OK(e.api, e.api->group_end(g));
      Wait(e.api, w[0]);
      Wait(e.api, w[1]);
      double el = Since(t0);
      CT_EXPECT(el < 20, "the exchange of ranks 0 and 1 took " << el << " s (waited for rank 2?)");
      CheckVec("pair exchange", DT::F32, DLPG_SUM, r.Download(), Data(DT::F32, DLPG_SUM, 80, 1 - e.rank, n));
    }
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

// Rank 0 posts a receive with a work handle and then an allreduce on the same stream; rank 1
// joins the allreduce first and sends afterwards. On the caller's stream the receive would
// hold the allreduce (a deadlock); on the pair's own stream both complete.
TEST(CudaP2p, ReceiveDoesNotHoldCallerStream) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "ownstream", 30);
    const int64_t n = 1 << 18;
    DevTensor x(e.rank, DT::F32, n), a(e.rank, DT::F32, 1000);
    a.Upload(Data(DT::F32, DLPG_SUM, 90, e.rank, 1000));
    DLTensor *ta = a.dl();
    // Connect both communicators first (creation is a rendezvous of its own).
    CT_OK(e.api, e.api->allreduce(g, &ta, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    if (e.rank == 0) CT_OK(e.api, e.api->send(g, x.dl(), 1, 0, nullptr, nullptr));
    else CT_OK(e.api, e.api->recv(g, x.dl(), 0, 0, nullptr, nullptr));
    CT_CUDA(cudaDeviceSynchronize());
    a.Upload(Data(DT::F32, DLPG_SUM, 91, e.rank, 1000));
    if (e.rank == 0) {
      dlpg_work_t *wr = nullptr, *wa = nullptr;
      CT_OK(e.api, e.api->recv(g, x.dl(), 1, 1, nullptr, &wr));
      CT_OK(e.api, e.api->allreduce(g, &ta, nullptr, 1, DLPG_SUM, nullptr, &wa));
      Wait(e.api, wa);
      Wait(e.api, wr);
      CheckVec("received after the allreduce", DT::F32, DLPG_SUM, x.Download(), Data(DT::F32, DLPG_SUM, 92, 1, n));
    } else {
      dlpg_work_t *wa = nullptr, *ws = nullptr;
      CT_OK(e.api, e.api->allreduce(g, &ta, nullptr, 1, DLPG_SUM, nullptr, &wa));
      Wait(e.api, wa);
      x.Upload(Data(DT::F32, DLPG_SUM, 92, 1, n));
      CT_OK(e.api, e.api->send(g, x.dl(), 0, 1, nullptr, &ws));
      Wait(e.api, ws);
    }
    std::vector<double> want(1000);
    for (int j = 0; j < 1000; j++) want[j] = Value(DT::F32, DLPG_SUM, 91, 0, j) + Value(DT::F32, DLPG_SUM, 91, 1, j);
    CheckVec("allreduce beside a pending receive", DT::F32, DLPG_SUM, a.Download(), want);
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

// Every rank posts recv(prev) then send(next) with work handles, no batch (3+ ranks, one GPU
// each: with 2 ranks prev == next share one pairwise stream, which orders the send after the
// receive, as in torch's NCCL backend). The pairs' communicators are made by a batched ring
// first: a pair's first transfer creates its communicator on the calling thread, so first
// transfers that wait on each other in a cycle must be in one batch (README).
TEST(CudaP2p, RingReceiveFirstWithoutBatch) {
  NEED_GPUS(3);
  const int world = Gpus().count < 4 ? Gpus().count : 4;
  EXPECT_NO_FAILURES(RunProcs(world, world, 180, [world](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, world, "ring", 30);
    const int next = (e.rank + 1) % world, prev = (e.rank + world - 1) % world;
    {
      DevTensor s(e.rank, DT::U8, 16), r(e.rank, DT::U8, 16);
      CT_OK(e.api, e.api->group_start(g));
      CT_OK(e.api, e.api->recv(g, r.dl(), prev, 0, nullptr, nullptr));
      CT_OK(e.api, e.api->send(g, s.dl(), next, 0, nullptr, nullptr));
      CT_OK(e.api, e.api->group_end(g));
      CT_CUDA(cudaDeviceSynchronize());
    }
    for (int64_t n : {int64_t(7), int64_t(1) << 20}) {
      DevTensor s(e.rank, DT::F32, n), r(e.rank, DT::F32, n);
      s.Upload(Data(DT::F32, DLPG_SUM, 100 + n, e.rank, n));
      dlpg_work_t *wr = nullptr, *ws = nullptr;
      CT_OK(e.api, e.api->recv(g, r.dl(), prev, 0, nullptr, &wr));
      CT_OK(e.api, e.api->send(g, s.dl(), next, 0, nullptr, &ws));
      Wait(e.api, wr);
      Wait(e.api, ws);
      CheckVec(CT_STR("ring n=" << n), DT::F32, DLPG_SUM, r.Download(), Data(DT::F32, DLPG_SUM, 100 + n, prev, n));
    }
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

}  // namespace
