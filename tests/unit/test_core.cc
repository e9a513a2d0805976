// White-box tests of plugin/core: status and last error, tensor rules and support tables,
// group creation, work waits (timeouts abort the group), validation at the door, and a
// small multi-rank smoke run of CPU operations and cross-group batches over the real TCP
// store. Links the object library (dlpg_obj) to reach internal functions directly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

// group.h uses C11 atomic_int, which C++17 cannot name; std::atomic<int> has the same
// layout on GCC and Clang (as in plugin/gloo/c_headers.h).
using atomic_int = std::atomic<int>;
#define _STDATOMIC_H 1
#include "../conformance/time_scale.h"
extern "C" {
#include "core/lines/backend.h"
#include "core/group/group.h"
#include "base/status.h"
#include "core/lines/tensor.h"
#include "core/group/work.h"
#include "gloo/gloo.h"
#include "nccl/rules.h"
}

namespace {

// A CPU (or other device) tensor descriptor over caller-owned memory.
struct T {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  T(void *data, DLDataType dt, std::vector<int64_t> s, int dev = kDLCPU, int id = 0)
      : shape(std::move(s)) {
    t.data = data;
    t.device = {static_cast<DLDeviceType>(dev), id};
    t.ndim = static_cast<int>(shape.size());
    t.dtype = dt;
    t.shape = shape.empty() ? nullptr : shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  void SetStrides(std::vector<int64_t> s) {
    strides = std::move(s);
    t.strides = strides.data();
  }
};

const DLDataType kF32{kDLFloat, 32, 1};
const DLDataType kI64{kDLInt, 64, 1};

bool Contains(const char *hay, const char *needle) { return std::strstr(hay, needle) != nullptr; }

TEST(CoreStatus, NamesAndLastError) {
  EXPECT_STREQ(dlpg_status_name(DLPG_OK), "DLPG_OK");
  EXPECT_STREQ(dlpg_status_name(DLPG_ERR_TIMEOUT), "DLPG_ERR_TIMEOUT");
  EXPECT_STREQ(dlpg_status_name(static_cast<dlpg_status_t>(99)), "DLPG_ERR_UNKNOWN");
  // Every entry of the header's table names its own value, and no two share one.
  int count = 0;
#define CHECK_STATUS_ENTRY(name, value, meaning)                  \
  EXPECT_EQ(static_cast<int>(name), value) << #name;              \
  EXPECT_STREQ(dlpg_status_name(name), #name);                    \
  EXPECT_GT(std::strlen(meaning), 0u) << #name;                   \
  count++;
  DLPG_STATUS_MAP(CHECK_STATUS_ENTRY)
#undef CHECK_STATUS_ENTRY
  EXPECT_EQ(count, 8);
  EXPECT_STREQ(dlpg_status_name(static_cast<dlpg_status_t>(count)), "DLPG_ERR_UNKNOWN");
  EXPECT_EQ(dlpg__error(DLPG_ERR_REMOTE, "x %d", 7), DLPG_ERR_REMOTE);
  EXPECT_STREQ(dlpg_last_error(), "x 7");
  dlpg__error_prefix(DLPG_ERR_REMOTE, "dlpg_allreduce");
  EXPECT_STREQ(dlpg_last_error(), "dlpg_allreduce: x 7");
  dlpg__error_prefix(DLPG_ERR_REMOTE, "dlpg_allreduce");  // not twice
  EXPECT_STREQ(dlpg_last_error(), "dlpg_allreduce: x 7");
  std::string big(5000, 'a');
  dlpg__error(DLPG_ERR_INTERNAL, "%s", big.c_str());
  EXPECT_EQ(std::strlen(dlpg_last_error()), size_t(DLPG__ERROR_MAX - 1));
  EXPECT_TRUE(Contains(dlpg_last_error(), "..."));
  // The message is per thread.
  std::thread([] { EXPECT_STREQ(dlpg_last_error(), ""); }).join();
}

// A huge byte_offset with a valid data pointer crashed both ranks of an allreduce: it is
// refused before memory is touched, as is any extent past the end of user space (2^56) or
// one that wraps; an address inside user space passes (mapping it is the caller's part).
TEST(CoreTensor, OffsetsPastUserSpaceAreRefused) {
  float buf[16];
  dlpg__tensor_t out;
  for (uint64_t off : {uint64_t(1) << 62, uint64_t(1) << 56, ~uint64_t(0) - 7,
                       (uint64_t(1) << 56) - reinterpret_cast<uintptr_t>(buf) - 63}) {
    T a(buf, kF32, {4, 4});  // 64 bytes
    a.t.byte_offset = off;
    EXPECT_EQ(dlpg__tensor_from_dl("dlpg_allreduce", "inputs", 0, &a.t, &out),
              DLPG_ERR_INVALID_ARGUMENT) << off;
    EXPECT_TRUE(Contains(dlpg_last_error(), "dlpg_allreduce: inputs[0] has data 0x")) << dlpg_last_error();
    EXPECT_TRUE(Contains(dlpg_last_error(), ("byte_offset " + std::to_string(off)).c_str())) << dlpg_last_error();
    EXPECT_TRUE(Contains(dlpg_last_error(), "past the end of user address space")) << dlpg_last_error();
  }
  T a(buf, kF32, {4, 4});
  a.t.byte_offset = (uint64_t(1) << 56) - reinterpret_cast<uintptr_t>(buf) - 64;  // ends at 2^56
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &a.t, &out), DLPG_OK) << dlpg_last_error();
  a.t.byte_offset = uint64_t(1) << 40;  // inside user space: not checked against the mappings
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &a.t, &out), DLPG_OK) << dlpg_last_error();
}

