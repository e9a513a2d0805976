// CheckChild (child_check.h): a subgroup's rank and size against its member list, and an
// allreduce and an allgather on it checked against references computed here.
#include "child_check.h"

namespace dlpgt {

void CheckChild(RankCtx &c, dlpg_group_t *g, const std::vector<int> &members, uint64_t seed,
                size_t n, const std::string &what) {
  int rank = -1, size = -1;
  DLPG_ASSERT_OK(c.api, c.api->group_rank(g, &rank));
  DLPG_ASSERT_OK(c.api, c.api->group_size(g, &size));
  ASSERT_EQ(size, static_cast<int>(members.size())) << what;
  ASSERT_GE(rank, 0) << what;
  ASSERT_EQ(members[rank], c.rank) << what;

  HostTensor t(DT::I32, {static_cast<int64_t>(n)});
  Generate(DT::I32, DLPG_SUM, seed, c.rank, t.elems(), n);
  DLTensor *tp = t.dl();
  dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  ASSERT_EQ(s, DLPG_OK) << what << ": allreduce: " << c.api->last_error();
  std::vector<std::vector<uint8_t>> ins(size, std::vector<uint8_t>(n * 4));
  std::vector<const void *> ptrs;
  for (int r = 0; r < size; r++) {
    Generate(DT::I32, DLPG_SUM, seed, members[r], ins[r].data(), n);
    ptrs.push_back(ins[r].data());
  }
  std::vector<uint8_t> want(n * 4);
  Reduce(DT::I32, DLPG_SUM, ptrs, want.data(), n);
  EXPECT_EQ("", Compare(DT::I32, DLPG_SUM, t.elems(), want.data(), n)) << what << ": allreduce";

  uint64_t gseed = Mix(seed, 91);
  HostTensor in(DT::F32, {static_cast<int64_t>(n)});
  HostTensor out(DT::F32, {static_cast<int64_t>(size * n)});
  out.Fill(0x5A);
  Generate(DT::F32, DLPG_SUM, gseed, c.rank, in.elems(), n);
  DLTensor *ip = in.dl(), *op = out.dl();
  s = c.api->allgather(g, &ip, &op, 1, nullptr, nullptr);
  ASSERT_EQ(s, DLPG_OK) << what << ": allgather: " << c.api->last_error();
  std::vector<uint8_t> gwant(size * n * 4);
  for (int r = 0; r < size; r++)
    Generate(DT::F32, DLPG_SUM, gseed, members[r], gwant.data() + r * n * 4, n);
  EXPECT_EQ("", Compare(DT::F32, DLPG_SUM, out.elems(), gwant.data(), size * n))
      << what << ": allgather";
}

}  // namespace dlpgt
