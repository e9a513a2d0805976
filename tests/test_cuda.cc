// CUDA conformance tests: CUDA tensors through the plugin's NCCL path, compared with
// references computed here on the host from per-contribution random data. Every scenario
// runs in forked children (the googletest process never initialises CUDA) under its own
// deadline; tests skip when the machine has fewer GPUs than they need.
#include <gtest/gtest.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "cuda_util.h"

using namespace cudat;

namespace {

#define NEED_GPUS(n)                                                               \
  do {                                                                             \
    if (Gpus().count < (n))                                                        \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << Gpus().count; \
  } while (0)

#define EXPECT_NO_FAILURES(fails)                                   \
  do {                                                              \
    auto f_ = (fails);                                              \
    for (auto &m_ : f_) ADD_FAILURE() << m_;                        \
    EXPECT_TRUE(f_.empty());                                        \
  } while (0)

// Where one rank stands: world size, its rank, the devices it drives (ndev contributions
// each; contribution index c = rank * ndev + i).
struct Layout {
  int world = 1, rank = 0;
  std::vector<int> devs;
  int ndev() const { return (int)devs.size(); }
  int ncontrib() const { return world * ndev(); }
};

dlpg_group_t *MakeGroup(const dlpg_api_t *api, dlpg_store_t *store, int rank, int world,
                        const char *name, double timeout_s = 60) {
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout_s;
  o.name = name;
  dlpg_group_t *g = nullptr;
  CT_OK(api, api->group_create(store, rank, world, &o, &g));
  return g;
}

void Wait(const dlpg_api_t *api, dlpg_work_t *w) {
  dlpg_status_t s = api->work_wait(w, 60);
  std::string err = s == DLPG_OK ? "" : api->last_error();
  api->work_free(w);
  CT_ASSERT(s == DLPG_OK, "work_wait -> " << api->status_name(s) << ": " << err);
}

bool Close(DT dt, dlpg_reduce_op_t op, double got, double want) {
  if (op != DLPG_AVG) return got == want;
  return std::fabs(got - want) <= 1e-2 * std::max(1.0, std::fabs(want));
}

// Check the first mismatching element only, with context.
void CheckVec(const std::string &what, DT dt, dlpg_reduce_op_t op, const std::vector<double> &got,
              const std::vector<double> &want) {
  CT_ASSERT(got.size() == want.size(), what << ": size " << got.size() << " vs " << want.size());
  for (size_t j = 0; j < got.size(); j++)
    if (!Close(dt, op, got[j], want[j])) {
      CT_EXPECT(false, what << " (" << DTName(dt) << "): element " << j << " is " << got[j]
                            << ", expected " << want[j]);
      return;
    }
}

std::vector<double> Data(DT dt, dlpg_reduce_op_t op, uint64_t k, int c, int64_t n) {
  std::vector<double> v((size_t)n);
  for (int64_t j = 0; j < n; j++) v[(size_t)j] = Value(dt, op, k, c, j);
  return v;
}

struct Streams {
  std::vector<cudaStream_t> s;
  explicit Streams(const Layout &L, bool own) : s(L.devs.size(), nullptr) {
    if (!own) return;
    for (size_t i = 0; i < L.devs.size(); i++) {
      CT_CUDA(cudaSetDevice(L.devs[i]));
      CT_CUDA(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    }
  }
  ~Streams() {
    for (auto x : s)
      if (x) cudaStreamDestroy(x);
  }
  void *const *arg() { return reinterpret_cast<void *const *>(s.data()); }
};

// ------------------------------------------------------------------ the op matrix

struct Matrix {
  const dlpg_api_t *api;
  dlpg_group_t *g;
  Layout L;
  uint64_t k = 1;  // case counter: every rank runs the same cases in the same order

  std::vector<DevTensor *> Alloc(DT dt, int64_t n) {
    std::vector<DevTensor *> v;
    for (int d : L.devs) v.push_back(new DevTensor(d, dt, n));
    return v;
  }
  static std::vector<DLTensor *> Dl(std::vector<DevTensor *> &v) {
    std::vector<DLTensor *> r;
    for (auto *t : v) r.push_back(t->dl());
    return r;
  }
  static void Free(std::vector<DevTensor *> &v) {
    for (auto *t : v) delete t;
    v.clear();
  }

