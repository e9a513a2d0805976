// The operation-kind table and the rules validation derives from it (white-box: links the
// plugin's objects). See kinds.cmake.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

// core/group/group.h (through ops_impl.h) uses C11 atomic_int, which C++ cannot name: the Gloo
// island's C header maps it to std::atomic<int>, of the same layout.
#include "gloo/c_headers.h"
#include "gloo/reduce_fns.h"

extern "C" {
#include "base/status.h"
#include "core/lines/backend.h"
#include "core/door/ops_impl.h"
#include "gloo/gloo.h"
#include "shm/shm.h"
}

namespace {

bool Contains(const std::string &hay, const char *needle) {
  return hay.find(needle) != std::string::npos;
}

// Today's names, written out (not generated): the ABI's values and the public spelling (ABI
// v1's nine, then the rooted and uneven collectives appended).
TEST(OpKinds, NamesAreTheAbisNine) {
  const char *want[] = {"dlpg_allreduce", "dlpg_broadcast",      "dlpg_reduce",
                        "dlpg_allgather", "dlpg_reduce_scatter", "dlpg_alltoall",
                        "dlpg_send",      "dlpg_recv",           "dlpg_barrier",
                        "dlpg_gather",    "dlpg_scatter",        "dlpg_allgatherv",
                        "dlpg_alltoallv", "dlpg_reduce_scatter_v"};
  ASSERT_EQ(static_cast<int>(DLPG__OP_COUNT), 14);
  for (int k = 0; k < 14; k++)
    EXPECT_STREQ(dlpg__op_name(static_cast<dlpg__op_kind_t>(k)), want[k]) << "kind " << k;
  EXPECT_EQ(DLPG__OP_ALLREDUCE, 0);
  EXPECT_EQ(DLPG__OP_ALLTOALL, 5);
  EXPECT_EQ(DLPG__OP_BARRIER, 8);
  EXPECT_STREQ(dlpg__op_name(static_cast<dlpg__op_kind_t>(-1)), "dlpg_operation");
  EXPECT_STREQ(dlpg__op_name(DLPG__OP_COUNT), "dlpg_operation");
  EXPECT_EQ(dlpg__op_kind_info(DLPG__OP_COUNT), nullptr);
  char buf[128];
  dlpg__op_kinds_names(DLPG__KIND_BIT(DLPG__OP_SEND) | DLPG__KIND_BIT(DLPG__OP_RECV), buf,
                       sizeof buf);
  EXPECT_STREQ(buf, "dlpg_send, dlpg_recv");
  dlpg__op_kinds_names(0, buf, sizeof buf);
  EXPECT_STREQ(buf, "none");
}

// The facts validation steers by, per kind, as the ABI's documentation (dlpg.h) states them.
TEST(OpKinds, FactsPerKind) {
  struct F {
    dlpg__op_kind_t k;
    int reduces, root, p2p;
    dlpg__op_outputs_t outputs;
    dlpg__op_args_style_t args;
    dlpg__shape_rule_t shape;
  };
  const F fs[] = {
      {DLPG__OP_ALLREDUCE, 1, 0, 0, DLPG__OUTPUTS_INPLACE, DLPG__ARGS_LIST, DLPG__SHAPE_SAME},
      {DLPG__OP_BROADCAST, 0, 1, 0, DLPG__OUTPUTS_INPLACE, DLPG__ARGS_LIST, DLPG__SHAPE_SAME},
      {DLPG__OP_REDUCE, 1, 1, 0, DLPG__OUTPUTS_INPLACE, DLPG__ARGS_LIST, DLPG__SHAPE_SAME},
      {DLPG__OP_ALLGATHER, 0, 0, 0, DLPG__OUTPUTS_REQUIRED, DLPG__ARGS_LIST, DLPG__SHAPE_GATHER},
      {DLPG__OP_REDUCE_SCATTER, 1, 0, 0, DLPG__OUTPUTS_REQUIRED, DLPG__ARGS_LIST,
       DLPG__SHAPE_SCATTER},
      {DLPG__OP_ALLTOALL, 0, 0, 0, DLPG__OUTPUTS_REQUIRED, DLPG__ARGS_PAIR, DLPG__SHAPE_ALLTOALL},
      {DLPG__OP_SEND, 0, 0, 1, DLPG__OUTPUTS_NONE, DLPG__ARGS_TENSOR, DLPG__SHAPE_NONE},
      {DLPG__OP_RECV, 0, 0, 1, DLPG__OUTPUTS_NONE, DLPG__ARGS_TENSOR, DLPG__SHAPE_NONE},
      {DLPG__OP_BARRIER, 0, 0, 0, DLPG__OUTPUTS_NONE, DLPG__ARGS_NONE, DLPG__SHAPE_NONE},
      {DLPG__OP_GATHER, 0, 1, 0, DLPG__OUTPUTS_ROOT, DLPG__ARGS_PAIR, DLPG__SHAPE_GATHER},
      {DLPG__OP_SCATTER, 0, 1, 0, DLPG__OUTPUTS_ROOT, DLPG__ARGS_PAIR, DLPG__SHAPE_SCATTER},
      {DLPG__OP_ALLGATHERV, 0, 0, 0, DLPG__OUTPUTS_REQUIRED, DLPG__ARGS_PAIR, DLPG__SHAPE_COUNTS},
      {DLPG__OP_ALLTOALLV, 0, 0, 0, DLPG__OUTPUTS_REQUIRED, DLPG__ARGS_PAIR, DLPG__SHAPE_COUNTS},
      {DLPG__OP_REDUCE_SCATTER_V, 1, 0, 0, DLPG__OUTPUTS_REQUIRED, DLPG__ARGS_PAIR,
       DLPG__SHAPE_COUNTS},
  };
  for (const F &f : fs) {
    const dlpg__op_kind_info_t *k = dlpg__op_kind_info(f.k);
    ASSERT_NE(k, nullptr);
    SCOPED_TRACE(k->name);
    EXPECT_EQ(k->reduces, f.reduces);
    EXPECT_EQ(k->root, f.root);
    EXPECT_EQ(k->p2p, f.p2p);
    EXPECT_EQ(k->outputs, f.outputs);
    EXPECT_EQ(k->args, f.args);
    EXPECT_EQ(k->shape, f.shape);
  }
}

// A module of ABI v1 built when kinds = 0 meant "every kind" serves the nine kinds that
// existed then, never one a later table adds; bits a later table's module sets for kinds
// this table lacks are not read.
TEST(OpKinds, ModuleKindsZeroMeansAbiV1Nine) {
  dlpg__backend_vtbl_t vt;
  std::memset(&vt, 0, sizeof vt);
  EXPECT_EQ(DLPG__KINDS_V1, 0x1ffu);
  EXPECT_EQ(dlpg__vtbl_kinds(&vt), DLPG__KINDS_V1);
  for (int k = 0; k < 9; k++) EXPECT_TRUE(dlpg__vtbl_serves(&vt, static_cast<dlpg__op_kind_t>(k)));
  EXPECT_FALSE(dlpg__vtbl_serves(&vt, DLPG__OP_COUNT));
  for (int k = 9; k < DLPG__OP_COUNT; k++)  // the kinds appended since: never an old module's
    EXPECT_FALSE(dlpg__vtbl_serves(&vt, static_cast<dlpg__op_kind_t>(k))) << dlpg__op_name(static_cast<dlpg__op_kind_t>(k));
  vt.kinds = DLPG__KIND_BIT(DLPG__OP_SEND) | (1u << 31);
  EXPECT_EQ(dlpg__vtbl_kinds(&vt), DLPG__KIND_BIT(DLPG__OP_SEND));
  EXPECT_TRUE(dlpg__vtbl_serves(&vt, DLPG__OP_SEND));
  EXPECT_FALSE(dlpg__vtbl_serves(&vt, DLPG__OP_RECV));
  EXPECT_FALSE(dlpg__vtbl_serves(&vt, static_cast<dlpg__op_kind_t>(31)));
  // The built-in backends list theirs: every one of the nine for the CPU lines.
  for (int s = 0; s < dlpg__backend_count(); s++) {
    const dlpg__backend_entry_t *e = dlpg__backend_entry(s);
    if (e->builtin) {
      EXPECT_NE(e->builtin->kinds, 0u) << e->name;
    }
  }
}

// A test backend for Vulkan tensors that serves broadcasts and transfers only. Its issue
// must never run here: every operation below is decided at validation.
int g_issued = 0;
dlpg_status_t TestCheck(const char *, const dlpg__be_op_t *) { return DLPG_OK; }
dlpg_status_t TestStateCreate(const dlpg__be_group_t *, void **state) {
  *state = nullptr;
  return DLPG_ERR_INTERNAL;
}
dlpg_status_t TestIssue(dlpg__be_op_t *const *, int) {
  g_issued++;
  return DLPG_ERR_INTERNAL;
}
void TestState(void *) {}
const char *TestInfo() { return "kindtest"; }

dlpg__backend_vtbl_t TestTable(unsigned kinds) {
  dlpg__backend_vtbl_t vt;
  std::memset(&vt, 0, sizeof vt);
  vt.struct_size = sizeof vt;
  vt.version = DLPG__BACKEND_ABI_VERSION;
  vt.host_size = sizeof(dlpg__host_t);
  vt.name = "kindtest";
  vt.devices = DLPG__DEV_BIT(kDLVulkan);
  vt.max_tensors = 1;
  vt.check = TestCheck;
  vt.state_create = TestStateCreate;
  vt.issue = TestIssue;
  vt.abort = TestState;
  vt.destroy = TestState;
  vt.build_info = TestInfo;
  vt.kinds = kinds;
  return vt;
}

const dlpg__backend_vtbl_t kNoKinds = TestTable(0);
const dlpg__backend_entry_t kNoKindsLine = {"kindtest", DLPG__DEV_BIT(kDLVulkan), &kNoKinds,
                                            nullptr, DLPG__PARAM_COUNT};
const dlpg__backend_vtbl_t kSome = TestTable(DLPG__KIND_BIT(DLPG__OP_BROADCAST) |
                                             DLPG__KIND_BIT(DLPG__OP_SEND) |
                                             DLPG__KIND_BIT(DLPG__OP_RECV));
const dlpg__backend_entry_t kSomeLine = {"kindtest", DLPG__DEV_BIT(kDLVulkan), &kSome, nullptr,
                                         DLPG__PARAM_COUNT};

struct Tensor {
  float data[8] = {0};
  int64_t shape[1] = {8};
  DLTensor t{};
  explicit Tensor(int dev) {
    t.data = data;
    t.device = {static_cast<DLDeviceType>(dev), 0};
    t.ndim = 1;
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.shape = shape;
  }
};

// Validation of one call's arguments: its status, the message in *msg.
dlpg_status_t Build(dlpg_group_t *g, dlpg__op_kind_t kind, DLTensor *in, DLTensor *out, int peer,
                    std::string *msg) {
  DLTensor *ins[1] = {in}, *outs[1] = {out};
  dlpg__op_args_t a = {kind, g, ins, out ? outs : nullptr, 1, DLPG_SUM, 0, peer, 0, nullptr,
                       nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  static dlpg__op_t op;  // large: not on the stack
  dlpg__clear_error();
  dlpg_status_t st = dlpg__op_build(&a, &op);
  *msg = dlpg__last_error();
  return st;
}

// A kind the serving backend does not list is DLPG_ERR_UNSUPPORTED at validation, naming
// the backend, the kind and what it serves; the kinds it lists pass validation.
TEST(OpKinds, UnlistedKindIsUnsupportedAtValidation) {
  // A built-in table must list its kinds: 0 is refused at registration.
  EXPECT_EQ(dlpg__backend_register(&kNoKindsLine), -1);
  ASSERT_GE(dlpg__backend_register(&kSomeLine), 0);
  dlpg_store_t *store = nullptr;
  ASSERT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &store), DLPG_OK) << dlpg_last_error();
  dlpg_group_t *g = nullptr;
  ASSERT_EQ(dlpg_group_create(store, 0, 2, nullptr, &g), DLPG_OK) << dlpg_last_error();
  Tensor vin(kDLVulkan), vout(kDLVulkan);
  std::string msg;
  const dlpg__op_kind_t refused[] = {DLPG__OP_ALLREDUCE, DLPG__OP_REDUCE};
  for (dlpg__op_kind_t k : refused) {
    EXPECT_EQ(Build(g, k, &vin.t, nullptr, 0, &msg), DLPG_ERR_UNSUPPORTED) << msg;
    std::string want = std::string(dlpg__op_name(k)) + ": the kindtest backend does not serve " +
                       dlpg__op_name(k) + " (it serves dlpg_broadcast, dlpg_send, dlpg_recv)";
    EXPECT_EQ(msg, want);
  }
  EXPECT_EQ(Build(g, DLPG__OP_ALLGATHER, &vin.t, &vout.t, 0, &msg), DLPG_ERR_UNSUPPORTED) << msg;
  EXPECT_TRUE(Contains(msg, "dlpg_allgather: the kindtest backend does not serve dlpg_allgather"))
      << msg;
  EXPECT_EQ(Build(g, DLPG__OP_ALLTOALL, &vin.t, &vout.t, 0, &msg), DLPG_ERR_UNSUPPORTED) << msg;
  EXPECT_TRUE(Contains(msg, "dlpg_alltoall: the kindtest backend does not serve dlpg_alltoall"))
      << msg;
  // A kind appended after ABI v1 says the backend does not have it yet, on which tensors.
  EXPECT_EQ(Build(g, DLPG__OP_GATHER, &vin.t, &vout.t, 0, &msg), DLPG_ERR_UNSUPPORTED) << msg;
  EXPECT_TRUE(Contains(msg, "dlpg_gather: not yet on vulkan tensors (the kindtest backend does "
                            "not serve dlpg_gather;")) << msg;
  // Listed kinds pass validation.
  EXPECT_EQ(Build(g, DLPG__OP_BROADCAST, &vin.t, nullptr, 0, &msg), DLPG_OK) << msg;
  EXPECT_EQ(Build(g, DLPG__OP_SEND, &vin.t, nullptr, 1, &msg), DLPG_OK) << msg;
  // Through the public entry point: refused before dispatch, no work, nothing issued.
  DLTensor *ins[1] = {&vin.t};
  dlpg_work_t *w = nullptr;
  EXPECT_EQ(dlpg_allreduce(g, ins, nullptr, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "the kindtest backend does not serve dlpg_allreduce"))
      << dlpg_last_error();
  EXPECT_EQ(w, nullptr);
  EXPECT_EQ(g_issued, 0);
  dlpg_group_destroy(g);
  dlpg_store_close(store);
}

