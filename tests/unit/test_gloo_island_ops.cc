// White-box tests of the Gloo island (plugin/gloo), below the public API, the operations:
// contexts over the real TCP store on 127.0.0.1 (ranks are threads), every operation kind
// against references computed here on random per-rank data, the float16/bfloat16
// conversions, and the public API through core (sends and receives only run there: core
// issues them to the pairwise contexts; speed is measured by bench/cpu-quick.sh, not here).
// Links the plugin's objects (dlpg_obj), not libdlpg.so. Context lifecycle and failures are in
// gloo_island_ctx_test.cc; both build into gloo_island_test.
#include "gloo_island_util.h"

TEST(GlooIsland, AllreduceEveryDtypeAndOp) {
  const int n = 3;
  const size_t numel = 1000;  // not a multiple of 3 or of Gloo's segment sizes
  run_ranks(n, 30, [&](int r, dlpg__gloo_ctx_t *ctx) {
    uint32_t seed = 1;
    for (dlpg__dtype_t dt : kDtypes) {
      for (dlpg_reduce_op_t rop : ops_for(dt)) {
        for (int in_place = 0; in_place < 2; in_place++, seed++) {
          size_t es = dlpg__dtype_size(dt);
          std::vector<char> in(numel * es), out(numel * es, 0x5a);
          for (size_t i = 0; i < numel; i++) put(dt, in.data(), i, value(dt, r, i, seed));
          std::vector<char> in_copy = in;
          void *optr = in_place ? in.data() : out.data();
          dlpg__op_t op = make_op(DLPG__OP_ALLREDUCE, tensor(in.data(), numel, dt),
                                  tensor(optr, numel, dt));
          op.rop = rop;
          ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
          if (!in_place) {
            ASSERT_EQ(in, in_copy) << "input modified";
          }
          for (size_t i = 0; i < numel; i++) {
            std::vector<double> v;
            for (int k = 0; k < n; k++) v.push_back(value(dt, k, i, seed));
            double want = reduce_ref(dt, rop, v);
            if (rop == DLPG_AVG) want = avg_expected(dt, reduce_ref(dt, DLPG_SUM, v), n);
            else { std::vector<char> b(8); put(dt, b.data(), 0, want); want = get(dt, b.data(), 0); }
            double got = get(dt, optr, i);
            ASSERT_EQ(got, want) << dlpg__dtype_name(dt) << " " << dlpg__reduce_op_name(rop)
                                 << " in_place=" << in_place << " rank " << r << " i=" << i;
          }
        }
      }
    }
  });
}