  void Allreduce(DT dt, dlpg_reduce_op_t op, bool inplace, int64_t n, bool own_streams) {
    uint64_t kk = k++;
    int C = L.ncontrib();
    auto in = Alloc(dt, n), out = Alloc(dt, n);
    for (int i = 0; i < L.ndev(); i++) in[i]->Upload(Data(dt, op, kk, L.rank * L.ndev() + i, n));
    auto din = Dl(in), dout = Dl(out);
    Streams st(L, own_streams);
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->allreduce(g, din.data(), inplace ? nullptr : dout.data(), L.ndev(), op,
                              st.arg(), &w));
    Wait(api, w);
    std::vector<double> want((size_t)n), xs((size_t)C);
    for (int64_t j = 0; j < n; j++) {
      for (int c = 0; c < C; c++) xs[c] = Value(dt, op, kk, c, j);
      want[(size_t)j] = Reduce(dt, op, xs);
    }
    for (int i = 0; i < L.ndev(); i++)
      CheckVec(CT_STR("allreduce " << (inplace ? "in place" : "out of place") << " op " << op
                                   << " dev " << L.devs[i]),
               dt, op, (inplace ? in : out)[i]->Download(), want);
    Free(in), Free(out);
  }

  void Reduce1(DT dt, dlpg_reduce_op_t op, int root, bool inplace, int64_t n) {
    uint64_t kk = k++;
    int C = L.ncontrib();
    auto in = Alloc(dt, n), out = Alloc(dt, n);
    for (int i = 0; i < L.ndev(); i++) in[i]->Upload(Data(dt, op, kk, L.rank * L.ndev() + i, n));
    auto din = Dl(in), dout = Dl(out);
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->reduce(g, din.data(), inplace ? nullptr : dout.data(), L.ndev(), op, root,
                           nullptr, &w));
    Wait(api, w);
    if (L.rank != root) return Free(in), Free(out);
    std::vector<double> want((size_t)n), xs((size_t)C);
    for (int64_t j = 0; j < n; j++) {
      for (int c = 0; c < C; c++) xs[c] = Value(dt, op, kk, c, j);
      want[(size_t)j] = Reduce(dt, op, xs);
    }
    CheckVec(CT_STR("reduce root " << root << " op " << op), dt, op,
             (inplace ? in : out)[0]->Download(), want);
    Free(in), Free(out);
  }

