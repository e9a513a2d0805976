// ProcessGroupDlpg: the c10d calls beyond the operations (see backend.h): the sequence
// number and setTimeout (sparse all_reduce: sparse.cpp).
#include <algorithm>
#include <cstdlib>

#include "backend.h"

namespace dlpg_torch {

// libdlpg numbers every collective of a group (barrier included) from 1 in issue order and
// shows that number, coll_seq, in the flight recorder, which has no accessor of its own: the
// highest coll_seq among the recorder's entries is the group's. seq_ keeps the highest seen,
// for when the recorder's last entries (64 by default) are all sends and receives.
uint64_t ProcessGroupDlpg::getSequenceNumberForGroup() {
  dlpg_group_t* g = core_->g();
  const dlpg_api_t& a = api();
  size_t len = 0;
  check(a.group_flight_record(g, nullptr, 0, &len), "dlpg_group_flight_record");
  std::string text(len + 1024, '\0');  // room for entries added since
  check(a.group_flight_record(g, &text[0], text.size(), &len),
        "dlpg_group_flight_record");
  text.resize(std::min(len, text.size() - 1));
  static const char kKey[] = "coll_seq=";
  for (size_t at = text.find(kKey); at != std::string::npos; at = text.find(kKey, at)) {
    at += sizeof kKey - 1;
    seq_ = std::max<uint64_t>(seq_, std::strtoull(text.c_str() + at, nullptr, 10));
  }
  return seq_;
}

// The C ABI has no setter for a group's timeout, so the new one bounds what the torch layer
// waits for: wait() without a timeout of work issued after this call (libdlpg's own
// deadlines inside an operation keep the timeout the group was created with).
void ProcessGroupDlpg::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK(timeout.count() > 0, "dlpg: setTimeout: the timeout must be positive, got ",
              timeout.count(), " ms");
  core_->set_wait_timeout(timeout.count() / 1000.0);
}

}  // namespace dlpg_torch
