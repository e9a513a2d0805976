// ProcessGroupDlpg::monitoredBarrier, as ProcessGroupGloo's: every other rank reports its
// arrival to rank 0, which waits for them in rank order (or for all of them, with
// wait_all_ranks) until the timeout, then releases them, or names in torch's words the ranks
// that did not arrive.
//
// It meets on the group's rendezvous store, not through the group: a receive from a rank
// that never comes would stay queued in the group (holding later operations behind it), and
// dlpg_work_wait's deadline aborts the whole group, where torch users expect the group to stay
// usable after a monitored barrier fails. A store key costs neither.
#include <algorithm>
#include <thread>

#include "backend.h"

namespace dlpg_torch {
namespace {

using Clock = std::chrono::steady_clock;

// Whether key exists by deadline. Looks at least once, so a timeout of 0 ends at once;
// check() never blocks, so the wait is bounded by the deadline (plus one store round trip).
bool appears(c10d::Store& store, const std::string& key, Clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store.check({key})) return true;
    auto now = Clock::now();
    if (now >= deadline) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    std::this_thread::sleep_for(std::min(pause, left + std::chrono::milliseconds(1)));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::string join(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); i++) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

const std::vector<uint8_t> kReleased{'o', 'k'};

std::string round_key(uint64_t round) {
  return "dlpg/monitored_barrier/" + std::to_string(round);
}

// Drop keys no rank will read again, so periodic monitored barriers do not grow the store;
// a store that cannot delete keeps them (harmless).
void forget(c10d::Store& store, const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    try {
      store.deleteKey(k);
    } catch (const std::exception&) {
      return;
    }
  }
}

}  // namespace

void ProcessGroupDlpg::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  TORCH_CHECK(store_, "dlpg: monitored_barrier: this group has no rendezvous store to meet "
              "on (internal error)");
  if (core_->has_pending_p2p()) core_->flush_p2p();
  const int64_t ms = std::max<int64_t>(0, opts.timeout.count());
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(ms);
  // Every rank counts its calls, so a round's keys are its own; a rank that arrives after
  // rank 0 gave up finds the round's verdict and raises at once.
  const uint64_t n = monitored_rounds_++;
  const std::string round = round_key(n);
  const std::string release = round + "/release";
  if (size_ == 1) return;

  if (rank_ != 0) {
    store_->set(round + "/arrived/" + std::to_string(rank_), kReleased);
    const char* cause = "timed out waiting for rank 0 to release it";
    std::string verdict;
    // Rank 0 gives its verdict at its own deadline, which ends with this rank's: wait up to
    // one more timeout (at most 2 s) for it, so that this rank can say which ranks failed.
    auto grace = std::min(std::chrono::milliseconds(ms), std::chrono::milliseconds(2000));
    if (appears(*store_, release, deadline + grace)) {
      std::vector<uint8_t> v = store_->get(release);
      if (v == kReleased) return;
      verdict = std::string(v.begin(), v.end());
      cause = "rank 0 reported: ";
    }
    TORCH_CHECK(false, "Rank ", rank_, " successfully reached monitoredBarrier, but received "
                "errors while waiting for send/recv from rank 0. Please check rank 0 logs for "
                "faulty rank. (dlpg: ", cause, verdict, ", timeout ", ms, " ms)");
  }

  std::vector<int> missing;
  for (int r = 1; r < size_; r++) {
    if (appears(*store_, round + "/arrived/" + std::to_string(r), deadline)) continue;
    missing.push_back(r);
    if (!wait_all_ranks) break;  // as Gloo's: the first rank in order that did not arrive
  }
  if (missing.empty()) {
    store_->set(release, kReleased);
    // Every rank has arrived here, so each has read the previous round's verdict.
    std::vector<std::string> done;
    for (int r = 1; r < size_; r++) done.push_back(round + "/arrived/" + std::to_string(r));
    if (n > 0) done.push_back(round_key(n - 1) + "/release");
    forget(*store_, done);
    return;
  }
  std::string error;
  if (ms == 0) {
    // Gloo's words for a timeout spent before any rank could be waited for.
    error = c10::str("Rank 0 timed out in monitoredBarrier after 0 ms: Rank",
                     missing.size() > 1 ? "s " : " ", join(missing), " had not arrived (",
                     wait_all_ranks ? "all ranks checked" : "first in rank order", ")");
  } else {
    error = c10::str("[Rank 0]: Rank", missing.size() > 1 ? "s " : " ", join(missing),
                     " failed to pass monitoredBarrier in ", ms, " ms");
  }
  // The others learn the verdict (now, or when they arrive late) instead of timing out.
  store_->set(release, std::vector<uint8_t>(error.begin(), error.end()));
  TORCH_CHECK(false, error);
}

}  // namespace dlpg_torch