  void ReduceScatter(DT dt, dlpg_reduce_op_t op, int64_t n) {
    uint64_t kk = k++;
    int C = L.ncontrib();
    auto in = Alloc(dt, n * C), out = Alloc(dt, n);
    for (int i = 0; i < L.ndev(); i++) in[i]->Upload(Data(dt, op, kk, L.rank * L.ndev() + i, n * C));
    auto din = Dl(in), dout = Dl(out);
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->reduce_scatter(g, din.data(), dout.data(), L.ndev(), op, nullptr, &w));
    Wait(api, w);
    std::vector<double> xs((size_t)C);
    for (int i = 0; i < L.ndev(); i++) {
      int me = L.rank * L.ndev() + i;
      std::vector<double> want((size_t)n);
      for (int64_t j = 0; j < n; j++) {
        for (int c = 0; c < C; c++) xs[c] = Value(dt, op, kk, c, me * n + j);
        want[(size_t)j] = Reduce(dt, op, xs);
      }
      CheckVec(CT_STR("reduce_scatter op " << op << " dev " << L.devs[i]), dt, op, out[i]->Download(), want);
    }
    Free(in), Free(out);
  }

  void Allgather(DT dt, int64_t n) {
    uint64_t kk = k++;
    int C = L.ncontrib();
    auto in = Alloc(dt, n), out = Alloc(dt, n * C);
    for (int i = 0; i < L.ndev(); i++) in[i]->Upload(Data(dt, DLPG_SUM, kk, L.rank * L.ndev() + i, n));
    auto din = Dl(in), dout = Dl(out);
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->allgather(g, din.data(), dout.data(), L.ndev(), nullptr, &w));
    Wait(api, w);
    std::vector<double> want;
    for (int c = 0; c < C; c++) {
      auto d = Data(dt, DLPG_SUM, kk, c, n);
      want.insert(want.end(), d.begin(), d.end());
    }
    for (int i = 0; i < L.ndev(); i++)
      CheckVec(CT_STR("allgather dev " << L.devs[i]), dt, DLPG_SUM, out[i]->Download(), want);
    Free(in), Free(out);
  }

  void Broadcast(DT dt, int root, bool inplace, int64_t n) {
    uint64_t kk = k++;
    auto in = Alloc(dt, n), out = Alloc(dt, n);
    for (int i = 0; i < L.ndev(); i++) in[i]->Upload(Data(dt, DLPG_SUM, kk, L.rank * L.ndev() + i, n));
    auto din = Dl(in), dout = Dl(out);
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->broadcast(g, din.data(), inplace ? nullptr : dout.data(), L.ndev(), root,
                              nullptr, &w));
    Wait(api, w);
    auto want = Data(dt, DLPG_SUM, kk, root * L.ndev(), n);
    for (int i = 0; i < L.ndev(); i++)
      CheckVec(CT_STR("broadcast root " << root << " dev " << L.devs[i]), dt, DLPG_SUM,
               (inplace ? in : out)[i]->Download(), want);
    Free(in), Free(out);
  }

  void Alltoall(DT dt, int64_t n) {
    uint64_t kk = k++;
    int W = L.world;
    DevTensor in(L.devs[0], dt, n * W), out(L.devs[0], dt, n * W);
    in.Upload(Data(dt, DLPG_SUM, kk, L.rank, n * W));
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->alltoall(g, in.dl(), out.dl(), nullptr, &w));
    Wait(api, w);
    std::vector<double> want;
    for (int i = 0; i < W; i++)
      for (int64_t j = 0; j < n; j++) want.push_back(Value(dt, DLPG_SUM, kk, i, L.rank * n + j));
    CheckVec("alltoall", dt, DLPG_SUM, out.Download(), want);
  }

  // Ranks exchange one tensor with every other rank inside one group_start/end batch.
  void SendRecv(DT dt, int64_t n) {
    uint64_t kk = k++;
    int W = L.world;
    DevTensor snd(L.devs[0], dt, n);
    std::vector<DevTensor *> rcv;
    snd.Upload(Data(dt, DLPG_SUM, kk, L.rank, n));
    std::vector<dlpg_work_t *> ws;
    CT_OK(api, api->group_start(g));
    for (int p = 0; p < W; p++) {
      if (p == L.rank) continue;
      dlpg_work_t *a = nullptr, *b = nullptr;
      rcv.push_back(new DevTensor(L.devs[0], dt, n));
      CT_OK(api, api->send(g, snd.dl(), p, 7, nullptr, &a));
      CT_OK(api, api->recv(g, rcv.back()->dl(), p, 7, nullptr, &b));
      ws.push_back(a), ws.push_back(b);
    }
    CT_OK(api, api->group_end(g));
    for (auto *w : ws) Wait(api, w);
    int idx = 0;
    for (int p = 0; p < W; p++) {
      if (p == L.rank) continue;
      CheckVec(CT_STR("recv from " << p), dt, DLPG_SUM, rcv[idx]->Download(), Data(dt, DLPG_SUM, kk, p, n));
      delete rcv[idx++];
    }
  }

  void Run(bool full, bool fp8) {
    std::vector<DT> rdt = {DT::F32, DT::F16, DT::BF16, DT::I32, DT::I64, DT::U8, DT::F64, DT::BOOL};
    if (fp8) rdt.push_back(DT::F8E4M3), rdt.push_back(DT::F8E5M2);
    std::vector<dlpg_reduce_op_t> ops = {DLPG_SUM, DLPG_PROD, DLPG_MIN, DLPG_MAX, DLPG_AVG};
    const int64_t n = 1031;
    for (DT dt : rdt)
      for (auto op : ops) {
        if (op == DLPG_AVG && !DTIsFloat(dt)) continue;
        if (!full && op != DLPG_SUM && op != DLPG_MAX) continue;
        Allreduce(dt, op, true, n, false);
        Allreduce(dt, op, false, n, true);
        ReduceScatter(dt, op, 257);
        Reduce1(dt, op, L.world - 1, false, n);
        if (full) Reduce1(dt, op, 0, true, n);
      }
    std::vector<DT> mdt = {DT::F32, DT::F16, DT::BF16, DT::I32, DT::I64, DT::U8, DT::F64,
                           DT::F8E4M3, DT::F8E5M2};
    for (DT dt : mdt) {
      Allgather(dt, 513);
      for (int root = 0; root < L.world; root++) Broadcast(dt, root, root % 2 == 0, n);
      if (L.ndev() == 1) Alltoall(dt, 129);
      if (L.ndev() == 1 && L.world > 1) SendRecv(dt, n);
    }
    // Zero elements still take part; a large tensor exercises NCCL's pipelined protocols.
    Allreduce(DT::F32, DLPG_SUM, false, 0, false);
    Allreduce(DT::F32, DLPG_SUM, true, 4 << 20, true);
  }
};

