// The check test_split and test_subset run on each child they make.
#ifndef DLPG_TESTS_CONFORMANCE_CHILD_CHECK_H_
#define DLPG_TESTS_CONFORMANCE_CHILD_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.h"

namespace dlpgt {

// Allreduce (int32 sum) and allgather (float32) of n elements on child g, whose rank i is
// parent rank members[i], each rank's data drawn from (seed, parent rank); the child's rank
// and size checked against members first. what names the child in failures.
void CheckChild(RankCtx &c, dlpg_group_t *g, const std::vector<int> &members, uint64_t seed,
                size_t n, const std::string &what);

}  // namespace dlpgt

#endif  // DLPG_TESTS_CONFORMANCE_CHILD_CHECK_H_
