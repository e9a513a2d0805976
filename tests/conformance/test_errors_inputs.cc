// The bad-input matrix of dlpg.h ("Tensors", "Status and errors") for every operation:
// each bad call must return the right status AND leave a message (dlpg_last_error) that
// names the function and the argument; none may crash or hang. Plus status names,
// versions, build info and the function table. Peers that disagree are in
// test_errors_peers.cc; both build into test_errors.
#include <dlfcn.h>

#include <initializer_list>
#include <thread>
#include <sstream>

#include "harness.h"

using namespace dlpgt;

namespace {

// The argument names a message may use for the group handle.
#define GROUP_ARG {"group", " g ", " g:", "g is", "g ==", "g =", "'g'", "`g`", "(g)", "g NULL", "g)"}

// got must be exactly want (the status dlpg.h decides for the case), with a message that
// names the function, at least one of `args` (the argument's possible names) and every string
// of `all` (the argument and the offending value), whatever the plugin's wording.
void ExpectErr(const dlpg_api_t *api, dlpg_status_t got, dlpg_status_t want, const char *fn,
               std::initializer_list<const char *> args, const std::string &what,
               std::initializer_list<std::string> all = {}) {
  std::string msg = got == DLPG_OK ? "" : api->last_error();
  EXPECT_EQ(got, want) << fn << " " << what << ": got " << api->status_name(got) << ", want "
                       << api->status_name(want) << " (message: " << msg << ")";
  if (got == DLPG_OK) return;
  EXPECT_FALSE(msg.empty()) << fn << " " << what << ": empty dlpg_last_error()";
  EXPECT_NE(msg.find(fn), std::string::npos)
      << fn << " " << what << ": message does not name the function: \"" << msg << "\"";
  if (args.size()) {
    bool named = false;
    for (const char *a : args) named = named || msg.find(a) != std::string::npos;
    std::ostringstream al;
    for (const char *a : args) al << "'" << a << "' ";
    EXPECT_TRUE(named) << fn << " " << what << ": message names none of " << al.str() << ": \""
                       << msg << "\"";
  }
  for (const std::string &a : all)
    EXPECT_NE(msg.find(a), std::string::npos)
        << fn << " " << what << ": message lacks \"" << a << "\": \"" << msg << "\"";
}

const auto INV = DLPG_ERR_INVALID_ARGUMENT;
const auto UNS = DLPG_ERR_UNSUPPORTED;

// An array operation under test with its valid shapes at world size ws.
struct ArrOp {
  const char *fn;
  bool reduces, rooted, out_may_be_null;
  int64_t in_numel, out_numel;  // valid sizes
  std::function<dlpg_status_t(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                              dlpg_reduce_op_t, int)>
      call;
};

std::vector<ArrOp> ArrOps(const dlpg_api_t *api, int ws) {
  const int64_t k = 8;
  return {
      {"dlpg_allreduce", true, false, true, k, k,
       [api](dlpg_group_t *g, DLTensor *const *i, DLTensor *const *o, int n, dlpg_reduce_op_t op,
             int) { return api->allreduce(g, i, o, n, op, nullptr, nullptr); }},
      {"dlpg_broadcast", false, true, true, k, k,
       [api](dlpg_group_t *g, DLTensor *const *i, DLTensor *const *o, int n, dlpg_reduce_op_t,
             int root) { return api->broadcast(g, i, o, n, root, nullptr, nullptr); }},
      {"dlpg_reduce", true, true, true, k, k,
       [api](dlpg_group_t *g, DLTensor *const *i, DLTensor *const *o, int n, dlpg_reduce_op_t op,
             int root) { return api->reduce(g, i, o, n, op, root, nullptr, nullptr); }},
      {"dlpg_allgather", false, false, false, k, ws * k,
       [api](dlpg_group_t *g, DLTensor *const *i, DLTensor *const *o, int n, dlpg_reduce_op_t,
             int) { return api->allgather(g, i, o, n, nullptr, nullptr); }},
      {"dlpg_reduce_scatter", true, false, false, ws * k, k,
       [api](dlpg_group_t *g, DLTensor *const *i, DLTensor *const *o, int n, dlpg_reduce_op_t op,
             int) { return api->reduce_scatter(g, i, o, n, op, nullptr, nullptr); }},
  };
}

// Runs the whole matrix on one rank (every rank of the group runs the same calls, so a call
// that wrongly succeeds still completes as a collective).
void BadInputMatrix(RankCtx &c) {
  const dlpg_api_t *api = c.api;
  dlpg_group_t *g = c.group;
  const int ws = c.size;
  for (const ArrOp &op : ArrOps(api, ws)) {
    auto mk_in = [&] { return HostTensor(DT::F32, {op.in_numel}); };
    auto mk_out = [&] { return HostTensor(DT::F32, {op.out_numel}); };
    HostTensor in = mk_in(), out = mk_out();
    Generate(DT::F32, DLPG_SUM, c.seed, c.rank, in.elems(), in.numel());
    DLTensor *ip[1] = {in.dl()}, *opp[1] = {out.dl()};
    // The valid call works (sanity for everything below).
    {
      dlpg_status_t s = op.call(g, ip, opp, 1, DLPG_SUM, 0);
      ASSERT_EQ(s, DLPG_OK) << op.fn << " valid call: " << api->last_error();
    }
    ExpectErr(api, op.call(nullptr, ip, opp, 1, DLPG_SUM, 0), INV, op.fn, GROUP_ARG, "NULL group");
    ExpectErr(api, op.call(g, nullptr, opp, 1, DLPG_SUM, 0), INV, op.fn, {"inputs"}, "inputs NULL");
    {
      DLTensor *nul[1] = {nullptr};
      ExpectErr(api, op.call(g, nul, opp, 1, DLPG_SUM, 0), INV, op.fn, {"inputs"}, "inputs[0] NULL");
      ExpectErr(api, op.call(g, ip, nul, 1, DLPG_SUM, 0), INV, op.fn, {"outputs"}, "outputs[0] NULL");
    }
    if (!op.out_may_be_null)
      ExpectErr(api, op.call(g, ip, nullptr, 1, DLPG_SUM, 0), INV, op.fn, {"outputs"},
                "outputs NULL");
    ExpectErr(api, op.call(g, ip, opp, 0, DLPG_SUM, 0), INV, op.fn, {"ntensors"}, "ntensors 0");
    ExpectErr(api, op.call(g, ip, opp, -1, DLPG_SUM, 0), INV, op.fn, {"ntensors"}, "ntensors -1");
    {
      // Too many tensors (more than any machine's devices), all CPU.
      std::vector<HostTensor> many_in, many_out;
      std::vector<DLTensor *> mi, mo;
      for (int i = 0; i < 1000; i++) {
        many_in.push_back(mk_in());
        many_out.push_back(mk_out());
      }
      for (int i = 0; i < 1000; i++) {
        mi.push_back(many_in[i].dl());
        mo.push_back(many_out[i].dl());
      }
      ExpectErr(api, op.call(g, mi.data(), mo.data(), 1000, DLPG_SUM, 0), INV, op.fn,
                {"ntensors", "inputs", "tensors"}, "ntensors 1000");
      // Two CPU tensors in one call.
      ExpectErr(api, op.call(g, mi.data(), mo.data(), 2, DLPG_SUM, 0), INV, op.fn,
                {"ntensors", "inputs", "tensors", "cpu", "CPU"}, "two CPU tensors");
    }
    // Tensor-level defects, applied to the input and then to the output.
    for (int which = 0; which < 2; which++) {
      const char *arg = which == 0 ? "inputs" : "outputs";
      const std::string arg0 = std::string(arg) + "[0]";
      auto bad_call = [&](const std::function<void(HostTensor &)> &spoil,
                          dlpg_status_t accept,
                          std::initializer_list<const char *> args, const std::string &what,
                          std::initializer_list<std::string> all = {}) {
        HostTensor bi = mk_in(), bo = mk_out();
        spoil(which == 0 ? bi : bo);
        DLTensor *a[1] = {bi.dl()}, *b[1] = {bo.dl()};
        ExpectErr(api, op.call(g, a, b, 1, DLPG_SUM, 0), accept, op.fn, args,
                  std::string(arg) + " " + what, all);
      };
      // Valid DLPack the ABI does not serve: UNSUPPORTED (dlpg.h, "Which status").
      bad_call([](HostTensor &t) { t.dtype.lanes = 2; }, UNS, {"lanes"}, "lanes 2", {arg0});
      bad_call([](HostTensor &t) { t.dtype.code = 99; }, UNS, {"dtype", "code"}, "dtype code 99",
               {arg0, "99"});
      bad_call([](HostTensor &t) { t.dtype.bits = 24; }, UNS, {"dtype", "bits"},
               "float with 24 bits", {arg0, "24"});
      bad_call([](HostTensor &t) { t.device_type = kDLOpenCL; }, UNS, {arg, "device", "opencl", "OpenCL"},
               "device kDLOpenCL");
      bad_call([](HostTensor &t) { t.device_type = kDLVulkan; }, UNS, {arg, "device", "vulkan", "Vulkan"},
               "device kDLVulkan");
      bad_call(
          [](HostTensor &t) {
            int64_t n = t.shape()[0];
            t.shape() = {2, n / 2};
            t.strides() = {1, 2};  // column-major: not contiguous row-major
            t.use_strides = true;
          },
          INV, {arg, "strides"}, "column-major strides");
      bad_call(
          [](HostTensor &t) {
            t.strides() = {2};  // every other element
            t.use_strides = true;
          },
          INV, {arg, "strides"}, "stride 2");
      bad_call([](HostTensor &t) { t.shape()[0] = -4; }, INV, {arg, "shape"}, "negative shape");
      bad_call(
          [](HostTensor &t) { t.dtype = DLType(DT::I32); }, INV, {arg, "dtype", "float32", "int32"},
          "dtype differs from the other tensor");
      bad_call([](HostTensor &t) { t.shape()[0] += 1; }, INV,
               {arg, "shape", "element", "numel", "size"}, "one element too many");
    }
    {
      // NULL data with elements, NULL shape with ndim 1, negative ndim.
      HostTensor bi = mk_in();
      DLTensor t = *bi.dl();
      DLTensor *a[1] = {&t};
      t.data = nullptr;
      ExpectErr(api, op.call(g, a, opp, 1, DLPG_SUM, 0), INV, op.fn, {"inputs", "data"}, "data NULL");
      t = *bi.dl();
      t.shape = nullptr;
      ExpectErr(api, op.call(g, a, opp, 1, DLPG_SUM, 0), INV, op.fn, {"inputs", "shape"}, "shape NULL");
      t = *bi.dl();
      t.ndim = -1;
      ExpectErr(api, op.call(g, a, opp, 1, DLPG_SUM, 0), INV, op.fn, {"inputs", "ndim"}, "ndim -1");
    }
    if (op.reduces) {
      ExpectErr(api, op.call(g, ip, opp, 1, static_cast<dlpg_reduce_op_t>(99), 0), INV, op.fn,
                {"op", "reduce"}, "reduce op 99");
      ExpectErr(api, op.call(g, ip, opp, 1, static_cast<dlpg_reduce_op_t>(-1), 0), INV, op.fn,
                {"op", "reduce"}, "reduce op -1");
      // Bitwise on float32: UNSUPPORTED naming both, unless the capability query says the
      // plugin reduces it (then the call succeeds).
      bool sup = ReduceSupported(api, DT::F32, DLPG_BXOR);
      dlpg_status_t s = op.call(g, ip, opp, 1, DLPG_BXOR, 0);
      if (sup) {
        EXPECT_EQ(s, DLPG_OK) << op.fn << ": bxor on float32, which reduce_supported accepts: "
                              << api->last_error();
      } else {
        ExpectErr(api, s, UNS, op.fn, {}, "bxor on float32", {"bxor", "float32"});
      }
    }
    if (op.rooted) {
      ExpectErr(api, op.call(g, ip, opp, 1, DLPG_SUM, -1), INV, op.fn, {"root"}, "root -1");
      ExpectErr(api, op.call(g, ip, opp, 1, DLPG_SUM, ws), INV, op.fn, {"root"}, "root == world_size");
    }
    // Shape rules of the gathering/scattering operations.
    if (std::string(op.fn) == "dlpg_allgather" || std::string(op.fn) == "dlpg_reduce_scatter") {
      HostTensor a(DT::F32, {op.in_numel}), b(DT::F32, {op.out_numel + (ws > 1 ? 8 : 1)});
      DLTensor *ap[1] = {a.dl()}, *bp[1] = {b.dl()};
      ExpectErr(api, op.call(g, ap, bp, 1, DLPG_SUM, 0), INV, op.fn,
                {"outputs", "inputs", "shape", "element", "numel"}, "output size breaks the rule");
      HostTensor a2(DT::F32, {op.in_numel + 1}), b2(DT::F32, {op.out_numel});
      DLTensor *ap2[1] = {a2.dl()}, *bp2[1] = {b2.dl()};
      ExpectErr(api, op.call(g, ap2, bp2, 1, DLPG_SUM, 0), INV, op.fn,
                {"outputs", "inputs", "shape", "element", "numel"}, "input size breaks the rule");
    }
    // A CUDA tensor on a machine without a GPU (dlpg.h, "Which status"): UNSUPPORTED when
    // no backend for CUDA loads (the capability query says so), else SYSTEM (the backend
    // loaded, a CUDA call failed).
    if (!MachineHasGpu()) {
      HostTensor a = mk_in(), b = mk_out();
      a.device_type = kDLCUDA;
      b.device_type = kDLCUDA;
      DLTensor *ap[1] = {a.dl()}, *bp[1] = {b.dl()};
      dlpg_status_t served =
          api->reduce_supported(DLDevice{kDLCUDA, 0}, DLType(DT::F32), DLPG_SUM);
      ASSERT_TRUE(served == DLPG_OK || served == UNS)
          << "reduce_supported(cuda:0, float32, sum) -> " << api->status_name(served) << ": "
          << api->last_error();
      if (served == DLPG_OK)  // the message names the CUDA call that failed
        ExpectErr(api, op.call(g, ap, bp, 1, DLPG_SUM, 0), DLPG_ERR_SYSTEM, op.fn, {"cuda", "CUDA"},
                  "CUDA tensor without a GPU");
      else  // the message names the tensor and why its device is not served
        ExpectErr(api, op.call(g, ap, bp, 1, DLPG_SUM, 0), UNS, op.fn, {}, "CUDA tensor without a GPU",
                  {"inputs[0]"});
      // CPU input with a CUDA output: tensors of one call on two kinds of device.
      DLTensor *cp[1] = {in.dl()};
      ExpectErr(api, op.call(g, cp, bp, 1, DLPG_SUM, 0), INV, op.fn, {}, "CPU input with CUDA output",
                {"inputs[0]", "outputs[0]"});
    }
    // The group still works after all of this.
    {
      dlpg_status_t s = op.call(g, ip, opp, 1, DLPG_SUM, 0);
      EXPECT_EQ(s, DLPG_OK) << op.fn << " valid call after the bad ones: " << api->last_error();
    }
  }
}

void AlltoallMatrix(RankCtx &c) {
  const dlpg_api_t *api = c.api;
  dlpg_group_t *g = c.group;
  const int64_t n = 8 * c.size;
  const char *fn = "dlpg_alltoall";
  HostTensor in(DT::I32, {n}), out(DT::I32, {n});
  ASSERT_EQ(api->alltoall(g, in.dl(), out.dl(), nullptr, nullptr), DLPG_OK) << api->last_error();
  ExpectErr(api, api->alltoall(nullptr, in.dl(), out.dl(), nullptr, nullptr), INV, fn, GROUP_ARG, "NULL group");
  ExpectErr(api, api->alltoall(g, nullptr, out.dl(), nullptr, nullptr), INV, fn, {"input"}, "NULL input");
  ExpectErr(api, api->alltoall(g, in.dl(), nullptr, nullptr, nullptr), INV, fn, {"output"}, "NULL output");
  for (int which = 0; which < 2; which++) {
    const char *arg = which == 0 ? "input" : "output";
    auto bad = [&](const std::function<void(HostTensor &)> &spoil,
                   dlpg_status_t accept,
                   std::initializer_list<const char *> args, const std::string &what,
                   std::initializer_list<std::string> all = {}) {
      HostTensor a(DT::I32, {n}), b(DT::I32, {n});
      spoil(which == 0 ? a : b);
      ExpectErr(api, api->alltoall(g, a.dl(), b.dl(), nullptr, nullptr), accept, fn, args,
                std::string(arg) + " " + what, all);
    };
    bad([](HostTensor &t) { t.dtype.lanes = 4; }, UNS, {"lanes"}, "lanes 4", {arg, "4"});
    bad([](HostTensor &t) { t.dtype.code = 42; }, UNS, {"dtype", "code"}, "dtype code 42",
        {arg, "42"});
    bad([](HostTensor &t) { t.device_type = kDLOpenCL; }, UNS, {arg, "device", "opencl", "OpenCL"}, "kDLOpenCL");
    bad([](HostTensor &t) {
          int64_t k = t.shape()[0];
          t.shape() = {2, k / 2};
          t.strides() = {1, 2};
          t.use_strides = true;
        },
        INV, {arg, "strides"}, "column-major strides");
    bad([](HostTensor &t) { t.dtype = DLType(DT::U32); }, INV, {arg, "dtype", "int32", "uint32"},
        "dtype mismatch");
    bad([](HostTensor &t) { t.shape()[0] -= 1; }, INV, {arg, "shape", "element", "numel", "size"},
        "numel mismatch");
  }
  if (c.size > 1) {
    // Equal numel, not divisible into world_size blocks.
    HostTensor a(DT::I32, {n + 1}), b(DT::I32, {n + 1});
    ExpectErr(api, api->alltoall(g, a.dl(), b.dl(), nullptr, nullptr), INV, fn,
              {"input", "output", "shape", "element", "numel", "divisible", "world_size", "block"},
              "numel not divisible by world_size");
  }
  ASSERT_EQ(api->alltoall(g, in.dl(), out.dl(), nullptr, nullptr), DLPG_OK) << api->last_error();
}

void P2PMatrix(RankCtx &c) {
  const dlpg_api_t *api = c.api;
  dlpg_group_t *g = c.group;
  HostTensor t(DT::F64, {16});
  using Fn = dlpg_status_t (*)(dlpg_group_t *, DLTensor *, int, int, void *, dlpg_work_t **);
  struct P { const char *fn; Fn f; };
  const P ps[] = {{"dlpg_send", api->send}, {"dlpg_recv", api->recv}};
  int other = (c.rank + 1) % c.size;
  for (const P &p : ps) {
    ExpectErr(api, p.f(nullptr, t.dl(), other, 0, nullptr, nullptr), INV, p.fn, GROUP_ARG, "NULL group");
    ExpectErr(api, p.f(g, nullptr, other, 0, nullptr, nullptr), INV, p.fn, {"tensor"}, "NULL tensor");
    // -1 is DLPG_ANY_SOURCE, which only a receive takes.
    ExpectErr(api, p.f(g, t.dl(), -2, 0, nullptr, nullptr), INV, p.fn, {"peer"}, "peer -2");
    if (p.f == api->send)
      ExpectErr(api, p.f(g, t.dl(), DLPG_ANY_SOURCE, 0, nullptr, nullptr), INV, p.fn, {"peer"},
                "send to DLPG_ANY_SOURCE");
    ExpectErr(api, p.f(g, t.dl(), c.size, 0, nullptr, nullptr), INV, p.fn, {"peer"}, "peer == world_size");
    ExpectErr(api, p.f(g, t.dl(), c.rank, 0, nullptr, nullptr), INV, p.fn, {"peer", "self"}, "peer == self");
    if (c.size > 1) {
      ExpectErr(api, p.f(g, t.dl(), other, -1, nullptr, nullptr), INV, p.fn, {"tag"}, "tag -1");
      HostTensor b(DT::F64, {16});
      b.dtype.lanes = 2;
      ExpectErr(api, p.f(g, b.dl(), other, 0, nullptr, nullptr), UNS, p.fn, {"lanes"}, "lanes 2",
                {"tensor"});
      HostTensor d(DT::F64, {16});
      d.device_type = kDLOpenCL;
      ExpectErr(api, p.f(g, d.dl(), other, 0, nullptr, nullptr), UNS, p.fn,
                {"tensor", "device", "opencl", "OpenCL"}, "kDLOpenCL");
      HostTensor s(DT::F64, {4, 4});
      s.strides() = {1, 4};
      s.use_strides = true;
      ExpectErr(api, p.f(g, s.dl(), other, 0, nullptr, nullptr), INV, p.fn, {"tensor", "strides"},
                "column-major strides");
      HostTensor q(DT::F64, {16});
      q.dtype.bits = 24;
      ExpectErr(api, p.f(g, q.dl(), other, 0, nullptr, nullptr), UNS, p.fn, {"dtype", "bits"},
                "float with 24 bits", {"tensor", "24"});
    }
  }
  // Barrier, batching and work handles.
  ExpectErr(api, api->barrier(nullptr, nullptr), INV, "dlpg_barrier", GROUP_ARG, "NULL group");
  ExpectErr(api, api->group_start(nullptr), INV, "dlpg_group_start", GROUP_ARG, "NULL group");
  ExpectErr(api, api->group_end(nullptr), INV, "dlpg_group_end", GROUP_ARG, "NULL group");
  ExpectErr(api, api->group_end(g), INV, "dlpg_group_end", {}, "without dlpg_group_start");
  int d = 0;
  ExpectErr(api, api->work_wait(nullptr, 1.0), INV, "dlpg_work_wait", {"w", "work"}, "NULL work");
  ExpectErr(api, api->work_test(nullptr, &d), INV, "dlpg_work_test", {"w", "work"}, "NULL work");
  EXPECT_EQ(api->work_free(nullptr), DLPG_OK);
  const char *we = api->work_error(nullptr);
  (void)we;  // must not crash
  int r = -1;
  ExpectErr(api, api->group_rank(nullptr, &r), INV, "dlpg_group_rank", GROUP_ARG, "NULL group");
  ExpectErr(api, api->group_rank(g, nullptr), INV, "dlpg_group_rank", {"rank"}, "NULL rank");
  ExpectErr(api, api->group_size(nullptr, &r), INV, "dlpg_group_size", GROUP_ARG, "NULL group");
  ExpectErr(api, api->group_size(g, nullptr), INV, "dlpg_group_size", {"world_size", "size"}, "NULL size");
  ExpectErr(api, api->group_abort(nullptr), INV, "dlpg_group_abort", GROUP_ARG, "NULL group");
  EXPECT_EQ(api->group_destroy(nullptr), DLPG_OK);
  // The group still works.
  EXPECT_EQ(api->barrier(g, nullptr), DLPG_OK) << api->last_error();
  int rank = -1, size = -1;
  DLPG_EXPECT_OK(api, api->group_rank(g, &rank));
  DLPG_EXPECT_OK(api, api->group_size(g, &size));
  EXPECT_EQ(rank, c.rank);
  EXPECT_EQ(size, c.size);
}

class Errors : public ::testing::TestWithParam<int> {};

TEST_P(Errors, CollectiveBadInputs) {
  RunRanks(Mode::kThreads, GetParam(), BadInputMatrix, RunOptions{true, true, 20});
}
TEST_P(Errors, AlltoallBadInputs) {
  RunRanks(Mode::kThreads, GetParam(), AlltoallMatrix, RunOptions{true, true, 20});
}
TEST_P(Errors, P2PBadInputs) {
  RunRanks(Mode::kThreads, GetParam(), P2PMatrix, RunOptions{true, true, 20});
}
INSTANTIATE_TEST_SUITE_P(Ranks, Errors, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return "ranks_" + std::to_string(i.param);
                         });