TEST(CoreTensor, DtypesDevicesAndOffsets) {
  float buf[16];
  dlpg__tensor_t out;
  T a(buf, kF32, {4, 4});
  a.t.byte_offset = 8;
  ASSERT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &a.t, &out), DLPG_OK);
  EXPECT_EQ(out.numel, 16);
  EXPECT_EQ(out.nbytes, 64u);
  EXPECT_EQ(out.ptr, reinterpret_cast<char *>(buf) + 8);
  EXPECT_STREQ(dlpg__backend_name(out.backend), "shm");  // the first line for host memory
  EXPECT_EQ(out.dtype, DLPG__DT_FLOAT32);

  struct { uint8_t code, bits; dlpg__dtype_t dt; } cases[] = {
      {kDLBfloat, 16, DLPG__DT_BFLOAT16}, {DLPG_DL_BOOL, 8, DLPG__DT_BOOL},
      {DLPG_DL_FLOAT8_E4M3FN, 8, DLPG__DT_FLOAT8_E4M3FN},
      {DLPG_DL_FLOAT8_E5M2, 8, DLPG__DT_FLOAT8_E5M2}, {kDLUInt, 16, DLPG__DT_UINT16},
      {kDLFloat, 16, DLPG__DT_FLOAT16}, {kDLInt, 8, DLPG__DT_INT8}};
  for (auto &c : cases) {
    T x(buf, DLDataType{c.code, c.bits, 1}, {2});
    ASSERT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &x.t, &out), DLPG_OK) << dlpg_last_error();
    EXPECT_EQ(out.dtype, c.dt);
  }
  T bad(buf, DLDataType{kDLFloat, 8, 1}, {2});
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &bad.t, &out), DLPG_ERR_UNSUPPORTED);
  T lanes(buf, DLDataType{kDLFloat, 32, 4}, {2});
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &lanes.t, &out), DLPG_ERR_UNSUPPORTED);

  T cuda(buf, kF32, {2}, kDLCUDA, 3);
  ASSERT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &cuda.t, &out), DLPG_OK);
  EXPECT_STREQ(dlpg__backend_name(out.backend), "nccl");
  EXPECT_EQ(out.device_id, 3);
  T host(buf, kF32, {2}, kDLCUDAHost);
  ASSERT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &host.t, &out), DLPG_OK);
  EXPECT_STREQ(dlpg__backend_name(out.backend), "shm");
  T vulkan(buf, kF32, {2}, kDLVulkan);
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 1, &vulkan.t, &out), DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "f: inputs[1] is on device type 7 (vulkan)"))
      << dlpg_last_error();
}

TEST(CoreTensor, ShapesStridesAndNulls) {
  float buf[16];
  dlpg__tensor_t out;
  T s(buf, kF32, {4, 4});
  s.SetStrides({1, 4});
  EXPECT_EQ(dlpg__tensor_from_dl("dlpg_allreduce", "inputs", 1, &s.t, &out),
            DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(),
                       "dlpg_allreduce: inputs[1] has strides (1, 4) but shape (4, 4) needs "
                       "compact row-major strides (4, 1)"))
      << dlpg_last_error();
  T ok(buf, kF32, {4, 1, 4});
  ok.SetStrides({4, 99, 1});  // size-1 dims may carry any stride
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &ok.t, &out), DLPG_OK);
  T scalar(buf, kF32, {});
  ASSERT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &scalar.t, &out), DLPG_OK);
  EXPECT_EQ(out.numel, 1);
  T empty(nullptr, kF32, {0, 5});
  ASSERT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &empty.t, &out), DLPG_OK);
  EXPECT_EQ(out.numel, 0);
  T nodata(nullptr, kF32, {3});
  EXPECT_EQ(dlpg__tensor_from_dl("f", nullptr, -1, &nodata.t, &out), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "tensor has 3 elements but data is NULL"));
  T neg(buf, kF32, {2, -1});
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &neg.t, &out), DLPG_ERR_INVALID_ARGUMENT);
  T noshape(buf, kF32, {2});
  noshape.t.shape = nullptr;
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &noshape.t, &out), DLPG_ERR_INVALID_ARGUMENT);
  T huge(buf, kF32, {int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 0, &huge.t, &out), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg__tensor_from_dl("f", "inputs", 2, nullptr, &out), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "inputs[2] is NULL"));
}

