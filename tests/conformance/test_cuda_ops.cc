// CUDA conformance tests, the operations: CUDA tensors through the plugin's NCCL path,
// compared with references computed here on the host from per-contribution random data,
// over processes, threads, several devices per process, mixed CPU/CUDA and graph capture,
// plus informational timings. Every scenario runs in forked children (the googletest
// process never initialises CUDA) under its own deadline; tests skip when the machine has
// fewer GPUs than they need. Failures and cleanup are in test_cuda_faults.cc; both build
// into test_cuda.
#include "cuda_matrix.h"

namespace {

// ------------------------------------------------------------------ tests

TEST(Cuda, BuildInfoNamesNccl) {
  const char *info = nullptr;
  ASSERT_EQ(dlpg_test_api()->get_build_info(&info), DLPG_OK);
  EXPECT_NE(std::string(info).find("nccl 2."), std::string::npos) << info;
  EXPECT_NE(std::string(info).find("cuda 1"), std::string::npos) << info;
}

TEST(Cuda, WorldOneOneGpu) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "w1");
    Matrix m{e.api, g, Layout{1, 0, {0}}};
    m.Run(false, WantFp8());
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

TEST(Cuda, TwoProcessesTwoGpusFullMatrix) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 300, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "p2");
    Matrix m{e.api, g, Layout{2, e.rank, {e.rank}}};
    m.Run(true, WantFp8());
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

TEST(Cuda, OneProcessTwoGpusDeviceList) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 200, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "dl");
    Matrix m{e.api, g, Layout{1, 0, {0, 1}}};
    m.Run(false, WantFp8());
    // The single-device communicators of the same group coexist with the "0,1" one.
    Matrix m1{e.api, g, Layout{1, 0, {1}}, 9000};
    m1.Allreduce(DT::F32, DLPG_SUM, false, 100, false);
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

TEST(Cuda, TwoRanksTwoThreads) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunChild(200, [] {
    const dlpg_api_t *api = dlpg_test_api();
    int port = 0;
    dlpg_store_t *s0 = OpenServing(api, &port);
    std::vector<std::thread> ts;
    for (int r = 0; r < 2; r++)
      ts.emplace_back([&, r] {
        try {
          CT_CUDA(cudaSetDevice(r));
          dlpg_store_t *s = r == 0 ? s0 : OpenClient(api, port);
          dlpg_group_t *g = MakeGroup(api, s, r, 2, "t2");
          Matrix m{api, g, Layout{2, r, {r}}};
          m.Run(false, false);
          CT_OK(api, api->group_destroy(g));
          if (r) api->store_close(s);
        } catch (const Fatal &) {
        }
      });
    for (auto &t : ts) t.join();
    api->store_close(s0);
  }));
}

TEST(Cuda, RacingThreadsCreateOneCommunicator) {
  NEED_GPUS(1);
  // Four threads of one rank race on the first collective of the same device list; each
  // issues its own allreduce (world 1), and all must succeed over one communicator.
  EXPECT_NO_FAILURES(RunProcs(1, 1, 120, [](Env &e) {
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "race");
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
      ts.emplace_back([&, t] {
        try {
          CT_CUDA(cudaSetDevice(0));
          Matrix m{e.api, g, Layout{1, 0, {0}}, (uint64_t)(100 + t)};
          for (int i = 0; i < 5; i++) m.Allreduce(DT::F32, DLPG_SUM, false, 777, true);
        } catch (const Fatal &) {
        }
      });
    for (auto &t : ts) t.join();
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

TEST(Cuda, CpuAndCudaInterleaved) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 200, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "mix");
    Matrix m{e.api, g, Layout{2, e.rank, {e.rank}}};
    for (int it = 0; it < 3; it++) {
      float x[64];
      for (int j = 0; j < 64; j++) x[j] = (float)(e.rank + 1) * (float)(j + it);
      int64_t shape = 64;
      DLTensor t{};
      t.data = x;
      t.device = {kDLCPU, 0};
      t.ndim = 1;
      t.dtype = DTDl(DT::F32);
      t.shape = &shape;
      DLTensor *tp = &t;
      CT_OK(e.api, e.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr));
      for (int j = 0; j < 64; j++) CT_EXPECT(x[j] == 3.0f * (float)(j + it), "cpu allreduce " << j);
      m.Allreduce(DT::F32, DLPG_SUM, false, 1000, it % 2 == 0);
      dlpg_work_t *w = nullptr;
      CT_OK(e.api, e.api->barrier(g, &w));
      Wait(e.api, w);
    }
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

TEST(Cuda, OneThreadDrivesBothRanks) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunChild(120, [] {
    const dlpg_api_t *api = dlpg_test_api();
    int port = 0;
    dlpg_store_t *s0 = OpenServing(api, &port), *s1 = OpenClient(api, port);
    dlpg_group_t *g0 = MakeGroup(api, s0, 0, 2, "one"), *g1 = MakeGroup(api, s1, 1, 2, "one");
    const int64_t n = 4099;
    DevTensor a(0, DT::F32, n), b(1, DT::F32, n), r0(0, DT::F32, n), r1(1, DT::F32, n);
    for (int it = 0; it < 3; it++) {
      a.Upload(Data(DT::F32, DLPG_SUM, 50 + it, 0, n));
      b.Upload(Data(DT::F32, DLPG_SUM, 50 + it, 1, n));
      dlpg_work_t *w[4] = {};
      // The batch spans both groups: communicators of both ranks are created together.
      CT_OK(api, api->group_start(g0));
      CT_OK(api, api->send(g0, a.dl(), 1, 0, nullptr, &w[0]));
      CT_OK(api, api->recv(g1, r1.dl(), 0, 0, nullptr, &w[1]));
      CT_OK(api, api->send(g1, b.dl(), 0, 0, nullptr, &w[2]));
      CT_OK(api, api->recv(g0, r0.dl(), 1, 0, nullptr, &w[3]));
      CT_OK(api, api->group_end(g0));
      for (auto *x : w) Wait(api, x);
      CheckVec("recv on rank 1", DT::F32, DLPG_SUM, r1.Download(), Data(DT::F32, DLPG_SUM, 50 + it, 0, n));
      CheckVec("recv on rank 0", DT::F32, DLPG_SUM, r0.Download(), Data(DT::F32, DLPG_SUM, 50 + it, 1, n));
      // A collective of both ranks, also batched.
      DLTensor *ta = a.dl(), *tb = b.dl();
      CT_OK(api, api->group_start(g0));
      CT_OK(api, api->allreduce(g0, &ta, nullptr, 1, DLPG_SUM, nullptr, &w[0]));
      CT_OK(api, api->allreduce(g1, &tb, nullptr, 1, DLPG_SUM, nullptr, &w[1]));
      CT_OK(api, api->group_end(g0));
      Wait(api, w[0]), Wait(api, w[1]);
      std::vector<double> want((size_t)n);
      for (int64_t j = 0; j < n; j++)
        want[(size_t)j] = Value(DT::F32, DLPG_SUM, 50 + it, 0, j) + Value(DT::F32, DLPG_SUM, 50 + it, 1, j);
      CheckVec("batched allreduce rank 0", DT::F32, DLPG_SUM, a.Download(), want);
      CheckVec("batched allreduce rank 1", DT::F32, DLPG_SUM, b.Download(), want);
    }
    api->group_destroy(g0), api->group_destroy(g1);
    api->store_close(s1), api->store_close(s0);
  }));
}

