// The rooted and uneven collectives (dlpg_gather, dlpg_scatter, dlpg_allgatherv,
// dlpg_alltoallv, dlpg_reduce_scatter_v) on CUDA tensors, against references computed here
// from the same per-rank random data (VMatrix::Run): random counts (zero blocks included,
// rank 0's four times larger), every root, packed (NULL) and explicit displacements with gaps
// (which must keep the allocation's 0xEE bytes), even counts and uneven ones, reduce ops sum,
// max, avg and premul_sum, the caller's own stream, and a batch of several of them. Used by
// test_cuda_vcoll (the NCCL path) and test_cuda_ipc (ranks sharing a GPU).
#pragma once

#include "cuda_matrix.h"

namespace vcoll {


inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A count every rank computes alike for case k and slot (a, b): zero one time in four,
// else 1..scale, four times larger when a is rank 0 (the skew); all `even` when even > 0.
inline int64_t CountOf(uint64_t k, int a, int b, int64_t scale, int64_t even) {
  if (even > 0) return even;
  uint64_t h = Mix64(Mix64(Mix64(k) ^ (uint64_t)a) ^ ((uint64_t)b << 20));
  int64_t c = (h & 3u) == 0 ? 0 : 1 + (int64_t)((h >> 8) % (uint64_t)scale);
  return a == 0 ? 4 * c : c;
}

// Displacements of blocks counts[0..W): packed, or with a gap of 1 + r elements before
// block r. Returns the end (the tensor's size, plus 3 trailing elements with gaps).
inline int64_t Displs(const std::vector<int64_t> &counts, bool gaps, std::vector<int64_t> *d) {
  d->assign(counts.size(), 0);
  int64_t at = 0;
  for (size_t r = 0; r < counts.size(); r++) {
    if (gaps) at += 1 + (int64_t)r;
    (*d)[r] = at;
    at += counts[r];
  }
  return gaps ? at + 3 : at;
}

inline std::vector<uint8_t> Raw(DevTensor &t) {
  std::vector<uint8_t> b(t.bytes());
  CT_CUDA(cudaSetDevice(t.dev));
  CT_CUDA(cudaMemcpy(b.data(), t.ptr, b.size(), cudaMemcpyDeviceToHost));
  return b;
}

// Expected bytes of an output: the allocation's 0xEE fill, with blocks written over it.
struct Want {
  DT dt;
  std::vector<uint8_t> b;
  Want(DT d, int64_t n) : dt(d), b((size_t)n * DTSize(d), 0xEE) {}
  void Put(int64_t at, const std::vector<double> &v) {
    auto e = Encode(dt, v);
    std::copy(e.begin(), e.end(), b.begin() + (ptrdiff_t)((size_t)at * DTSize(dt)));
  }
};

inline void CheckRaw(const std::string &what, DT dt, const std::vector<uint8_t> &got,
              const std::vector<uint8_t> &want) {
  CT_ASSERT(got.size() == want.size(), what << ": " << got.size() << " bytes, expected " << want.size());
  for (size_t j = 0; j < got.size(); j++)
    if (got[j] != want[j]) {
      CT_EXPECT(false, what << " (" << DTName(dt) << "): byte " << j << " (element "
                            << j / DTSize(dt) << ") is " << (int)got[j] << ", expected "
                            << (int)want[j]);
      return;
    }
}

inline std::vector<double> Slice(const std::vector<double> &v, int64_t at, int64_t n) {
  return std::vector<double>(v.begin() + at, v.begin() + at + n);
}

struct VMatrix {
  const dlpg_api_t *api;
  dlpg_group_t *g;
  int W, me, dev;
  uint64_t k = 1;  // case counter: every rank runs the same cases in the same order
  cudaStream_t stream = nullptr;  // nullptr: the device's default stream

  void Finish(dlpg_work_t *w) { Wait(api, w); }

  void Gather(DT dt, int64_t n, int root) {
    uint64_t kk = k++;
    DevTensor in(dev, dt, n), out(dev, dt, n * W);
    in.Upload(Data(dt, DLPG_SUM, kk, me, n));
    dlpg_work_t *w = nullptr;
    // Ranks other than root pass no output.
    CT_OK(api, api->gather(g, in.dl(), me == root ? out.dl() : nullptr, root, stream, &w));
    Finish(w);
    Want want(dt, n * W);
    if (me == root)
      for (int r = 0; r < W; r++) want.Put(r * n, Data(dt, DLPG_SUM, kk, r, n));
    CheckRaw(CT_STR("gather root " << root << " n " << n), dt, Raw(out), want.b);
  }