// Each backend's own rule (plugin/gloo/backend.c, plugin/nccl/rules.c), as validation asks it.
TEST(CoreTensor, ReduceSupportTables) {
  EXPECT_EQ(dlpg__gloo_check_reduce("f", DLPG__DT_INT16, DLPG_BXOR), DLPG_OK);
  EXPECT_EQ(dlpg__gloo_check_reduce("f", DLPG__DT_BOOL, DLPG_MAX), DLPG_OK);
  EXPECT_EQ(dlpg__gloo_check_reduce("f", DLPG__DT_BFLOAT16, DLPG_AVG), DLPG_OK);
  EXPECT_EQ(dlpg__gloo_check_reduce("f", DLPG__DT_INT32, DLPG_AVG), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(dlpg__gloo_check_reduce("f", DLPG__DT_FLOAT32, DLPG_BAND), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(dlpg__gloo_check_reduce("f", DLPG__DT_FLOAT8_E4M3FN, DLPG_SUM), DLPG_ERR_UNSUPPORTED);

  const int v228 = 22809, v223 = 22304; // NCCL 2.28.9, 2.23.4
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_FLOAT8_E5M2, DLPG_AVG, v228, 0, 9), DLPG_OK);
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_FLOAT8_E4M3FN, DLPG_SUM, v228, 0, 10), DLPG_OK);
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_BOOL, DLPG_PROD, v228, 0, 0), DLPG_OK);
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_BFLOAT16, DLPG_AVG, v223, 0, 8), DLPG_OK);
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_INT16, DLPG_SUM, v228, 0, 9), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_UINT16, DLPG_MAX, v228, 0, 9), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_INT32, DLPG_AVG, v228, 0, 9), DLPG_ERR_UNSUPPORTED);
  // NCCL has no any-source receive: refused at validation, naming why.
  EXPECT_EQ(dlpg__nccl_p2p_rule("dlpg_recv", DLPG__OP_RECV, DLPG_ANY_SOURCE), DLPG_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(dlpg_last_error()).find("NCCL has no any-source receive"), std::string::npos);
  EXPECT_EQ(dlpg__nccl_p2p_rule("dlpg_recv", DLPG__OP_RECV, 1), DLPG_OK);
  for (dlpg_reduce_op_t op : {DLPG_BAND, DLPG_BOR, DLPG_BXOR}) {
    EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_INT32, op, v228, 0, 9), DLPG_ERR_UNSUPPORTED);
    EXPECT_TRUE(Contains(dlpg_last_error(),
                         "bitwise reductions are not supported by NCCL; use CPU tensors (Gloo)"))
        << dlpg_last_error();
  }
  // fp8 reductions: NCCL 2.24 and sm_90 or newer, else UNSUPPORTED naming what is missing.
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_FLOAT8_E4M3FN, DLPG_SUM, v223, 1, 9),
            DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "f: NCCL 2.23.4 cannot reduce float8_e4m3fn"))
      << dlpg_last_error();
  EXPECT_EQ(dlpg__nccl_reduce_rule("f", DLPG__DT_FLOAT8_E5M2, DLPG_MAX, v228, 1, 8),
            DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "only on sm_90 or newer; cuda:1 is sm_80"))
      << dlpg_last_error();
}

// dlpg's CPU table as the capability query (dlpg_reduce_supported) reports it: the query asks
// Gloo's own check, so this pins Gloo's rules through the public function (the conformance
// suite asks the query instead of knowing this table). sum/prod/min/max on every non-float8
// dtype, avg on the floating ones, bitwise on integers and bool, no float8 reductions.
TEST(CoreCapability, CpuTableThroughTheQuery) {
  struct D { uint8_t code, bits; bool is_float, is_int_or_bool, is_fp8; };
  const D ds[] = {{kDLInt, 8, 0, 1, 0},   {kDLInt, 16, 0, 1, 0},   {kDLInt, 32, 0, 1, 0},
                  {kDLInt, 64, 0, 1, 0},  {kDLUInt, 8, 0, 1, 0},   {kDLUInt, 16, 0, 1, 0},
                  {kDLUInt, 32, 0, 1, 0}, {kDLUInt, 64, 0, 1, 0},  {kDLFloat, 16, 1, 0, 0},
                  {kDLBfloat, 16, 1, 0, 0}, {kDLFloat, 32, 1, 0, 0}, {kDLFloat, 64, 1, 0, 0},
                  {DLPG_DL_BOOL, 8, 0, 1, 0}, {DLPG_DL_FLOAT8_E4M3FN, 8, 0, 0, 1},
                  {DLPG_DL_FLOAT8_E5M2, 8, 0, 0, 1}};
  for (const D &d : ds)
    for (int op = DLPG_SUM; op <= DLPG_BXOR; op++) {
      bool want;
      if (d.is_fp8) want = false;
      else if (op <= DLPG_MAX) want = true;
      else if (op == DLPG_AVG) want = d.is_float;
      else want = d.is_int_or_bool;
      DLDataType t{d.code, d.bits, 1};
      dlpg_status_t s = dlpg_reduce_supported(DLDevice{kDLCPU, 0}, t, (dlpg_reduce_op_t)op);
      EXPECT_EQ(s, want ? DLPG_OK : DLPG_ERR_UNSUPPORTED)
          << "code " << int(d.code) << " bits " << int(d.bits) << " op " << op << ": "
          << dlpg_last_error();
    }
  // dlpg's wording: the device, dtype and op first, then the backend's reason.
  DLDataType i32{kDLInt, 32, 1}, f32{kDLFloat, 32, 1};
  EXPECT_EQ(dlpg_reduce_supported(DLDevice{kDLCPU, 0}, i32, DLPG_AVG), DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "dlpg_reduce_supported(cpu, int32, avg): reduce op avg "
                                          "needs a floating or complex dtype, got int32 (shm)"))
      << dlpg_last_error();
  EXPECT_EQ(dlpg_reduce_supported(DLDevice{kDLOpenCL, 0}, f32, DLPG_SUM), DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "dlpg_reduce_supported: tensor is on device type 4 "
                                          "(opencl); dlpg serves cpu, cuda_host (shm); cpu, "
                                          "cuda_host (gloo)"))
      << dlpg_last_error();
}

// Only the ABI is exported from libdlpg.so: internal names (dlpg__*) are not, whichever
// folder they live in (ci/check-symbols.sh compares the whole list).
TEST(CoreExports, InternalNamesAreNotExported) {
  void *h = dlopen(DLPG_DEFAULT_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_NE(dlsym(h, "dlpg_reduce_supported"), nullptr);
  for (const char *sym : {"dlpg__error", "dlpg__last_error", "dlpg__tensor_from_dl",
                          "dlpg__gloo_run", "dlpg__gloo_check_reduce", "dlpg__backend_get"})
    EXPECT_EQ(dlsym(h, sym), nullptr) << sym << " is internal but exported";
  dlclose(h);
}

// The registry: which backend serves which device, known without loading any module.
TEST(CoreBackend, RegistryServesDevices) {
  // Host memory: the shared-memory backend's line first (validation hands it out; each
  // group then chooses its collectives' line, backend_choice.c), Gloo's after it. Sends and
  // receives stay on the first line too, which decides per pair (and hands a pair it cannot
  // serve to the next line).
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_device(kDLCPU)), "shm");
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_device(kDLCUDAHost)), "shm");
  int first = dlpg__backend_for_device(kDLCPU);
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_kind(first, DLPG__OP_SEND)), "shm");
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_kind(first, DLPG__OP_RECV)), "shm");
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_kind(first, DLPG__OP_ALLREDUCE)), "shm");
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_device(kDLCUDA)), "nccl");
  EXPECT_STREQ(dlpg__backend_name(dlpg__backend_for_device(kDLCUDAManaged)), "nccl");
  EXPECT_EQ(dlpg__backend_for_device(kDLVulkan), -1);
  EXPECT_EQ(dlpg__backend_for_device(99), -1);
  char buf[256];
  dlpg__backend_devices(buf, sizeof buf);
  EXPECT_STREQ(buf, "cpu, cuda_host (shm); cpu, cuda_host (gloo); cuda, cuda_managed (nccl)");
  // The built-in backend needs no load.
  ASSERT_NE(dlpg__backend_loaded(dlpg__backend_for_device(kDLCPU)), nullptr);
}