TEST(Cuda, GraphCaptureReplay) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 200, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "graph");
    Layout L{2, e.rank, {e.rank}};
    Matrix m{e.api, g, L};
    m.Allreduce(DT::F32, DLPG_SUM, true, 256, false);  // creates the communicator
    const int64_t n = 65536;
    DevTensor x(e.rank, DT::F32, n);
    cudaStream_t s;
    CT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    DLTensor *tx = x.dl();
    void *sp = s;
    dlpg_work_t *w = nullptr;
    dlpg_status_t st = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, &sp, &w);
    std::string err = st == DLPG_OK ? "" : e.api->last_error();
    if (st == DLPG_OK) {
      // Captured work completes as enqueued.
      int done = 0;
      CT_EXPECT(e.api->work_test(w, &done) == DLPG_OK && done == 1, "captured work not done");
      CT_EXPECT(e.api->work_wait(w, 5) == DLPG_OK, e.api->last_error());
      e.api->work_free(w);
    }
    cudaError_t ce = cudaStreamEndCapture(s, &graph);
    CT_ASSERT(st == DLPG_OK, "allreduce under capture: " << err);
    CT_CUDA(ce);
    CT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; rep++) {
      x.Upload(Data(DT::F32, DLPG_SUM, 700 + rep, e.rank, n));
      CT_CUDA(cudaGraphLaunch(exec, s));
      CT_CUDA(cudaStreamSynchronize(s));
      std::vector<double> want((size_t)n);
      for (int64_t j = 0; j < n; j++)
        want[(size_t)j] = Value(DT::F32, DLPG_SUM, 700 + rep, 0, j) + Value(DT::F32, DLPG_SUM, 700 + rep, 1, j);
      CheckVec(CT_STR("graph replay " << rep), DT::F32, DLPG_SUM, x.Download(), want);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

// Informational timings (no assertion beyond correctness of the calls): per-call latency of
// an 8-byte allreduce issued 20 at a time between host waits, and the bus bandwidth of a
// 256 MiB allreduce, both medians of several repetitions after a warm-up.
TEST(Cuda, TwoProcessesTiming) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "timing");
    cudaStream_t s;
    CT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *sp = s;
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (int64_t n : {(int64_t)2, (int64_t)64 << 20}) {
      DevTensor x(e.rank, DT::F32, n);
      DLTensor *tx = x.dl();
      int calls = n == 2 ? 20 : 1;
      std::vector<double> per;
      for (int rep = 0; rep < 12; rep++) {
        CT_CUDA(cudaStreamSynchronize(s));
        auto t0 = std::chrono::steady_clock::now();
        dlpg_work_t *w = nullptr;
        for (int c = 0; c < calls; c++) {
          if (w) e.api->work_free(w);
          w = nullptr;
          CT_OK(e.api, e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, &sp, &w));
        }
        Wait(e.api, w);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep >= 2) per.push_back(dt / calls);
      }
      double m = median(per);
      if (e.rank == 0) {
        if (n == 2)
          fprintf(stderr, "timing: allreduce 8 B, 20 calls per host wait: %.1f us per call (median)\n", m * 1e6);
        else
          fprintf(stderr, "timing: allreduce 256 MiB: %.3f ms, bus bandwidth %.1f GB/s (median)\n", m * 1e3,
                  (double)x.bytes() / m / 1e9);  // 2 ranks: busbw factor 2(n-1)/n = 1
      }
    }
    cudaStreamDestroy(s);
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

}  // namespace