  void Scatter(DT dt, int64_t n, int root) {
    uint64_t kk = k++;
    DevTensor in(dev, dt, n * W), out(dev, dt, n);
    auto all = Data(dt, DLPG_SUM, kk, root, n * W);
    if (me == root) in.Upload(all);
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->scatter(g, me == root ? in.dl() : nullptr, out.dl(), root, stream, &w));
    Finish(w);
    Want want(dt, n);
    want.Put(0, Slice(all, me * n, n));
    CheckRaw(CT_STR("scatter root " << root << " n " << n), dt, Raw(out), want.b);
  }

  void Allgatherv(DT dt, int64_t even, bool gaps) {
    uint64_t kk = k++;
    std::vector<int64_t> counts(W), displs;
    for (int r = 0; r < W; r++) counts[r] = CountOf(kk, r, 0, 300, even);
    int64_t n = Displs(counts, gaps, &displs);
    DevTensor in(dev, dt, counts[me]), out(dev, dt, n);
    in.Upload(Data(dt, DLPG_SUM, kk, me, counts[me]));
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->allgatherv(g, in.dl(), out.dl(), counts.data(), gaps ? displs.data() : nullptr,
                               stream, &w));
    Finish(w);
    Want want(dt, n);
    for (int r = 0; r < W; r++) want.Put(displs[r], Data(dt, DLPG_SUM, kk, r, counts[r]));
    CheckRaw(CT_STR("allgatherv even " << even << " gaps " << gaps), dt, Raw(out), want.b);
  }

  void Alltoallv(DT dt, bool gaps) {
    uint64_t kk = k++;
    // S(i, j): what rank i sends rank j; every rank derives every rank's layout.
    auto send_of = [&](int i, std::vector<int64_t> *c, std::vector<int64_t> *d) {
      c->resize(W);
      for (int j = 0; j < W; j++) (*c)[j] = CountOf(kk, i, j, 200, 0);
      return Displs(*c, gaps, d);
    };
    std::vector<int64_t> sc, sd, rc(W), rd;
    int64_t nin = send_of(me, &sc, &sd);
    for (int i = 0; i < W; i++) rc[i] = CountOf(kk, i, me, 200, 0);
    int64_t nout = Displs(rc, gaps, &rd);
    DevTensor in(dev, dt, nin), out(dev, dt, nout);
    in.Upload(Data(dt, DLPG_SUM, kk, me, nin));
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->alltoallv(g, in.dl(), sc.data(), gaps ? sd.data() : nullptr, out.dl(),
                              rc.data(), gaps ? rd.data() : nullptr, stream, &w));
    Finish(w);
    Want want(dt, nout);
    for (int i = 0; i < W; i++) {
      std::vector<int64_t> c, d;
      int64_t ni = send_of(i, &c, &d);
      want.Put(rd[i], Slice(Data(dt, DLPG_SUM, kk, i, ni), d[me], c[me]));
    }
    CheckRaw(CT_STR("alltoallv gaps " << gaps), dt, Raw(out), want.b);
  }

  void ReduceScatterV(DT dt, dlpg_reduce_op_t op, int64_t even, bool gaps, double scalar = 0.5) {
    uint64_t kk = k++;
    std::vector<int64_t> counts(W), displs;
    for (int r = 0; r < W; r++) counts[r] = CountOf(kk, r, 1, 300, even);
    int64_t n = Displs(counts, gaps, &displs);
    // Data drawn as for sum (quarters): premul_sum by 0.5 and avg stay exact enough.
    dlpg_reduce_op_t vop = op == DLPG_PREMUL_SUM ? DLPG_SUM : op;
    DevTensor in(dev, dt, n), out(dev, dt, counts[me]);
    in.Upload(Data(dt, vop, kk, me, n));
    dlpg_reduce_desc_t d = {sizeof d, op, op == DLPG_PREMUL_SUM ? scalar : 0.0};
    dlpg_work_t *w = nullptr;
    CT_OK(api, api->reduce_scatter_v(g, in.dl(), out.dl(), counts.data(),
                                     gaps ? displs.data() : nullptr, &d, stream, &w));
    Finish(w);
    std::vector<double> want((size_t)counts[me]), xs((size_t)W);
    for (int64_t j = 0; j < counts[me]; j++) {
      for (int r = 0; r < W; r++) {
        xs[(size_t)r] = Value(dt, vop, kk, r, displs[me] + j);
        if (op == DLPG_PREMUL_SUM) xs[(size_t)r] *= scalar;
      }
      want[(size_t)j] = Reduce(dt, op == DLPG_PREMUL_SUM ? DLPG_SUM : op, xs);
    }
    CheckVec(CT_STR("reduce_scatter_v op " << op << " even " << even << " gaps " << gaps), dt,
             op, out.Download(), want);
  }

  // Several of them in one dlpg_group_start/end batch (one NCCL group).
  void Batch(DT dt) {
    uint64_t kk = k++;
    const int64_t n = 77;
    std::vector<int64_t> counts(W);
    for (int r = 0; r < W; r++) counts[r] = CountOf(kk, r, 2, 100, 0);
    int64_t total = 0;
    for (auto c : counts) total += c;
    DevTensor gin(dev, dt, n), gout(dev, dt, n * W), vin(dev, dt, counts[me]), vout(dev, dt, total);
    gin.Upload(Data(dt, DLPG_SUM, kk, me, n));
    vin.Upload(Data(dt, DLPG_SUM, kk, 100 + me, counts[me]));
    dlpg_work_t *w[2] = {};
    CT_OK(api, api->group_start(g));
    CT_OK(api, api->gather(g, gin.dl(), gout.dl(), 0, stream, &w[0]));
    CT_OK(api, api->allgatherv(g, vin.dl(), vout.dl(), counts.data(), nullptr, stream, &w[1]));
    CT_OK(api, api->group_end(g));
    Finish(w[0]), Finish(w[1]);
    Want wg(dt, n * W), wv(dt, total);
    int64_t at = 0;
    for (int r = 0; r < W; r++) {
      if (me == 0) wg.Put(r * n, Data(dt, DLPG_SUM, kk, r, n));
      wv.Put(at, Data(dt, DLPG_SUM, kk, 100 + r, counts[r]));
      at += counts[r];
    }
    CheckRaw("batched gather", dt, Raw(gout), wg.b);
    CheckRaw("batched allgatherv", dt, Raw(vout), wv.b);
  }

  void Run() {
    for (DT dt : {DT::F32, DT::BF16, DT::I64, DT::U8, DT::F64, DT::F8E4M3}) {
      for (int root = 0; root < W; root++) {
        Gather(dt, 129, root);
        Scatter(dt, 129, root);
      }
      Gather(dt, 0, W - 1);  // zero elements still take part
      for (bool gaps : {false, true}) {
        Allgatherv(dt, 0, gaps);
        Alltoallv(dt, gaps);
      }
      Allgatherv(dt, 65, false);  // even and packed: one ncclAllGather
    }
    for (DT dt : {DT::F32, DT::BF16, DT::I32, DT::F64})
      for (auto op : {DLPG_SUM, DLPG_MAX})
        for (bool gaps : {false, true}) ReduceScatterV(dt, op, 0, gaps);
    ReduceScatterV(DT::F32, DLPG_SUM, 257, false);  // even and packed: one ncclReduceScatter
    ReduceScatterV(DT::F32, DLPG_AVG, 0, true);
    ReduceScatterV(DT::F32, DLPG_AVG, 64, false);
    ReduceScatterV(DT::F32, DLPG_PREMUL_SUM, 0, true);
    ReduceScatterV(DT::BF16, DLPG_PREMUL_SUM, 0, false);
    ReduceScatterV(DT::F64, DLPG_PREMUL_SUM, 33, false);
    Batch(DT::F32);
    // The caller's own stream, then a large skewed exchange through NCCL's pipelined path.
    CT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Alltoallv(DT::F32, true);
    ReduceScatterV(DT::F32, DLPG_SUM, 0, true);
    Allgatherv(DT::F32, 1 << 20, false);
    Allgatherv(DT::BF16, 0, true);
    CT_CUDA(cudaStreamDestroy(stream));
    stream = nullptr;
  }
};

}  // namespace vcoll