// A store this process serves on an ephemeral port.
struct Served {
  dlpg_store_t *store = nullptr;
  int port = 0;
  Served() {
    EXPECT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &store), DLPG_OK)
        << dlpg_last_error();
    if (store) dlpg_store_port(store, &port);
  }
  ~Served() { dlpg_store_close(store); }
  std::string Url() const { return "tcp://127.0.0.1:" + std::to_string(port); }
};

TEST(CoreGroup, CreateValidatesAndResolves) {
  Served s;
  ASSERT_TRUE(s.store);
  dlpg_group_t *g = nullptr;
  EXPECT_EQ(dlpg_group_create(nullptr, 0, 1, nullptr, &g), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_group_create(s.store, 0, 0, nullptr, &g), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_group_create(s.store, 2, 2, nullptr, &g), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "rank is 2 but world_size is 2")) << dlpg_last_error();
  EXPECT_EQ(dlpg_group_create(s.store, 0, 1, nullptr, nullptr), DLPG_ERR_INVALID_ARGUMENT);
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.struct_size = 0;
  EXPECT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_ERR_INVALID_ARGUMENT);
  // An older caller's smaller struct: only struct_size and timeout_s are read.
  o.struct_size = offsetof(dlpg_group_options_t, name);
  o.timeout_s = 7;
  o.name = reinterpret_cast<const char *>(1);  // beyond struct_size: must not be read
  ASSERT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(g->timeout_s, 7);
  EXPECT_STREQ(g->name, "dlpg");
  int r = -1, n = -1;
  EXPECT_EQ(dlpg_group_rank(g, &r), DLPG_OK);
  EXPECT_EQ(dlpg_group_size(g, &n), DLPG_OK);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(dlpg_group_abort(g), DLPG_OK);
  EXPECT_EQ(dlpg_group_abort(g), DLPG_OK);
  float x = 1;
  T t(&x, kF32, {1});
  DLTensor *in[] = {&t.t};
  EXPECT_EQ(dlpg_allreduce(g, in, nullptr, 1, DLPG_SUM, nullptr, nullptr), DLPG_ERR_ABORTED);
  EXPECT_EQ(dlpg_group_destroy(g), DLPG_OK);
  EXPECT_EQ(dlpg_group_destroy(nullptr), DLPG_OK);
  // A huge timeout is kept to a year: Gloo's nanosecond deadlines would overflow (and time
  // out at once) beyond that.
  o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 1e17;
  ASSERT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(g->timeout_s, 365.0 * 86400.0);
  EXPECT_EQ(dlpg_group_destroy(g), DLPG_OK);
}

// The NCCL communicator settings: checked at the door, copied into the group's view (what
// plugin/nccl applies), defaults for an older caller's struct, inherited by a split child
// but where its own options set them.
TEST(CoreGroup, NcclOptionsCheckedCopiedAndInherited) {
  Served s;
  ASSERT_TRUE(s.store);
  dlpg_group_t *g = nullptr;
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.nccl_max_ctas = 65;
  EXPECT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "options->nccl_max_ctas is 65 (must be 1..64"))
      << dlpg_last_error();
  o = DLPG_GROUP_OPTIONS_INIT;
  o.nccl_min_ctas = 8;
  o.nccl_max_ctas = 4;
  EXPECT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "nccl_min_ctas (8) exceeds options->nccl_max_ctas (4)"))
      << dlpg_last_error();
  o = DLPG_GROUP_OPTIONS_INIT;
  o.nccl_cga_cluster_size = 9;
  EXPECT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_ERR_INVALID_ARGUMENT);
  // CTA counts of 0 (a zeroed struct) are the default, not an error.
  o = DLPG_GROUP_OPTIONS_INIT;
  o.nccl_min_ctas = 0;
  o.nccl_max_ctas = 0;
  ASSERT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(dlpg__be_group_comm(&g->view)->min_ctas, -1);
  EXPECT_EQ(dlpg_group_destroy(g), DLPG_OK);

  // A caller built before the fields: all NCCL's defaults, whatever lies beyond its struct.
  o = DLPG_GROUP_OPTIONS_INIT;
  o.struct_size = offsetof(dlpg_group_options_t, nccl_cga_cluster_size);
  o.nccl_min_ctas = 1000;  // beyond struct_size: must not be read
  ASSERT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_OK) << dlpg_last_error();
  const dlpg__be_comm_config_t *c = dlpg__be_group_comm(&g->view);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->cga_cluster_size, -1);
  EXPECT_EQ(c->min_ctas, -1);
  EXPECT_EQ(c->max_ctas, -1);
  EXPECT_EQ(c->traffic_class, -1);
  EXPECT_EQ(c->net_name, nullptr);
  EXPECT_EQ(c->comm_name, nullptr);
  EXPECT_EQ(dlpg_group_destroy(g), DLPG_OK);

  std::string net = "Socket";
  o = DLPG_GROUP_OPTIONS_INIT;
  o.name = "nccl-opts";
  o.nccl_cga_cluster_size = 0;
  o.nccl_min_ctas = 2;
  o.nccl_max_ctas = 16;
  o.nccl_traffic_class = 5;
  o.nccl_net_name = net.c_str();
  o.nccl_comm_name = "parent";
  ASSERT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_OK) << dlpg_last_error();
  net = "changed";  // copied at creation
  c = dlpg__be_group_comm(&g->view);
  EXPECT_EQ(c->cga_cluster_size, 0);
  EXPECT_EQ(c->min_ctas, 2);
  EXPECT_EQ(c->max_ctas, 16);
  EXPECT_EQ(c->traffic_class, 5);
  EXPECT_STREQ(c->net_name, "Socket");
  EXPECT_STREQ(c->comm_name, "parent");

  dlpg_group_options_t co = DLPG_GROUP_OPTIONS_INIT;
  co.nccl_max_ctas = 32;
  co.nccl_comm_name = "child";
  dlpg_group_t *child = nullptr;
  ASSERT_EQ(dlpg_group_split(g, 0, 0, &co, &child), DLPG_OK) << dlpg_last_error();
  const dlpg__be_comm_config_t *cc = dlpg__be_group_comm(&child->view);
  EXPECT_EQ(cc->cga_cluster_size, 0);
  EXPECT_EQ(cc->min_ctas, 2);
  EXPECT_EQ(cc->max_ctas, 32);
  EXPECT_EQ(cc->traffic_class, 5);
  EXPECT_STREQ(cc->net_name, "Socket");
  EXPECT_STREQ(cc->comm_name, "child");
  EXPECT_EQ(dlpg_group_destroy(child), DLPG_OK);
  EXPECT_EQ(dlpg_group_destroy(g), DLPG_OK);
}

