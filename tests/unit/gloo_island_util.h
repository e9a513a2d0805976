// Helpers shared by the Gloo island's white-box tests (gloo_island_ops_test.cc,
// gloo_island_ctx_test.cc): ranks as threads over the real TCP store, op and tensor
// builders, typed element access, and the references the results are compared with.
// Inline, so each test file includes it freely.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include "../conformance/time_scale.h"
#include "gloo/c_headers.h"
#include "gloo/ctx.h"
#include "gloo/p2p.h"
#include "gloo/reduce_fns.h"

using Clock = std::chrono::steady_clock;

// The group's mesh as the backend makes it: the group's state (backend.c's state_create),
// then its mesh at the first collective (the worker's issue). On failure *gg is still set
// (destroy it) and *ctx is NULL.
inline dlpg_status_t gloo_mesh(dlpg_store_t *s, const char *name, int rank, int size,
                               double timeout_s, dlpg__gloo_group_t **gg, dlpg__gloo_ctx_t **ctx) {
  *gg = nullptr;
  *ctx = nullptr;
  dlpg_status_t st = dlpg__gloo_group_create(s, name, rank, size, timeout_s, gg);
  if (st != DLPG_OK) return st;
  return dlpg__gloo_group_mesh(*gg, ctx);
}

// Rank 0 serves a store on an ephemeral port; each rank gets a client and its group's Gloo
// mesh (group name name). fn runs on one thread per rank; its failures are gtest failures
// of that thread.
inline void run_ranks(int n, double timeout_s,
               const std::function<void(int rank, dlpg__gloo_ctx_t *ctx)> &fn,
               const char *name = "t") {
  dlpg_store_t *server = nullptr;
  ASSERT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", timeout_s, &server), DLPG_OK)
      << dlpg_last_error();
  int port = 0;
  ASSERT_EQ(dlpg_store_port(server, &port), DLPG_OK);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r] {
      dlpg_store_t *s = server;
      if (r != 0) {
        std::string url = "tcp://127.0.0.1:" + std::to_string(port);
        ASSERT_EQ(dlpg_store_open(url.c_str(), timeout_s, &s), DLPG_OK) << dlpg_last_error();
      }
      dlpg__gloo_group_t *gg = nullptr;
      dlpg__gloo_ctx_t *ctx = nullptr;
      dlpg_status_t st = gloo_mesh(s, name, r, n, timeout_s, &gg, &ctx);
      // Every rank's context is complete before any rank acts: a rank that closed its
      // connections right away could otherwise fail a peer still inside the rendezvous.
      if (st == DLPG_OK) {
        const std::string up = std::string(name) + "/ctx-up";
        int64_t v = 0;
        dlpg_store_add(s, up.c_str(), 1, &v);
        for (double waited = 0; v < n && waited < timeout_s; waited += 0.005) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          dlpg_store_add(s, up.c_str(), 0, &v);
        }
      }
      if (r != 0) dlpg_store_close(s);  // the group's state holds its own reference
      if (st != DLPG_OK) dlpg__gloo_group_destroy(gg);
      ASSERT_EQ(st, DLPG_OK) << dlpg_last_error();
      fn(r, ctx);
      dlpg__gloo_group_destroy(gg);
    });
  }
  for (auto &t : th) t.join();
  dlpg_store_close(server);
}

inline dlpg__tensor_t tensor(void *ptr, int64_t numel, dlpg__dtype_t dt) {
  dlpg__tensor_t t;
  memset(&t, 0, sizeof t);
  t.ptr = ptr;
  t.numel = numel;
  t.nbytes = static_cast<size_t>(numel) * dlpg__dtype_size(dt);
  t.dtype = dt;
  t.device_type = 1;
  return t;
}

inline dlpg__op_t make_op(dlpg__op_kind_t kind, dlpg__tensor_t in, dlpg__tensor_t out) {
  dlpg__op_t op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  op.ntensors = kind == DLPG__OP_BARRIER ? 0 : 1;
  op.in[0] = in;
  op.out[0] = out;
  op.in_place = in.ptr == out.ptr;
  return op;
}

inline dlpg_status_t run1(dlpg__gloo_ctx_t *ctx, dlpg__op_t *op) {
  dlpg__op_t *ops[1] = {op};
  return dlpg__gloo_run(ctx, ops, 1);
}

