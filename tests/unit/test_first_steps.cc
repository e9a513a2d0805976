// The messages a newcomer meets first, in dlpg's own words (test_wording.cc holds the ones
// of a running job): a CUDA tensor on a host without a usable CUDA driver, a complex tensor,
// a misspelled query parameter of a store URL, and a store host name that does not exist.
// Run against the built plugin through the conformance harness.
#include <cstdio>
#include <string>

#include "harness.h"
#include "test_store_util.h"

using namespace dlpgt;

namespace {

// Also prints the message, so a passing run shows the words a user reads (docs quote them).
void ExpectHas(const std::string &msg, const std::string &words) {
  printf("  message: %s\n", msg.c_str());
  EXPECT_NE(msg.find(words), std::string::npos) << "\"" << words << "\" not in: " << msg;
}

}  // namespace

// On a host without a GPU, a CUDA tensor is refused naming the tensor, its device and the
// missing driver, not only the CUDA call that failed.
TEST(FirstSteps, CudaTensorWithoutAUsableDriver) {
  if (MachineHasGpu()) GTEST_SKIP() << "this host has a GPU";
  if (A()->reduce_supported(DLDevice{kDLCUDA, 0}, DLType(DT::F32), DLPG_SUM) != DLPG_OK)
    GTEST_SKIP() << "no CUDA backend loads here: " << A()->last_error();
  RunRanks(Mode::kThreads, 1, [](RankCtx &c) {
    HostTensor in(DT::F32, {4}), out(DT::F32, {4});
    in.device_type = kDLCUDA;
    out.device_type = kDLCUDA;
    DLTensor *ip = in.dl(), *op = out.dl();
    EXPECT_EQ(c.api->allreduce(c.group, &ip, &op, 1, DLPG_SUM, nullptr, nullptr),
              DLPG_ERR_SYSTEM);
    std::string msg = c.api->last_error();
    ExpectHas(msg, "dlpg_allreduce: inputs[0] is on cuda:0 but this host has no usable CUDA");
    EXPECT_EQ(msg.find("cudaSetDevice"), std::string::npos) << msg;
  });
}

// A complex tensor is named as such (complex64, complex128), not by its DLPack code: in the
// refusal of an op it cannot reduce with, and complex32, which no CPU backend serves.
TEST(FirstSteps, ComplexDtypeIsNamed) {
  RunRanks(Mode::kThreads, 1, [](RankCtx &c) {
    for (int bits : {32, 64, 128}) {
      HostTensor in(DT::F64, {4}), out(DT::F64, {4});
      in.dtype.code = out.dtype.code = kDLComplex;
      in.dtype.bits = out.dtype.bits = static_cast<uint8_t>(bits);
      DLTensor *ip = in.dl(), *op = out.dl();
      EXPECT_EQ(c.api->allreduce(c.group, &ip, &op, 1, bits == 32 ? DLPG_SUM : DLPG_MAX, nullptr,
                                 nullptr),
                DLPG_ERR_UNSUPPORTED);
      std::string msg = c.api->last_error();
      ExpectHas(msg, "complex" + std::to_string(bits));
      EXPECT_EQ(msg.find("dtype code"), std::string::npos) << msg;
    }
  });
}

// A misspelled query parameter is named, with the parameters the scheme accepts.
TEST(FirstSteps, UnknownUrlQueryParameterIsNamed) {
  dlpg_store_t *s = nullptr;
  EXPECT_EQ(A()->store_open("tcp://127.0.0.1:1?tokn=Secret12", 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  std::string msg = A()->last_error();
  ExpectHas(msg, "unknown query parameter \"tokn\" (accepted: serve=0|1, token=SECRET)");
  EXPECT_EQ(A()->store_open("tcp://127.0.0.1:0?serve=yes", 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  ExpectHas(A()->last_error(), "serve=yes (accepted: serve=0|1");
  EXPECT_EQ(A()->store_open("redis://127.0.0.1:1?serve=1", 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  ExpectHas(A()->last_error(), "unknown query parameter \"serve\" (accepted: token=SECRET)");
}

// A host name that does not exist fails at once, naming it, instead of being retried for
// the whole timeout (a resolver that answers "no such name" will not change its mind soon).
TEST(FirstSteps, UnknownStoreHostFailsAtOnce) {
  dlpg_store_t *s = nullptr;
  double t0 = NowSeconds();
  // .invalid never resolves (RFC 2606).
  dlpg_status_t st = A()->store_open("tcp://no-such-host.invalid:29700", 60, &s);
  double took = NowSeconds() - t0;
  std::string msg = A()->last_error();
  if (st == DLPG_ERR_TIMEOUT && msg.find("Temporary failure") != std::string::npos)
    GTEST_SKIP() << "this host's resolver is unreachable: " << msg;
  EXPECT_EQ(st, DLPG_ERR_INVALID_ARGUMENT) << msg;
  EXPECT_LT(took, 30.0) << msg;
  ExpectHas(msg, "no-such-host.invalid");
  ExpectHas(msg, "is not a known host name");
}
