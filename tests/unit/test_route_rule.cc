// The CUDA module's choice between NCCL and the CUDA IPC path (plugin/nccl/route_rule.c), on
// made-up hosts and GPUs: a pure function, so it runs without CUDA.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "nccl/route_rule.h"

namespace {

std::string W(const std::string &host, const std::string &gpu, int dev) {
  return "host=" + host + ",boot=b-" + host + ",pidns=pid:[1]|gpu=" + gpu + "|dev=" + std::to_string(dev);
}

struct Out {
  dlpg_status_t st;
  int route = -1;
  std::string why, msg;
};

Out Decide(int forced, const std::vector<std::string> &ws, int max_ipc = 16) {
  std::vector<int> ranks;
  std::vector<const char *> w;
  for (size_t i = 0; i < ws.size(); i++) ranks.push_back((int)i), w.push_back(ws[i].c_str());
  Out o;
  char why[512] = "";
  dlpg__clear_error();
  o.st = dlpg__route_rule("allreduce", "g", forced, ranks.data(), (int)ranks.size(), w.data(),
                          max_ipc, &o.route, why, sizeof why);
  o.why = why;
  o.msg = dlpg__last_error();
  return o;
}

constexpr int kAuto = 0, kIpc = 2;

TEST(RouteRule, OwnGpusRunOnNccl) {
  Out o = Decide(kAuto, {W("a", "u0", 0), W("a", "u1", 1), W("b", "u2", 0)});
  ASSERT_EQ(o.st, DLPG_OK) << o.msg;
  EXPECT_EQ(o.route, DLPG__ROUTE_NCCL);
}

TEST(RouteRule, SharedGpuOnOneHostRunsOnIpc) {
  Out o = Decide(kAuto, {W("a", "u0", 0), W("a", "u1", 1), W("a", "u0", 0)});
  ASSERT_EQ(o.st, DLPG_OK) << o.msg;
  EXPECT_EQ(o.route, DLPG__ROUTE_IPC);
  EXPECT_NE(o.why.find("ranks 0 and 2 share GPU u0"), std::string::npos) << o.why;
}

TEST(RouteRule, SharedGpuAcrossHostsNamesRanksAndGpu) {
  Out o = Decide(kAuto, {W("a", "u0", 0), W("b", "u7", 3), W("b", "u7", 3)});
  EXPECT_EQ(o.st, DLPG_ERR_UNSUPPORTED);
  EXPECT_NE(o.msg.find("ranks 1 and 2 share GPU u7 (cuda:3 of host b)"), std::string::npos) << o.msg;
  EXPECT_NE(o.msg.find("rank 0 runs on host=a"), std::string::npos) << o.msg;
  EXPECT_NE(o.msg.find("rank 1 on host=b"), std::string::npos) << o.msg;
}

TEST(RouteRule, ForcedIpcNeedsOneHost) {
  Out o = Decide(kIpc, {W("a", "u0", 0), W("a", "u1", 1)});
  ASSERT_EQ(o.st, DLPG_OK) << o.msg;
  EXPECT_EQ(o.route, DLPG__ROUTE_IPC);
  o = Decide(kIpc, {W("a", "u0", 0), W("b", "u1", 1)});
  EXPECT_EQ(o.st, DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(o.msg.find("DLPG_CUDA_BACKEND=ipc"), std::string::npos) << o.msg;
  EXPECT_NE(o.msg.find("rank 1 on host=b"), std::string::npos) << o.msg;
}

// Two containers of one machine (pid namespaces apart) sharing a GPU: one GPU (its UUID),
// two hosts for CUDA IPC.
TEST(RouteRule, SameHostNameOtherPidNamespaceIsAnotherHost) {
  std::string other = "host=a,boot=b-a,pidns=pid:[2]|gpu=u0|dev=0";
  Out o = Decide(kAuto, {W("a", "u0", 0), other});
  EXPECT_EQ(o.st, DLPG_ERR_UNSUPPORTED) << o.msg;
  EXPECT_NE(o.msg.find("ranks 0 and 1 share GPU u0"), std::string::npos) << o.msg;
}

TEST(RouteRule, TooManyRanksForIpc) {
  std::vector<std::string> ws(5, W("a", "u0", 0));
  Out o = Decide(kAuto, ws, 4);
  EXPECT_EQ(o.st, DLPG_ERR_UNSUPPORTED);
  EXPECT_NE(o.msg.find("has 5 ranks"), std::string::npos) << o.msg;
}

}  // namespace