TEST(GlooIsland, BroadcastReduceAllgatherReduceScatterAlltoall) {
  const int n = 3;
  // 4099 floats take Gloo's algorithms; 7 and 300 (alltoall: 3600 bytes) the small path.
  for (size_t m : {size_t(4099), size_t(7), size_t(300)})
  run_ranks(n, 30, [&](int r, dlpg__gloo_ctx_t *ctx) {
    const dlpg__dtype_t dt = DLPG__DT_FLOAT32;
    auto val = [](int rank, size_t i) { return (float)(rank * 100000 + (i * 37) % 1001) - 7.0f; };
    std::vector<float> in(m), out(m);
    for (size_t i = 0; i < m; i++) in[i] = val(r, i);
    // Broadcast from root 1, out of place; then in place from root 2.
    dlpg__op_t op = make_op(DLPG__OP_BROADCAST, tensor(in.data(), m, dt), tensor(out.data(), m, dt));
    op.root = 1;
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (size_t i = 0; i < m; i++) ASSERT_EQ(out[i], val(1, i));
    for (size_t i = 0; i < m; i++) ASSERT_EQ(in[i], val(r, i)) << "broadcast input modified";
    op = make_op(DLPG__OP_BROADCAST, tensor(in.data(), m, dt), tensor(in.data(), m, dt));
    op.root = 2;
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (size_t i = 0; i < m; i++) ASSERT_EQ(in[i], val(2, i));
    for (size_t i = 0; i < m; i++) in[i] = val(r, i);
    // Reduce (MAX) to root 0; non-roots keep their buffers.
    std::fill(out.begin(), out.end(), -1.0f);
    op = make_op(DLPG__OP_REDUCE, tensor(in.data(), m, dt), tensor(out.data(), m, dt));
    op.root = 0;
    op.rop = DLPG_MAX;
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (size_t i = 0; i < m; i++) {
      ASSERT_EQ(in[i], val(r, i));
      ASSERT_EQ(out[i], r == 0 ? val(n - 1, i) : -1.0f);
    }
    // Allgather, rank-major.
    std::vector<float> all(m * n);
    op = make_op(DLPG__OP_ALLGATHER, tensor(in.data(), m, dt), tensor(all.data(), m * n, dt));
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (int k = 0; k < n; k++)
      for (size_t i = 0; i < m; i++) ASSERT_EQ(all[k * m + i], val(k, i));
    // Reduce-scatter (SUM) of m*n elements: block r.
    std::vector<float> big(m * n), blk(m);
    for (size_t i = 0; i < m * n; i++) big[i] = val(r, i);
    op = make_op(DLPG__OP_REDUCE_SCATTER, tensor(big.data(), m * n, dt), tensor(blk.data(), m, dt));
    op.rop = DLPG_SUM;
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (size_t i = 0; i < m; i++) {
      float want = 0;
      for (int k = 0; k < n; k++) want += val(k, r * m + i);
      ASSERT_EQ(blk[i], want) << i;
    }
    // Alltoall: block j of rank i lands as block i of rank j.
    std::vector<float> a2a(m * n);
    op = make_op(DLPG__OP_ALLTOALL, tensor(big.data(), m * n, dt), tensor(a2a.data(), m * n, dt));
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (int k = 0; k < n; k++)
      for (size_t i = 0; i < m; i++) ASSERT_EQ(a2a[k * m + i], val(k, r * m + i));
    // Barrier and zero-element operations.
    op = make_op(DLPG__OP_BARRIER, tensor(nullptr, 0, dt), tensor(nullptr, 0, dt));
    ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
    for (dlpg__op_kind_t k : {DLPG__OP_ALLREDUCE, DLPG__OP_BROADCAST, DLPG__OP_REDUCE,
                              DLPG__OP_ALLGATHER, DLPG__OP_REDUCE_SCATTER, DLPG__OP_ALLTOALL}) {
      op = make_op(k, tensor(in.data(), 0, dt), tensor(out.data(), 0, dt));
      ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg__op_name(k) << ": " << dlpg_last_error();
    }
  });
}

TEST(GlooIsland, HalfAndBfloat16Conversions) {
  // Every half round-trips through float; float -> half agrees with the compiler's _Float16.
  for (uint32_t h = 0; h < 65536; h++) {
    float f = dlpg_gloo::half_to_float((uint16_t)h);
    _Float16 ref;
    uint16_t hb = (uint16_t)h;
    memcpy(&ref, &hb, 2);
    if (std::isnan(f)) { ASSERT_TRUE(std::isnan((float)ref)); continue; }
    ASSERT_EQ(f, (float)ref) << h;
    ASSERT_EQ(dlpg_gloo::float_to_half(f), h) << h;
  }
  std::mt19937 g(42);
  for (int i = 0; i < 1000000; i++) {
    uint32_t bits = g();
    float f;
    memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    _Float16 ref = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &ref, 2);
    ASSERT_EQ(dlpg_gloo::float_to_half(f), rb) << f;
  }
  EXPECT_EQ(dlpg_gloo::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(dlpg_gloo::bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(dlpg_gloo::float_to_bf16(1.00390625f), 0x3f80);  // halfway, even stays
  EXPECT_EQ(dlpg_gloo::float_to_bf16(1.01171875f), 0x3f82);  // halfway, odd rounds up
  EXPECT_TRUE(std::isnan(dlpg_gloo::bf16_to_float(dlpg_gloo::float_to_bf16(NAN))));
}

namespace {

DLTensor dl_cpu(void *data, int64_t *shape, DLDataType dt) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

// Rank n's group over a served store (rank 0 serves), through the public API; fn runs on
// one thread per rank.
void run_group_ranks(int n, double timeout_s, const char *name,
                     const std::function<void(int rank, dlpg_group_t *g)> &fn) {
  dlpg_store_t *server = nullptr;
  ASSERT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", timeout_s, &server), DLPG_OK)
      << dlpg_last_error();
  int port = 0;
  ASSERT_EQ(dlpg_store_port(server, &port), DLPG_OK);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++)
    th.emplace_back([&, r] {
      dlpg_store_t *s = server;
      if (r) {
        std::string url = "tcp://127.0.0.1:" + std::to_string(port);
        ASSERT_EQ(dlpg_store_open(url.c_str(), timeout_s, &s), DLPG_OK) << dlpg_last_error();
      }
      dlpg_group_options_t opt = DLPG_GROUP_OPTIONS_INIT;
      opt.timeout_s = timeout_s;
      opt.name = name;
      dlpg_group_t *g = nullptr;
      dlpg_status_t st = dlpg_group_create(s, r, n, &opt, &g);
      if (r) dlpg_store_close(s);
      ASSERT_EQ(st, DLPG_OK) << dlpg_last_error();
      fn(r, g);
      ASSERT_EQ(dlpg_group_destroy(g), DLPG_OK) << dlpg_last_error();
    });
  for (auto &t : th) t.join();
  dlpg_store_close(server);
}

void wait_all(const std::vector<dlpg_work_t *> &ws) {
  for (dlpg_work_t *w : ws) {
    EXPECT_EQ(dlpg_work_wait(w, 30), DLPG_OK) << dlpg_work_error(w);
    dlpg_work_free(w);
  }
}

}  // namespace