// Typed element access through double (test values are small integers, exact everywhere).
inline void put(dlpg__dtype_t dt, void *p, size_t i, double v) {
  switch (dt) {
    case DLPG__DT_INT8: static_cast<int8_t *>(p)[i] = (int8_t)v; break;
    case DLPG__DT_INT16: static_cast<int16_t *>(p)[i] = (int16_t)v; break;
    case DLPG__DT_INT32: static_cast<int32_t *>(p)[i] = (int32_t)v; break;
    case DLPG__DT_INT64: static_cast<int64_t *>(p)[i] = (int64_t)v; break;
    case DLPG__DT_UINT8: static_cast<uint8_t *>(p)[i] = (uint8_t)v; break;
    case DLPG__DT_UINT16: static_cast<uint16_t *>(p)[i] = (uint16_t)v; break;
    case DLPG__DT_UINT32: static_cast<uint32_t *>(p)[i] = (uint32_t)v; break;
    case DLPG__DT_UINT64: static_cast<uint64_t *>(p)[i] = (uint64_t)v; break;
    case DLPG__DT_FLOAT16: static_cast<uint16_t *>(p)[i] = dlpg_gloo::float_to_half((float)v); break;
    case DLPG__DT_BFLOAT16: static_cast<uint16_t *>(p)[i] = dlpg_gloo::float_to_bf16((float)v); break;
    case DLPG__DT_FLOAT32: static_cast<float *>(p)[i] = (float)v; break;
    case DLPG__DT_FLOAT64: static_cast<double *>(p)[i] = v; break;
    case DLPG__DT_BOOL: static_cast<uint8_t *>(p)[i] = v != 0; break;
    default: break;
  }
}
inline double get(dlpg__dtype_t dt, const void *p, size_t i) {
  switch (dt) {
    case DLPG__DT_INT8: return static_cast<const int8_t *>(p)[i];
    case DLPG__DT_INT16: return static_cast<const int16_t *>(p)[i];
    case DLPG__DT_INT32: return static_cast<const int32_t *>(p)[i];
    case DLPG__DT_INT64: return (double)static_cast<const int64_t *>(p)[i];
    case DLPG__DT_UINT8: return static_cast<const uint8_t *>(p)[i];
    case DLPG__DT_UINT16: return static_cast<const uint16_t *>(p)[i];
    case DLPG__DT_UINT32: return static_cast<const uint32_t *>(p)[i];
    case DLPG__DT_UINT64: return (double)static_cast<const uint64_t *>(p)[i];
    case DLPG__DT_FLOAT16: return dlpg_gloo::half_to_float(static_cast<const uint16_t *>(p)[i]);
    case DLPG__DT_BFLOAT16: return dlpg_gloo::bf16_to_float(static_cast<const uint16_t *>(p)[i]);
    case DLPG__DT_FLOAT32: return static_cast<const float *>(p)[i];
    case DLPG__DT_FLOAT64: return static_cast<const double *>(p)[i];
    case DLPG__DT_BOOL: return static_cast<const uint8_t *>(p)[i];
    default: return NAN;
  }
}

inline bool is_float(dlpg__dtype_t dt) {
  return dt == DLPG__DT_FLOAT16 || dt == DLPG__DT_BFLOAT16 || dt == DLPG__DT_FLOAT32 ||
         dt == DLPG__DT_FLOAT64;
}
inline bool is_signed(dlpg__dtype_t dt) { return dt <= DLPG__DT_INT64 || is_float(dt); }

// Rank r's value i: small integers (bool: 0/1; unsigned: 0..5, so products stay in range).
inline double value(dlpg__dtype_t dt, int r, size_t i, uint32_t seed) {
  // A cheap integer hash (splitmix64) of (seed, rank, index).
  uint64_t z = (static_cast<uint64_t>(seed) << 40) ^ (static_cast<uint64_t>(r) << 32) ^ i;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  if (dt == DLPG__DT_BOOL) return static_cast<double>(z % 2);
  if (is_signed(dt)) return static_cast<double>(static_cast<int>(z % 11) - 5);
  return static_cast<double>(z % 6);
}

inline double reduce_ref(dlpg__dtype_t dt, dlpg_reduce_op_t op, const std::vector<double> &v) {
  double acc = v[0];
  for (size_t k = 1; k < v.size(); k++) {
    double b = v[k];
    switch (op) {
      case DLPG_SUM: case DLPG_AVG: acc = dt == DLPG__DT_BOOL ? (acc || b) : acc + b; break;
      case DLPG_PROD: acc = dt == DLPG__DT_BOOL ? (acc && b) : acc * b; break;
      case DLPG_MIN: acc = std::min(acc, b); break;
      case DLPG_MAX: acc = std::max(acc, b); break;
      case DLPG_BAND: acc = (double)((int64_t)acc & (int64_t)b); break;
      case DLPG_BOR: acc = (double)((int64_t)acc | (int64_t)b); break;
      case DLPG_BXOR: acc = dt == DLPG__DT_BOOL ? (double)((acc != 0) != (b != 0))
                                                 : (double)((int64_t)acc ^ (int64_t)b); break;
      case DLPG_PREMUL_SUM: acc = acc + b; break;  // of inputs already multiplied
    }
  }
  if (op == DLPG_AVG) acc /= (double)v.size();
  return acc;
}

// The AVG result as the island computes it: sum in the dtype, divide in float/double.
inline double avg_expected(dlpg__dtype_t dt, double sum, int n) {
  std::vector<char> b(8);
  put(dt, b.data(), 0, sum);
  double s = get(dt, b.data(), 0);
  if (dt == DLPG__DT_FLOAT64) put(dt, b.data(), 0, s / n);
  else put(dt, b.data(), 0, (double)((float)s / (float)n));
  return get(dt, b.data(), 0);
}

const dlpg__dtype_t kDtypes[] = {
    DLPG__DT_INT8, DLPG__DT_INT16, DLPG__DT_INT32, DLPG__DT_INT64, DLPG__DT_UINT8,
    DLPG__DT_UINT16, DLPG__DT_UINT32, DLPG__DT_UINT64, DLPG__DT_FLOAT16, DLPG__DT_BFLOAT16,
    DLPG__DT_FLOAT32, DLPG__DT_FLOAT64, DLPG__DT_BOOL};

inline std::vector<dlpg_reduce_op_t> ops_for(dlpg__dtype_t dt) {
  std::vector<dlpg_reduce_op_t> v = {DLPG_SUM, DLPG_PROD, DLPG_MIN, DLPG_MAX};
  if (is_float(dt)) v.push_back(DLPG_AVG);
  else { v.push_back(DLPG_BAND); v.push_back(DLPG_BOR); v.push_back(DLPG_BXOR); }
  return v;
}