TEST(ErrorsStandalone, StoreAndGroupArguments) {
  const dlpg_api_t *api = dlpg_test_api();
  dlpg_store_t *st = nullptr;
  ExpectErr(api, api->store_open(nullptr, 1.0, &st), INV, "dlpg_store_open", {"url"}, "NULL url");
  ExpectErr(api, api->store_open("bogus://x", 1.0, &st), INV, "dlpg_store_open", {"url", "bogus"},
            "unknown scheme");
  ExpectErr(api, api->store_open("tcp://127.0.0.1:notaport", 1.0, &st), INV, "dlpg_store_open",
            {"url", "port", "notaport"}, "bad port");
  ExpectErr(api, api->store_open("tcp://127.0.0.1:99999", 1.0, &st), INV, "dlpg_store_open",
            {"url", "port", "99999"}, "port out of range");
  ExpectErr(api, api->store_open("tcp://127.0.0.1:0?serve=1", 1.0, nullptr), INV, "dlpg_store_open",
            {"store"}, "NULL out");
  int port = 0;
  ExpectErr(api, api->store_port(nullptr, &port), INV, "dlpg_store_port", {"store"}, "NULL store");
  EXPECT_EQ(api->store_close(nullptr), DLPG_OK);

  DLPG_ASSERT_OK(api, api->store_open("tcp://127.0.0.1:0?serve=1", 5.0, &st));
  ExpectErr(api, api->store_port(st, nullptr), INV, "dlpg_store_port", {"port"}, "NULL port");
  dlpg_group_t *g = nullptr;
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 5;
  ExpectErr(api, api->group_create(nullptr, 0, 1, &o, &g), INV, "dlpg_group_create", {"store"}, "NULL store");
  ExpectErr(api, api->group_create(st, -1, 2, &o, &g), INV, "dlpg_group_create", {"rank"}, "rank -1");
  ExpectErr(api, api->group_create(st, 2, 2, &o, &g), INV, "dlpg_group_create", {"rank"}, "rank == world_size");
  ExpectErr(api, api->group_create(st, 0, 0, &o, &g), INV, "dlpg_group_create", {"world_size"}, "world_size 0");
  ExpectErr(api, api->group_create(st, 0, -3, &o, &g), INV, "dlpg_group_create", {"world_size"}, "world_size -3");
  ExpectErr(api, api->group_create(st, 0, 1, &o, nullptr), INV, "dlpg_group_create", {"group"}, "NULL out");
  EXPECT_EQ(g, nullptr) << "out-parameter written on failure";
  DLPG_EXPECT_OK(api, api->store_close(st));
}

