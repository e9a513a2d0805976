// Backend modules: a CPU job runs whatever happens to the NCCL module, and a CUDA
// tensor whose module is absent or cannot load fails at the call with DLPG_ERR_UNSUPPORTED
// naming the module and the loader's reason. ctest runs this binary with the module pointed
// at a missing file and at a library without the entry point; ci/check-no-cuda.sh runs it
// with the real module present but the CUDA and NCCL libraries hidden from the loader.
//   DLPG_TEST_EXPECT_MODULE_FAIL  texts the failure must contain ('|' between them: the
//                                 module's path, the dlerror part); unset: the
//                                 module-failure case is skipped (nothing to expect)
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

using namespace dlpgt;

namespace {

const char *ExpectedFailure() {
  const char *v = getenv("DLPG_TEST_EXPECT_MODULE_FAIL");
  return v && v[0] ? v : nullptr;
}

// The '|'-separated parts of expect that msg lacks ("" when it has them all).
std::string MissingParts(const std::string &msg, const std::string &expect) {
  std::string missing;
  for (size_t at = 0; at != std::string::npos;) {
    size_t bar = expect.find('|', at);
    std::string part = expect.substr(at, bar == std::string::npos ? bar : bar - at);
    if (msg.find(part) == std::string::npos) missing += "\"" + part + "\" ";
    at = bar == std::string::npos ? bar : bar + 1;
  }
  return missing;
}

// A CPU allreduce on 2 ranks, checked against the reference.
void CpuAllreduce(RankCtx &c) {
  const size_t n = 1000;
  HostTensor t(DT::F32, {static_cast<int64_t>(n)});
  Generate(DT::F32, DLPG_SUM, c.seed, c.rank, t.elems(), n);
  DLTensor *tp = t.dl();
  ASSERT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr), DLPG_OK)
      << c.api->last_error();
  std::vector<std::vector<uint8_t>> all(c.size, std::vector<uint8_t>(n * 4));
  std::vector<const void *> ptrs;
  for (int r = 0; r < c.size; r++) {
    Generate(DT::F32, DLPG_SUM, c.seed, r, all[r].data(), n);
    ptrs.push_back(all[r].data());
  }
  std::vector<uint8_t> want(n * 4);
  Reduce(DT::F32, DLPG_SUM, ptrs, want.data(), n);
  EXPECT_EQ(Compare(DT::F32, DLPG_SUM, t.elems(), want.data(), n), "");
}

}  // namespace

TEST(BackendModule, CpuJobRuns) {
  RunRanks(Mode::kThreads, 2, CpuAllreduce);
  RunRanks(Mode::kProcesses, 2, CpuAllreduce);
}

TEST(BackendModule, CudaTensorWithoutModuleIsUnsupported) {
  const char *expect = ExpectedFailure();
  if (!expect) GTEST_SKIP() << "DLPG_TEST_EXPECT_MODULE_FAIL is unset (run by ctest/CI with it)";
  const char *path = getenv("DLPG_NCCL_BACKEND");
  RunRanks(Mode::kThreads, 1, [&](RankCtx &c) {
    HostTensor t(DT::F32, {8});
    t.device_type = kDLCUDA;  // never touched: the check happens before any device access
    DLTensor *tp = t.dl();
    for (int attempt = 0; attempt < 2; attempt++) {  // the failure is remembered, not retried
      dlpg_work_t *w = nullptr;
      EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w),
                DLPG_ERR_UNSUPPORTED);
      EXPECT_EQ(w, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_NE(msg.find("dlpg_allreduce: inputs[0] is on cuda:0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the nccl backend module"), std::string::npos) << msg;
      EXPECT_EQ(MissingParts(msg, expect), "") << "missing in " << msg;
      if (path) {
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
      }
    }
    // The group still runs CPU work afterwards; build info says the module did not load.
    CpuAllreduce(c);
    const char *info = nullptr;
    ASSERT_EQ(c.api->get_build_info(&info), DLPG_OK);
    std::string s = info;
    EXPECT_NE(s.find("gloo"), std::string::npos) << s;
    EXPECT_NE(s.find("nccl none (module"), std::string::npos) << s;
    EXPECT_NE(s.find("not loaded"), std::string::npos) << s;
  });
}

// A module built for another backend ABI (or whose tables report another version or size)
// is refused before it serves anything, and both sides are named: in the call's message
// (above) and in the build info, which is what dlpg-info prints.
TEST(BackendModule, OtherAbiNamesBothSides) {
  const char *expect = ExpectedFailure();
  if (!expect || !getenv("DLPG_TEST_EXPECT_ABI_MISMATCH"))
    GTEST_SKIP() << "DLPG_TEST_EXPECT_ABI_MISMATCH is unset (run by ctest with a fake module)";
  RunRanks(Mode::kThreads, 1, [&](RankCtx &c) {
    HostTensor t(DT::F32, {8});
    t.device_type = kDLCUDA;
    DLTensor *tp = t.dl();
    EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr),
              DLPG_ERR_UNSUPPORTED);
    std::string msg = c.api->last_error();
    EXPECT_NE(msg.find("backend ABI v"), std::string::npos) << msg;
    EXPECT_NE(msg.find("this libdlpg.so"), std::string::npos) << msg;
    const char *info = nullptr;
    ASSERT_EQ(c.api->get_build_info(&info), DLPG_OK);
    EXPECT_EQ(MissingParts(info, expect), "") << "missing in the build info " << info;
    CpuAllreduce(c);
  });
}