TEST(GlooIsland, SendRecvBatchRing) {
  // Sends and receives as they run: issued by core on the caller's thread to the pairwise
  // contexts (gloo/p2p.h), in dlpg_group_start/end batches.
  const int n = 4;
  run_group_ranks(n, 30, "ring", [&](int r, dlpg_group_t *g) {
    int64_t m = 100000;  // beyond the inline size: the acknowledged large path
    const DLDataType i64 = {kDLInt, 64, 1};
    std::vector<int64_t> to_next(m), to_prev(m), from_prev(m), from_next(m);
    for (int64_t i = 0; i < m; i++) {
      to_next[i] = r * 1000003 + i;
      to_prev[i] = -(r * 1000003 + i);
    }
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    DLTensor s1 = dl_cpu(to_next.data(), &m, i64), s2 = dl_cpu(to_prev.data(), &m, i64);
    DLTensor r1 = dl_cpu(from_prev.data(), &m, i64), r2 = dl_cpu(from_next.data(), &m, i64);
    std::vector<dlpg_work_t *> ws(4, nullptr);
    ASSERT_EQ(dlpg_group_start(g), DLPG_OK) << dlpg_last_error();
    // Receives first on even ranks, sends first on odd ones.
    for (int k = 0; k < 2; k++) {
      if ((k == 0) == (r % 2 == 0)) {
        ASSERT_EQ(dlpg_recv(g, &r1, prev, 5, nullptr, &ws[0]), DLPG_OK) << dlpg_last_error();
        ASSERT_EQ(dlpg_recv(g, &r2, next, 6, nullptr, &ws[1]), DLPG_OK) << dlpg_last_error();
      } else {
        ASSERT_EQ(dlpg_send(g, &s1, next, 5, nullptr, &ws[2]), DLPG_OK) << dlpg_last_error();
        ASSERT_EQ(dlpg_send(g, &s2, prev, 6, nullptr, &ws[3]), DLPG_OK) << dlpg_last_error();
      }
    }
    ASSERT_EQ(dlpg_group_end(g), DLPG_OK) << dlpg_last_error();
    wait_all(ws);
    for (int64_t i = 0; i < m; i++) {
      ASSERT_EQ(from_prev[i], prev * 1000003 + i);
      ASSERT_EQ(from_next[i], -(next * 1000003 + i));
    }
    // Zero-byte messages and a batch mixing sends and receives with a collective.
    int64_t zero = 0, dummy = 0;
    DLTensor z = dl_cpu(&dummy, &zero, i64);
    int64_t one = 1;
    float x = (float)r;
    DLTensor xt = dl_cpu(&x, &one, {kDLFloat, 32, 1});
    DLTensor *xp = &xt;
    std::vector<dlpg_work_t *> mixed;
    dlpg_work_t *w = nullptr;
    ASSERT_EQ(dlpg_group_start(g), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_allreduce(g, &xp, &xp, 1, DLPG_SUM, nullptr, &w), DLPG_OK) << dlpg_last_error();
    mixed.push_back(w);
    if (r == 0) {
      // Rank 0 sends to every other rank.
      for (int k = 1; k < n; k++) {
        ASSERT_EQ(dlpg_send(g, &z, k, 0, nullptr, &w), DLPG_OK) << dlpg_last_error();
        mixed.push_back(w);
      }
    } else {
      ASSERT_EQ(dlpg_recv(g, &z, 0, 0, nullptr, &w), DLPG_OK) << dlpg_last_error();
      mixed.push_back(w);
    }
    ASSERT_EQ(dlpg_group_end(g), DLPG_OK) << dlpg_last_error();
    wait_all(mixed);
    ASSERT_EQ(x, (float)(n * (n - 1) / 2));
  });
}