// ------------------------------------------------------------------ names and versions

TEST(ErrorsStandalone, StatusNames) {
  const dlpg_api_t *api = dlpg_test_api();
  const char *want[] = {"DLPG_OK", "DLPG_ERR_INVALID_ARGUMENT", "DLPG_ERR_UNSUPPORTED",
                        "DLPG_ERR_TIMEOUT", "DLPG_ERR_REMOTE", "DLPG_ERR_ABORTED",
                        "DLPG_ERR_SYSTEM", "DLPG_ERR_INTERNAL"};
  for (int i = 0; i < 8; i++)
    EXPECT_STREQ(api->status_name(static_cast<dlpg_status_t>(i)), want[i]);
  EXPECT_STREQ(api->status_name(static_cast<dlpg_status_t>(8)), "DLPG_ERR_UNKNOWN");
  EXPECT_STREQ(api->status_name(static_cast<dlpg_status_t>(-1)), "DLPG_ERR_UNKNOWN");
  EXPECT_STREQ(api->status_name(static_cast<dlpg_status_t>(12345)), "DLPG_ERR_UNKNOWN");
}

TEST(ErrorsStandalone, VersionAndBuildInfo) {
  const dlpg_api_t *api = dlpg_test_api();
  int v = -1;
  DLPG_ASSERT_OK(api, api->get_version(&v));
  EXPECT_EQ(v, DLPG_VERSION_CODE);
  EXPECT_EQ(api->version_code, static_cast<uint32_t>(DLPG_VERSION_CODE));
  EXPECT_EQ(api->abi_major, static_cast<uint32_t>(DLPG_ABI_MAJOR));
  EXPECT_GE(api->struct_size, sizeof(dlpg_api_t));
  ExpectErr(api, api->get_version(nullptr), INV, "dlpg_get_version", {"version"}, "NULL out");
  const char *info = nullptr;
  DLPG_ASSERT_OK(api, api->get_build_info(&info));
  ASSERT_NE(info, nullptr);
  std::string s = info;
  EXPECT_FALSE(s.empty());
  EXPECT_NE(s.find("gloo"), std::string::npos) << s;
  EXPECT_NE(s.find("nccl"), std::string::npos) << s;
  EXPECT_NE(s.find("dlpg"), std::string::npos) << s;
  ExpectErr(api, api->get_build_info(nullptr), INV, "dlpg_get_build_info", {"info"}, "NULL out");
}