// A send or receive to this rank itself outside a batch is refused by validation (its match
// can only come later from this thread); inside dlpg_group_start/end it is valid.
TEST(OpKinds, SelfTransferOutsideBatchRefusedAtValidation) {
  dlpg_store_t *store = nullptr;
  ASSERT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &store), DLPG_OK) << dlpg_last_error();
  dlpg_group_t *g = nullptr;
  ASSERT_EQ(dlpg_group_create(store, 0, 2, nullptr, &g), DLPG_OK) << dlpg_last_error();
  Tensor t(kDLCPU);
  std::string msg;
  EXPECT_EQ(Build(g, DLPG__OP_SEND, &t.t, nullptr, 0, &msg), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(msg, "dlpg_send: peer is 0, this rank itself: a send to self must be issued inside "
                 "a dlpg_group_start/end batch together with its matching receive");
  EXPECT_EQ(Build(g, DLPG__OP_RECV, &t.t, nullptr, 0, &msg), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(msg, "dlpg_recv: peer is 0, this rank itself: a receive to self must be issued "
                 "inside a dlpg_group_start/end batch together with its matching send");
  // The other peer is fine outside a batch; this rank itself is fine inside one.
  EXPECT_EQ(Build(g, DLPG__OP_SEND, &t.t, nullptr, 1, &msg), DLPG_OK) << msg;
  ASSERT_EQ(dlpg_group_start(g), DLPG_OK);
  EXPECT_EQ(dlpg__batch_depth(), 1);
  EXPECT_EQ(Build(g, DLPG__OP_SEND, &t.t, nullptr, 0, &msg), DLPG_OK) << msg;
  EXPECT_EQ(Build(g, DLPG__OP_RECV, &t.t, nullptr, 0, &msg), DLPG_OK) << msg;
  EXPECT_EQ(dlpg_group_end(g), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(dlpg__batch_depth(), 0);
  dlpg_group_destroy(g);
  dlpg_store_close(store);
}

// The dtype/reduce-op pair is judged once, at validation, by the serving backend's check;
// the CPU issue paths then trust it. That holds only if (1) shm's check (the first CPU line,
// whose rules answer before a group chose its line) and Gloo's agree on every pair, since a
// group may run on either, and (2) every pair Gloo's check accepts has a reduce function
// (and, for avg, a division; for premul_sum, a multiplication), so its issue path never
// meets a pair it cannot run. A complex dtype runs as its real parts (reduce_view).
TEST(OpKinds, CpuReduceRulesAgreeWithWhatRuns) {
  int accepted = 0;
  for (int dt = 0; dt < DLPG__DT_COUNT; dt++)
    for (int op = DLPG_SUM; op <= DLPG_PREMUL_SUM; op++) {
      auto d = static_cast<dlpg__dtype_t>(dt);
      auto o = static_cast<dlpg_reduce_op_t>(op);
      SCOPED_TRACE(std::string(dlpg__dtype_name(d)) + " " + dlpg__reduce_op_name(o));
      dlpg_status_t gloo = dlpg__gloo_check_reduce("f", d, o);
      dlpg_status_t shm = dlpg__shm_check_reduce("f", d, o);
      EXPECT_EQ(gloo, shm);
      if (gloo != DLPG_OK) continue;
      accepted++;
      const dlpg__dtype_t runs = dlpg__dtype_real_part(d);
      EXPECT_NE(dlpg_gloo::reduce_fn(runs, o), nullptr);
      if (o == DLPG_AVG) {
        EXPECT_TRUE(dlpg_gloo::divide_elements(runs, nullptr, 0, 2));
      }
      if (o == DLPG_PREMUL_SUM) {
        EXPECT_TRUE(dlpg_gloo::premul_elements(runs, nullptr, nullptr, 0, 0.5));
      }
    }
  EXPECT_GT(accepted, 0);
}

}  // namespace