// A backend poller that reports done after a set number of polls.
struct FakePoll {
  std::atomic<int> left{3};
  std::atomic<int> released{0};
  dlpg_status_t result = DLPG_OK;
  static dlpg_status_t Poll(void *d, int *done) {
    auto *f = static_cast<FakePoll *>(d);
    *done = --f->left <= 0;
    if (*done && f->result != DLPG_OK) return dlpg__error(f->result, "fake failure");
    return DLPG_OK;
  }
  static void Release(void *d) { static_cast<FakePoll *>(d)->released = 1; }
};

TEST(CoreWork, BackendPollerTimeoutAndAbort) {
  Served s;
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 0.2;
  dlpg_group_t *g = nullptr;
  ASSERT_EQ(dlpg_group_create(s.store, 0, 1, &o, &g), DLPG_OK);

  dlpg__work_backend_t be{FakePoll::Poll, FakePoll::Release};
  FakePoll f;
  f.result = DLPG_ERR_REMOTE;
  struct dlpg_work *w = nullptr;
  ASSERT_EQ(dlpg__work_new(g, &w), DLPG_OK);
  dlpg__work_set_backend(w, &be, &f);
  int done = 0;
  EXPECT_EQ(dlpg_work_test(w, &done), DLPG_OK);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(dlpg_work_wait(w, 5), DLPG_ERR_REMOTE);
  EXPECT_STREQ(dlpg_work_error(w), "fake failure");
  EXPECT_STREQ(dlpg_last_error(), "fake failure");
  dlpg_work_free(w);
  EXPECT_EQ(f.released, 1);

  // CPU work that never completes: the wait times out and aborts the group.
  ASSERT_EQ(dlpg__work_new(g, &w), DLPG_OK);
  // A NaN timeout would be a wait without a deadline: refused.
  EXPECT_EQ(dlpg_work_wait(w, NAN), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "dlpg_work_wait: timeout_s is NaN")) << dlpg_last_error();
  EXPECT_EQ(g->aborted.load(), 0);
  double t0 = dlpg__now();
  EXPECT_EQ(dlpg_work_wait(w, 0), DLPG_ERR_TIMEOUT);  // the group's 0.2 s
  EXPECT_LT(dlpg__now() - t0, Scaled(3.0));
  EXPECT_TRUE(Contains(dlpg_last_error(), "did not complete within 0.2 s")) << dlpg_last_error();
  EXPECT_EQ(g->aborted.load(), 1);
  // The wait's outcome is the work's: test says done, the error is the
  // timeout's message, a second wait gives the same, and the executor's late completion
  // does not replace it.
  std::string timed_out = dlpg_last_error();
  done = 0;
  EXPECT_EQ(dlpg_work_test(w, &done), DLPG_OK);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(timed_out, dlpg_work_error(w));
  EXPECT_EQ(dlpg_work_wait(w, 5), DLPG_ERR_TIMEOUT);
  EXPECT_EQ(timed_out, dlpg_last_error());
  // Free the group before the work: the work keeps the group's internals alive.
  dlpg_group_destroy(g);
  dlpg__work_complete(w, DLPG_ERR_ABORTED, "late");
  EXPECT_EQ(timed_out, dlpg_work_error(w));
  dlpg_work_free(w);
  dlpg_work_free(nullptr);
}