TEST(ErrorsStandalone, FunctionTable) {
  const dlpg_api_t *api = dlpg_test_api();
  // Every entry is set.
  const char *const *p = reinterpret_cast<const char *const *>(&api->status_name);
  size_t nfn = (sizeof(dlpg_api_t) - offsetof(dlpg_api_t, status_name)) / sizeof(void *);
  for (size_t i = 0; i < nfn; i++) EXPECT_NE(p[i], nullptr) << "dlpg_api_t function " << i << " is NULL";
  const char *path = getenv("DLPG_PLUGIN");
  if (!path || !*path) path = DLPG_DEFAULT_PLUGIN;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto get = reinterpret_cast<dlpg_get_api_fn>(dlsym(h, "dlpg_get_api"));
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get(DLPG_ABI_MAJOR), api) << "the table is static: the same pointer each time";
  EXPECT_EQ(get(999), nullptr);
  EXPECT_EQ(get(DLPG_ABI_MAJOR + 1), nullptr);
  // Every public name is exported. (That dlpg's internal names are not is dlpg's own
  // check: ci/check-symbols.sh and tests/unit/test_core.cc.)
  for (const char *sym : {"dlpg_allreduce", "dlpg_store_open", "dlpg_group_create", "dlpg_work_free",
                          "dlpg_last_error", "dlpg_status_name", "dlpg_reduce_supported"})
    EXPECT_NE(dlsym(h, sym), nullptr) << sym << " not exported";
  dlclose(h);
}