bool WantFp8() { return Gpus().cc_major >= 9; }

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

TEST(Cuda, MissingPeerTimesOut) {
  NEED_GPUS(1);
  // World 2 but only rank 0 exists: the first CUDA operation must fail with TIMEOUT within
  // the group's timeout (3 s), not hang.
  EXPECT_NO_FAILURES(RunProcs(1, 2, 60, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 2, "missing", 3);
    DevTensor x(0, DT::F32, 100);
    DLTensor *tx = x.dl();
    dlpg_work_t *w = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    dlpg_status_t s = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w);
    if (s == DLPG_OK) {
      s = e.api->work_wait(w, 0);
      e.api->work_free(w);
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CT_EXPECT(s == DLPG_ERR_TIMEOUT, "status " << e.api->status_name(s) << ": " << e.api->last_error());
    CT_EXPECT(dt < 20, "took " << dt << " s");
    e.api->group_destroy(g);
  }));
}

TEST(Cuda, AbortWhileWaiting) {
  NEED_GPUS(2);
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    CT_CUDA(cudaSetDevice(e.rank));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "abort", 15);
    Matrix m{e.api, g, Layout{2, e.rank, {e.rank}}};
    m.Allreduce(DT::F32, DLPG_SUM, false, 1000, false);  // both ranks: communicator ready
    int64_t v = 0;
    if (e.rank == 0) {
      // Rank 1 never joins this one: the kernel waits until the group is aborted.
      DevTensor x(0, DT::F32, 1 << 20);
      DLTensor *tx = x.dl();
      dlpg_work_t *w = nullptr;
      CT_OK(e.api, e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w));
      std::thread ab([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        e.api->group_abort(g);
      });
      dlpg_status_t s = e.api->work_wait(w, 30);
      ab.join();
      CT_EXPECT(s == DLPG_ERR_ABORTED, "work_wait -> " << e.api->status_name(s) << ": " << e.api->last_error());
      e.api->work_free(w);
      dlpg_work_t *w2 = nullptr;
      s = e.api->allreduce(g, &tx, nullptr, 1, DLPG_SUM, nullptr, &w2);
      if (s == DLPG_OK) s = e.api->work_wait(w2, 5), e.api->work_free(w2);
      CT_EXPECT(s == DLPG_ERR_ABORTED, "after abort: " << e.api->status_name(s));
      e.api->store_add(e.store, "abort/done", 1, &v);
    } else {
      for (int i = 0; i < 600 && v < 1; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        e.api->store_add(e.store, "abort/done", 0, &v);
      }
    }
    e.api->group_destroy(g);
  }));
}