TEST(CoreOps, ValidationAtTheDoor) {
  Served s;
  dlpg_group_t *g = nullptr;
  ASSERT_EQ(dlpg_group_create(s.store, 0, 2, nullptr, &g), DLPG_OK);
  float a[8] = {0}, b[16] = {0};
  int64_t c[8] = {0};
  T ta(a, kF32, {8}), tb(b, kF32, {16}), tc(c, kI64, {8});
  DLTensor *in[] = {&ta.t};
  DLTensor *two[] = {&ta.t, &ta.t};
  dlpg_work_t *w = nullptr;
  EXPECT_EQ(dlpg_allreduce(nullptr, in, nullptr, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_allreduce(g, in, nullptr, 0, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "dlpg_allreduce: ntensors is 0")) << dlpg_last_error();
  EXPECT_EQ(dlpg_allreduce(g, nullptr, nullptr, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_allreduce(g, two, nullptr, 2, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "CPU operations take exactly one tensor")) << dlpg_last_error();
  DLTensor *oc[] = {&tc.t};
  EXPECT_EQ(dlpg_allreduce(g, in, oc, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "float32")) << dlpg_last_error();
  DLTensor *ob[] = {&tb.t};
  EXPECT_EQ(dlpg_allreduce(g, in, ob, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_allreduce(g, in, nullptr, 1, DLPG_BAND, nullptr, &w), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(dlpg_allreduce(g, in, nullptr, 1, static_cast<dlpg_reduce_op_t>(42), nullptr, &w),
            DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_allgather(g, in, nullptr, 1, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_allgather(g, in, in, 1, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "needs world_size 2 x ntensors 1 x 8 input elements = 16"))
      << dlpg_last_error();
  EXPECT_EQ(dlpg_reduce_scatter(g, in, in, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  T odd(a, kF32, {7});
  EXPECT_EQ(dlpg_alltoall(g, &odd.t, &odd.t, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_alltoall(g, &ta.t, nullptr, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_broadcast(g, in, nullptr, 1, 2, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_reduce(g, in, nullptr, 1, DLPG_SUM, -1, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_send(g, &ta.t, 0, 0, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "send to self")) << dlpg_last_error();
  EXPECT_EQ(dlpg_recv(g, &ta.t, 5, 0, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_send(g, &ta.t, 1, -1, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_send(g, nullptr, 1, 0, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  // CUDA descriptors: checked before any CUDA call, so this runs without a GPU.
  T c0(a, kF32, {8}, kDLCUDA, 0), c0b(b, kF32, {8}, kDLCUDA, 0);
  DLTensor *same[] = {&c0.t, &c0b.t};
  DLTensor *mixed[] = {&c0.t, &ta.t};
  EXPECT_EQ(dlpg_allreduce(g, same, nullptr, 2, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dlpg_last_error(), "two tensors on one device")) << dlpg_last_error();
  EXPECT_EQ(dlpg_allreduce(g, mixed, nullptr, 2, DLPG_SUM, nullptr, &w), DLPG_ERR_INVALID_ARGUMENT);
  DLTensor *cin[] = {&c0.t};
  EXPECT_EQ(dlpg_allreduce(g, cin, nullptr, 1, DLPG_BXOR, nullptr, &w), DLPG_ERR_UNSUPPORTED);
  EXPECT_TRUE(Contains(dlpg_last_error(), "bitwise reductions are not supported by NCCL"))
      << dlpg_last_error();
  // An fp8 reduction the device cannot do fails at the call, not at enqueue: without a GPU
  // the capability reads as unknown (sm_0). Without the module, the load failure says why.
  T f8(a, DLDataType{DLPG_DL_FLOAT8_E4M3FN, 8, 1}, {8}, kDLCUDA, 0);
  DLTensor *f8in[] = {&f8.t};
  const dlpg__backend_vtbl_t *nccl = nullptr;
  bool have_module = dlpg__backend_get("t", dlpg__backend_for_device(kDLCUDA), &nccl) == DLPG_OK;
  if (access("/dev/nvidiactl", F_OK) != 0) {
    EXPECT_EQ(dlpg_allreduce(g, f8in, nullptr, 1, DLPG_SUM, nullptr, &w), DLPG_ERR_UNSUPPORTED);
    EXPECT_TRUE(Contains(dlpg_last_error(), have_module ? "only on sm_90 or newer; cuda:0 is sm_"
                                                        : "could not be loaded"))
        << dlpg_last_error();
  }
  EXPECT_EQ(w, nullptr);  // out-parameters are written only on success
  EXPECT_EQ(dlpg_group_end(g), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dlpg_group_start(nullptr), DLPG_ERR_INVALID_ARGUMENT);
  dlpg_group_destroy(g);
}

// Runs fn(rank, group) on n threads, each with its own group over one served store.
template <class F>
void RunRanks(int n, double timeout_s, F fn, const char *name) {
  Served s;
  ASSERT_TRUE(s.store);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++)
    th.emplace_back([&, r] {
      dlpg_store_t *st = nullptr;
      ASSERT_EQ(dlpg_store_open(s.Url().c_str(), 30, &st), DLPG_OK) << dlpg_last_error();
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.timeout_s = timeout_s;
      o.name = name;
      dlpg_group_t *g = nullptr;
      ASSERT_EQ(dlpg_group_create(st, r, n, &o, &g), DLPG_OK) << dlpg_last_error();
      dlpg_store_close(st);
      fn(r, g);
      dlpg_group_destroy(g);
    });
  for (auto &t : th) t.join();
}

TEST(CoreSmoke, CpuAllreduceBarrierAndP2p) {
  const int n = 3, len = 33;
  std::vector<std::vector<float>> data(n, std::vector<float>(len));
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto &v : data)
    for (auto &x : v) x = u(rng);
  RunRanks(n, 30, [&](int r, dlpg_group_t *g) {
    std::vector<float> x = data[r], y(len);
    T tx(x.data(), kF32, {3, 11}), ty(y.data(), kF32, {len});
    DLTensor *in[] = {&tx.t}, *out[] = {&ty.t};
    ASSERT_EQ(dlpg_allreduce(g, in, out, 1, DLPG_SUM, nullptr, nullptr), DLPG_OK) << dlpg_last_error();
    for (int i = 0; i < len; i++)
      EXPECT_NEAR(y[i], data[0][i] + data[1][i] + data[2][i], 1e-5) << i;
    dlpg_work_t *w = nullptr;
    ASSERT_EQ(dlpg_allreduce(g, in, nullptr, 1, DLPG_AVG, nullptr, &w), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_work_wait(w, 0), DLPG_OK) << dlpg_work_error(w);
    dlpg_work_free(w);
    for (int i = 0; i < len; i++)
      EXPECT_NEAR(x[i], (data[0][i] + data[1][i] + data[2][i]) / 3, 1e-5) << i;
    ASSERT_EQ(dlpg_barrier(g, nullptr), DLPG_OK) << dlpg_last_error();
    // Ring exchange in one batch: send to the right, receive from the left.
    std::vector<float> mine = data[r], got(len);
    T ts(mine.data(), kF32, {len}), tr(got.data(), kF32, {len});
    dlpg_work_t *ws = nullptr, *wr = nullptr;
    ASSERT_EQ(dlpg_group_start(g), DLPG_OK);
    ASSERT_EQ(dlpg_send(g, &ts.t, (r + 1) % n, 5, nullptr, &ws), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_recv(g, &tr.t, (r + n - 1) % n, 5, nullptr, &wr), DLPG_OK) << dlpg_last_error();
    ASSERT_EQ(dlpg_group_end(g), DLPG_OK) << dlpg_last_error();
    EXPECT_EQ(dlpg_work_wait(ws, 0), DLPG_OK) << dlpg_work_error(ws);
    EXPECT_EQ(dlpg_work_wait(wr, 0), DLPG_OK) << dlpg_work_error(wr);
    dlpg_work_free(ws);
    dlpg_work_free(wr);
    EXPECT_EQ(got, data[(r + n - 1) % n]);
  }, "core-smoke");
}

// One thread drives two ranks: the batch spans both groups, so the send on rank 0's group
// and the matching receive on rank 1's group are issued together.
TEST(CoreSmoke, OneThreadDrivesTwoRanks) {
  Served s;
  ASSERT_TRUE(s.store);
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 30;
  o.name = "core-two";
  dlpg_group_t *g0 = nullptr, *g1 = nullptr;
  dlpg_store_t *s1 = nullptr;
  ASSERT_EQ(dlpg_store_open(s.Url().c_str(), 30, &s1), DLPG_OK);
  ASSERT_EQ(dlpg_group_create(s.store, 0, 2, &o, &g0), DLPG_OK);
  ASSERT_EQ(dlpg_group_create(s1, 1, 2, &o, &g1), DLPG_OK);
  dlpg_store_close(s1);
  int64_t a[5] = {1, -2, 3, 40, 5}, b[5] = {0};
  T ta(a, kI64, {5}), tb(b, kI64, {5});
  ASSERT_EQ(dlpg_group_start(g0), DLPG_OK);
  ASSERT_EQ(dlpg_send(g0, &ta.t, 1, 0, nullptr, nullptr), DLPG_OK);
  ASSERT_EQ(dlpg_recv(g1, &tb.t, 0, 0, nullptr, nullptr), DLPG_OK);
  ASSERT_EQ(dlpg_group_end(g0), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(std::memcmp(a, b, sizeof a), 0);
  dlpg_group_destroy(g0);
  dlpg_group_destroy(g1);
}

// An abort while the worker is still in the Gloo rendezvous: the pending operation must end
// with DLPG_ERR_ABORTED once the rendezvous completes, not run on the fresh context.
TEST(CoreSmoke, AbortDuringRendezvousAbortsThePendingOp) {
  std::atomic<int> aborted{0};
  RunRanks(2, 2, [&](int r, dlpg_group_t *g) {
    float x[4] = {1, 2, 3, 4};
    T t(x, kF32, {4});
    DLTensor *in[] = {&t.t};
    if (r == 0) {
      dlpg_work_t *w = nullptr;
      ASSERT_EQ(dlpg_allreduce(g, in, nullptr, 1, DLPG_SUM, nullptr, &w), DLPG_OK);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // worker waits for rank 1
      ASSERT_EQ(dlpg_group_abort(g), DLPG_OK);
      aborted = 1;
      int done = 0;
      for (int i = 0; i < 1000 && !done; i++) {
        ASSERT_EQ(dlpg_work_test(w, &done), DLPG_OK);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ASSERT_EQ(done, 1);
      EXPECT_TRUE(Contains(dlpg_work_error(w), "aborted")) << dlpg_work_error(w);
      dlpg_work_free(w);
    } else {
      while (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      // Joins the rendezvous with the matching operation; rank 0 must not run it any more,
      // so this fails (with whatever status the closed connection gives).
      dlpg_allreduce(g, in, nullptr, 1, DLPG_SUM, nullptr, nullptr);
    }
  }, "core-abort-rdv");
}

// A missing peer: the wait times out, aborts the group, and later operations fail fast.
TEST(CoreSmoke, MissingPeerTimesOut) {
  Served s;
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 1;
  o.name = "core-missing";
  dlpg_group_t *g = nullptr;
  ASSERT_EQ(dlpg_group_create(s.store, 0, 2, &o, &g), DLPG_OK);
  float x[4] = {1, 2, 3, 4};
  T t(x, kF32, {4});
  DLTensor *in[] = {&t.t};
  double t0 = dlpg__now();
  dlpg_status_t st = dlpg_allreduce(g, in, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  EXPECT_TRUE(st == DLPG_ERR_TIMEOUT || st == DLPG_ERR_ABORTED) << dlpg_status_name(st);
  EXPECT_LT(dlpg__now() - t0, Scaled(10.0));
  EXPECT_NE(dlpg_last_error()[0], '\0');
  EXPECT_EQ(dlpg_allreduce(g, in, nullptr, 1, DLPG_SUM, nullptr, nullptr), DLPG_ERR_ABORTED);
  t0 = dlpg__now();
  dlpg_group_destroy(g);
  EXPECT_LT(dlpg__now() - t0, Scaled(10.0));
}

// Sends and receives are decided per pair from the two ranks' published localities: with
// rank 1's string made to say it runs elsewhere (a fake locality, written over its key
// after a first barrier and before any transfer), the pairs 0-1 and 1-2 go to the next line (gloo) while 0-2 stays on
// shm; the flight recorder names the backend each transfer ran on, and the data arrives.
TEST(CoreBackend, P2PDecidedPerPair) {
  Served s;
  const char *name = "perpair";
  std::vector<std::string> records(3);
  std::atomic<int> failures{0};
  auto body = [&](int rank) {
    dlpg_store_t *st = nullptr;
    ASSERT_EQ(dlpg_store_open(s.Url().c_str(), 30, &st), DLPG_OK) << dlpg_last_error();
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.name = name;
    o.timeout_s = Scaled(30);
    dlpg_group_t *g = nullptr;
    ASSERT_EQ(dlpg_group_create(st, rank, 3, &o, &g), DLPG_OK) << dlpg_last_error();
    size_t len = 0;
    // A first collective: every rank joins the group's job (the first on this store: its
    // keys are under perpair/dlpg/j1) and says where it runs; sends and receives are decided
    // per pair later, from the strings as they are then.
    ASSERT_EQ(dlpg_barrier(g, nullptr), DLPG_OK) << dlpg_last_error();
    if (rank == 1) {
      // Posted values: the string under <key>/v, the counter <key> says it is there.
      const char *key = "perpair/dlpg/j1/where/shm/1/v";
      char old[600];
      ASSERT_EQ(dlpg_store_get(st, key, 10, old, sizeof old, &len), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(dlpg_store_set(st, key, "elsewhere", 9), DLPG_OK);
      ASSERT_EQ(dlpg_store_set(st, "perpair/test/faked", "1", 1), DLPG_OK);
    } else {
      char b[4];
      ASSERT_EQ(dlpg_store_get(st, "perpair/test/faked", 20, b, sizeof b, &len), DLPG_OK);
    }
    auto tensor = [](std::vector<int32_t> &v) {
      DLTensor t{};
      t.data = v.data();
      t.device = {kDLCPU, 0};
      t.ndim = 1;
      t.dtype = {kDLInt, 32, 1};
      static thread_local int64_t shape;
      shape = static_cast<int64_t>(v.size());
      t.shape = &shape;
      return t;
    };
    auto data = [](int src, int dst) {
      std::vector<int32_t> v(1000);
      for (size_t i = 0; i < v.size(); i++) v[i] = static_cast<int32_t>(src * 100000 + dst * 1000 + i);
      return v;
    };
    // 0 -> 1 (gloo), 0 -> 2 (shm), 1 -> 2 (gloo); blocking, in an order that cannot deadlock.
    std::vector<std::pair<int, int>> plan = {{0, 1}, {0, 2}, {1, 2}};
    for (auto &e : plan) {
      if (rank != e.first && rank != e.second) continue;
      std::vector<int32_t> v = rank == e.first ? data(e.first, e.second) : std::vector<int32_t>(1000, -1);
      DLTensor t = tensor(v);
      dlpg_status_t r = rank == e.first ? dlpg_send(g, &t, e.second, 5, nullptr, nullptr)
                                        : dlpg_recv(g, &t, e.first, 5, nullptr, nullptr);
      EXPECT_EQ(r, DLPG_OK) << dlpg_last_error();
      if (rank == e.second && v != data(e.first, e.second)) failures++;
    }
    std::vector<int32_t> one(1, rank);
    DLTensor t = tensor(one);
    DLTensor *ts[] = {&t};
    EXPECT_EQ(dlpg_allreduce(g, ts, nullptr, 1, DLPG_SUM, nullptr, nullptr), DLPG_OK)
        << dlpg_last_error();
    EXPECT_EQ(one[0], 3);
    std::string rec(1 << 16, '\0');
    ASSERT_EQ(dlpg_group_flight_record(g, &rec[0], rec.size(), &len), DLPG_OK);
    rec.resize(len);
    records[rank] = rec;
    dlpg_group_destroy(g);
    dlpg_store_close(st);
  };
  std::vector<std::thread> th;
  for (int r = 0; r < 3; r++) th.emplace_back(body, r);
  for (auto &t : th) t.join();
  EXPECT_EQ(failures.load(), 0);
  // Each rank's p2p entries, by peer: "peer=1 backend=gloo".
  auto ran = [&](int rank, int peer) {
    std::istringstream in(records[rank]);
    std::string line, want = " peer=" + std::to_string(peer) + " ";
    while (std::getline(in, line))
      if (line.find("p2p_seq=") != std::string::npos && line.find(want) != std::string::npos) {
        size_t b = line.find("backend=");
        return b == std::string::npos ? std::string("?") : line.substr(b + 8, line.find(' ', b) - b - 8);
      }
    return std::string("none");
  };
  EXPECT_EQ(ran(0, 1), "gloo") << records[0];
  EXPECT_EQ(ran(0, 2), "shm") << records[0];
  EXPECT_EQ(ran(1, 0), "gloo") << records[1];
  EXPECT_EQ(ran(1, 2), "gloo") << records[1];
  EXPECT_EQ(ran(2, 0), "shm") << records[2];
  EXPECT_EQ(ran(2, 1), "gloo") << records[2];
  // The collectives: not every rank on one host, so Gloo.
  EXPECT_NE(records[0].find("op=dlpg_allreduce"), std::string::npos);
  EXPECT_NE(records[0].find("backend=gloo state=done status=DLPG_OK"), std::string::npos) << records[0];
}

}  // namespace