TEST(GlooIsland, PublicApiThroughCore) {
  // The same operations through the public API (core validates, its worker calls the island).
  const int n = 3;
  run_group_ranks(n, 20, "api", [&](int r, dlpg_group_t *g) {
    const DLDataType f32 = {kDLFloat, 32, 1};
    int64_t m = 777;
    std::vector<float> a(m), out(m);
    for (int64_t i = 0; i < m; i++) a[i] = (float)(r * 10 + i % 13);
    DLTensor in = dl_cpu(a.data(), &m, f32), ot = dl_cpu(out.data(), &m, f32);
    DLTensor *ip = &in, *op = &ot;
    ASSERT_EQ(dlpg_allreduce(g, &ip, &op, 1, DLPG_SUM, nullptr, nullptr), DLPG_OK) << dlpg_last_error();
    for (int64_t i = 0; i < m; i++) ASSERT_EQ(out[i], (float)(30 + 3 * (i % 13)));
    dlpg_work_t *w = nullptr;
    ASSERT_EQ(dlpg_broadcast(g, &ip, nullptr, 1, 2, nullptr, &w), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_work_wait(w, 20), DLPG_OK) << dlpg_work_error(w);
    dlpg_work_free(w);
    for (int64_t i = 0; i < m; i++) ASSERT_EQ(a[i], (float)(20 + i % 13));
    // A batched ring exchange.
    std::vector<float> snd(m, (float)r), rcv(m, -1.0f);
    DLTensor st = dl_cpu(snd.data(), &m, f32), rt = dl_cpu(rcv.data(), &m, f32);
    dlpg_work_t *ws = nullptr, *wr = nullptr;
    ASSERT_EQ(dlpg_group_start(g), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_recv(g, &rt, (r + n - 1) % n, 3, nullptr, &wr), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_send(g, &st, (r + 1) % n, 3, nullptr, &ws), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_group_end(g), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_work_wait(wr, 20), DLPG_OK) << dlpg_work_error(wr);
    ASSERT_EQ(dlpg_work_wait(ws, 20), DLPG_OK) << dlpg_work_error(ws);
    dlpg_work_free(wr);
    dlpg_work_free(ws);
    for (int64_t i = 0; i < m; i++) ASSERT_EQ(rcv[i], (float)((r + n - 1) % n));
    ASSERT_EQ(dlpg_barrier(g, nullptr), DLPG_OK) << dlpg_last_error();
  });
}

TEST(GlooIsland, ReduceScatterRingDtypes) {
  for (int n : {1, 2, 4}) {
    run_ranks(n, 30, [&](int r, dlpg__gloo_ctx_t *ctx) {
      const size_t b = 1237;
      uint32_t seed = 900;
      for (dlpg__dtype_t dt : {DLPG__DT_FLOAT16, DLPG__DT_INT32, DLPG__DT_FLOAT64, DLPG__DT_BOOL}) {
        for (dlpg_reduce_op_t rop : ops_for(dt)) {
          seed++;
          size_t es = dlpg__dtype_size(dt);
          std::vector<char> in(b * n * es), out(b * es);
          for (size_t i = 0; i < b * n; i++) put(dt, in.data(), i, value(dt, r, i, seed));
          dlpg__op_t op = make_op(DLPG__OP_REDUCE_SCATTER, tensor(in.data(), b * n, dt),
                                  tensor(out.data(), b, dt));
          op.rop = rop;
          ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
          for (size_t i = 0; i < b; i++) {
            std::vector<double> v;
            for (int k = 0; k < n; k++) v.push_back(value(dt, k, r * b + i, seed));
            double want = rop == DLPG_AVG ? avg_expected(dt, reduce_ref(dt, DLPG_SUM, v), n)
                                          : reduce_ref(dt, rop, v);
            ASSERT_EQ(get(dt, out.data(), i), want)
                << "n=" << n << " " << dlpg__dtype_name(dt) << " " << dlpg__reduce_op_name(rop);
          }
        }
      }
    });
  }
}