// The capability query (dlpg.h, dlpg_reduce_supported): what the ABI promises is supported,
// valid DLPack the plugin does not serve is UNSUPPORTED naming the value, arguments outside
// the rules are INVALID_ARGUMENT; the answers for the CPU agree with the calls (test_collectives
// checks every dtype x op against the call's status and result).
TEST(Capabilities, ReduceSupported) {
  const dlpg_api_t *api = dlpg_test_api();
  const DLDevice cpu{kDLCPU, 0};
  const char *fn = "dlpg_reduce_supported";
  for (const DTInfo &i : AllDTypes())
    for (dlpg_reduce_op_t op : AllOps()) {
      bool sup = ReduceSupported(api, i.dt, op);  // fails the test on a status other than OK/UNS
      if (AbiRequiresReduce(i.dt, op)) {
        EXPECT_TRUE(sup) << i.name << " " << OpName(op);
      }
    }
  // The query for a host-pinned device (kDLCUDAHost is host memory, served like the CPU).
  EXPECT_EQ(api->reduce_supported(DLDevice{kDLCUDAHost, 0}, DLType(DT::F32), DLPG_SUM), DLPG_OK)
      << api->last_error();
  DLDataType lanes = DLType(DT::F32);
  lanes.lanes = 4;
  ExpectErr(api, api->reduce_supported(cpu, lanes, DLPG_SUM), UNS, fn, {"lanes"}, "lanes 4", {"4"});
  DLDataType code = DLType(DT::F32);
  code.code = 99;
  ExpectErr(api, api->reduce_supported(cpu, code, DLPG_SUM), UNS, fn, {"dtype", "code"},
            "dtype code 99", {"99"});
  DLDataType bits = DLType(DT::F32);
  bits.bits = 24;
  ExpectErr(api, api->reduce_supported(cpu, bits, DLPG_SUM), UNS, fn, {"dtype", "bits"},
            "float with 24 bits", {"24"});
  ExpectErr(api, api->reduce_supported(DLDevice{kDLOpenCL, 0}, DLType(DT::F32), DLPG_SUM), UNS, fn,
            {"opencl", "OpenCL", "device type 4"}, "device kDLOpenCL");
  ExpectErr(api, api->reduce_supported(DLDevice{kDLVulkan, 0}, DLType(DT::F32), DLPG_SUM), UNS, fn,
            {"vulkan", "Vulkan", "device type 7"}, "device kDLVulkan");
  ExpectErr(api, api->reduce_supported(cpu, DLType(DT::F32), static_cast<dlpg_reduce_op_t>(99)), INV,
            fn, {"op"}, "reduce op 99", {"99"});
  ExpectErr(api, api->reduce_supported(cpu, DLType(DT::F32), static_cast<dlpg_reduce_op_t>(-1)), INV,
            fn, {"op"}, "reduce op -1", {"-1"});
  ExpectErr(api, api->reduce_supported(DLDevice{kDLCPU, -1}, DLType(DT::F32), DLPG_SUM), INV, fn,
            {"device"}, "device id -1", {"-1"});
  // CUDA: served (OK) or not (UNSUPPORTED saying why); never another status.
  dlpg_status_t s = api->reduce_supported(DLDevice{kDLCUDA, 0}, DLType(DT::F32), DLPG_SUM);
  EXPECT_TRUE(s == DLPG_OK || s == UNS) << api->status_name(s) << ": " << api->last_error();
  if (s == UNS) {
    EXPECT_STRNE(api->last_error(), "");
  }
}

TEST(ErrorsStandalone, LastErrorIsPerThread) {
  const dlpg_api_t *api = dlpg_test_api();
  EXPECT_EQ(api->group_abort(nullptr), INV);
  std::string main_msg = api->last_error();
  EXPECT_NE(main_msg.find("dlpg_group_abort"), std::string::npos);
  std::string other;
  std::thread t([&] {
    api->barrier(nullptr, nullptr);
    other = api->last_error();
  });
  t.join();
  EXPECT_NE(other.find("dlpg_barrier"), std::string::npos) << other;
  EXPECT_EQ(main_msg, std::string(api->last_error())) << "another thread's failure changed this thread's message";
}

}  // namespace
