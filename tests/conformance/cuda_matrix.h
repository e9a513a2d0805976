// Helpers shared by the CUDA conformance tests (test_cuda_ops.cc, test_cuda_faults.cc):
// GPU-count skips, a rank's device layout, group creation, host references on
// per-contribution random data, and the operation matrix each scenario runs. Inline, so
// each test file includes it freely.
#pragma once

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

inline dlpg_group_t *MakeGroup(const dlpg_api_t *api, dlpg_store_t *store, int rank, int world,
                        const char *name, double timeout_s = 60) {
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout_s;
  o.name = name;
  dlpg_group_t *g = nullptr;
  CT_OK(api, api->group_create(store, rank, world, &o, &g));
  return g;
}

inline void Wait(const dlpg_api_t *api, dlpg_work_t *w) {
  dlpg_status_t s = api->work_wait(w, 60);
  std::string err = s == DLPG_OK ? "" : api->last_error();
  api->work_free(w);
  CT_ASSERT(s == DLPG_OK, "work_wait -> " << api->status_name(s) << ": " << err);
}

// Exact but for avg, whose quotient rounds: within 1% (fp8: within its own rounding, an
// eighth, since a third is no fp8 number).
inline bool Close(DT dt, dlpg_reduce_op_t op, double got, double want) {
  if (op != DLPG_AVG) return got == want;
  double tol = DTIsFp8(dt) ? 0.125 : 1e-2;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Check the first mismatching element only, with context.
inline void CheckVec(const std::string &what, DT dt, dlpg_reduce_op_t op, const std::vector<double> &got,
              const std::vector<double> &want) {
  CT_ASSERT(got.size() == want.size(), what << ": size " << got.size() << " vs " << want.size());
  for (size_t j = 0; j < got.size(); j++)
    if (!Close(dt, op, got[j], want[j])) {
      CT_EXPECT(false, what << " (" << DTName(dt) << "): element " << j << " is " << got[j]
                            << ", expected " << want[j]);
      return;
    }
}

inline std::vector<double> Data(DT dt, dlpg_reduce_op_t op, uint64_t k, int c, int64_t n) {
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

inline bool WantFp8() { return Gpus().cc_major >= 9; }