TEST(Cuda, MismatchedDeviceCountsFailClearly) {
  NEED_GPUS(2);
  // Rank 0 drives one GPU, rank 1 two: the rendezvous notices, and both ranks fail with
  // INVALID_ARGUMENT naming the counts instead of hanging in NCCL's init.
  EXPECT_NO_FAILURES(RunProcs(2, 2, 90, [](Env &e) {
    std::vector<int> devs = e.rank == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
    CT_CUDA(cudaSetDevice(devs[0]));
    dlpg_group_t *g = MakeGroup(e.api, e.store, e.rank, 2, "mismatch", 20);
    std::vector<DevTensor *> ts;
    std::vector<DLTensor *> dl;
    for (int d : devs) ts.push_back(new DevTensor(d, DT::F32, 100)), dl.push_back(ts.back()->dl());
    dlpg_work_t *w = nullptr;
    dlpg_status_t s = e.api->allreduce(g, dl.data(), nullptr, (int)dl.size(), DLPG_SUM, nullptr, &w);
    std::string msg = s == DLPG_OK ? "" : e.api->last_error();
    if (s == DLPG_OK) {
      s = e.api->work_wait(w, 0);
      msg = e.api->last_error();
      e.api->work_free(w);
    }
    CT_EXPECT(s == DLPG_ERR_INVALID_ARGUMENT, e.api->status_name(s) << ": " << msg);
    CT_EXPECT(msg.find("rank 0 uses 1") != std::string::npos, msg);
    for (auto *t : ts) delete t;
    e.api->group_destroy(g);
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

TEST(Cuda, BitwiseIsUnsupported) {
  NEED_GPUS(1);
  EXPECT_NO_FAILURES(RunProcs(1, 1, 60, [](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, "bitwise");
    DevTensor x(0, DT::I32, 10);
    DLTensor *tx = x.dl();
    for (auto op : {DLPG_BAND, DLPG_BOR, DLPG_BXOR}) {
      dlpg_status_t s = e.api->allreduce(g, &tx, nullptr, 1, op, nullptr, nullptr);
      CT_EXPECT(s == DLPG_ERR_UNSUPPORTED, "op " << op << ": " << e.api->status_name(s));
    }
    CT_OK(e.api, e.api->group_destroy(g));
  }));
}

int CountFds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

TEST(Cuda, CreateUseDestroyCyclesLeakNothing) {
  NEED_GPUS(1);
  const char *env = getenv("DLPG_TEST_CYCLES");
  int cycles = env && atoi(env) > 0 ? atoi(env) : 200;
  EXPECT_NO_FAILURES(RunProcs(1, 1, 480, [cycles](Env &e) {
    CT_CUDA(cudaSetDevice(0));
    size_t free0 = 0, free1 = 0, total = 0;
    int fd0 = 0;
    for (int c = 0; c < cycles; c++) {
      if (c == 5) {
        CT_CUDA(cudaMemGetInfo(&free0, &total));
        fd0 = CountFds();
      }
      std::string name = "cyc" + std::to_string(c);
      dlpg_group_t *g = MakeGroup(e.api, e.store, 0, 1, name.c_str());
      Matrix m{e.api, g, Layout{1, 0, {0}}, (uint64_t)c};
      m.Allreduce(DT::F32, DLPG_SUM, false, 4096, c % 2 == 0);
      CT_OK(e.api, e.api->group_destroy(g));
    }
    CT_CUDA(cudaMemGetInfo(&free1, &total));
    int fd1 = CountFds();
    double lost_mib = ((double)free0 - (double)free1) / (1 << 20);
    fprintf(stderr, "cycles %d: GPU free memory change %.1f MiB, fds %d -> %d\n", cycles, -lost_mib, fd0, fd1);
    CT_EXPECT(lost_mib < 64, "GPU memory lost over " << cycles - 5 << " cycles: " << lost_mib << " MiB");
    CT_EXPECT(fd1 <= fd0 + 2, "open fds grew from " << fd0 << " to " << fd1);
  }));
}

}  // namespace
