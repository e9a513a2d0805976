// Connecting the pairwise contexts of point-to-point (p2p_state.h): a pair is connected by
// its two ranks alone, at the first transfer that needs it, watched for the peer's loss
// through the group's mesh; shared by the named transfers (p2p_pairs.cc) and the receives
// from any source (p2p_any.cc).
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "core/group/work.h"
#include "gloo/c_headers.h"
#include "gloo/create.h"
#include "gloo/ops_internal.h"
#include "gloo/p2p.h"
#include "gloo/p2p_state.h"

namespace dlpg_gloo {

bool claim(Transfer &t, int to) {
  int expect = Transfer::kConnecting;
  return t.phase.compare_exchange_strong(expect, to);
}

namespace {

using Clock = std::chrono::steady_clock;

std::string lost_while_connecting(const PairSet &ps, int peer, const char *fn) {
  return std::string(fn) + ": lost the connection to rank " + std::to_string(peer) + kLostWhy +
         " while rank " + std::to_string(ps.rank) + " connected to it for point-to-point";
}

// While this rank connects its pair with a peer: the group's mesh connection to that peer
// (when a collective created the mesh). A peer whose process ends meanwhile never joins the
// pair's rendezvous, which would end only at the deadline; Gloo closes the mesh pair's
// socket when the peer's end goes away. A lost socket (first_lost_peer) sets stop, which the
// rendezvous polls as its abort flag (as the group's abort does), and completes the works of
// the transfers to that peer still connecting (as the abort does): Gloo's own connection of
// the pair cannot be cut short, and would otherwise hold them until the deadline.
class ConnectWatch {
 public:
  ConnectWatch(PairSet &ps, int peer, std::vector<PeerSocket> mesh)
      : ps_(ps), peer_(peer), mesh_(std::move(mesh)) {
    if (mesh_.empty()) return;
    try {
      thread_ = std::thread([this] { run(); });
    } catch (...) {
      // No thread: the creation still ends at the group's abort or at its deadline.
    }
  }
  ~ConnectWatch() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  ConnectWatch(const ConnectWatch &) = delete;
  ConnectWatch &operator=(const ConnectWatch &) = delete;
  // The flag the creation polls: stop while the watch runs, else the group's abort.
  const std::atomic<int> &flag() const { return thread_.joinable() ? stop_ : ps_.aborted; }
  bool lost() const { return lost_.load(); }
  // Whether the watch finds the peer lost within grace: a creation that failed on its own
  // (Gloo's connect reset by the dying peer) may end before Gloo's loop has closed the mesh
  // pair's socket.
  bool lost_within(std::chrono::milliseconds grace) const {
    const Clock::time_point until = Clock::now() + grace;
    while (thread_.joinable() && !lost_.load() && !stop_.load() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return lost_.load();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!done_) {
      if (ps_.aborted.load()) {
        stop_.store(1);
        return;
      }
      if (first_lost_peer(mesh_) >= 0) {
        lost_.store(true);
        stop_.store(1);
        fail_connecting();
        return;
      }
      cv_.wait_for(lk, std::chrono::milliseconds(20));
    }
  }
  // The works complete outside ps_.mu: a failure goes to the group's observer, whose abort
  // takes that lock (dlpg__gloo_group_abort). The op may be freed by its pool thread once
  // the lock is released; the work, whose executor reference the claim holds, may not.
  void fail_connecting() {
    std::vector<std::pair<dlpg_work *, std::string>> claimed;
    {
      std::lock_guard<std::mutex> lk(ps_.mu);
      for (Transfer *t : ps_.in_flight)
        if (t->op->peer == peer_ && claim(*t, Transfer::kClaimed))
          claimed.emplace_back(t->op->work,
                               lost_while_connecting(ps_, peer_, dlpg__op_name(t->op->kind)));
    }
    for (auto &c : claimed) dlpg__work_complete(c.first, DLPG_ERR_REMOTE, c.second.c_str());
  }
  PairSet &ps_;
  const int peer_;
  const std::vector<PeerSocket> mesh_;
  std::atomic<int> stop_{0};
  std::atomic<bool> lost_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Announce this rank under prefix and poll (dlpg_store_add(0), which never blocks, and
// notices an abort) until peer has announced itself too: Gloo's rendezvous then finds the
// peer at once instead of waiting, deaf to an abort, until the deadline. (No timed store
// waits: store_adapter.cc says why.) stop: the group's abort or the watch's (ConnectWatch).
dlpg_status_t await_peer(PairSet &ps, const std::string &prefix, int peer,
                         Clock::time_point deadline, const std::atomic<int> &stop,
                         const char *fn) {
  const std::string mine = prefix + "/here/" + std::to_string(ps.rank);
  const std::string theirs = prefix + "/here/" + std::to_string(peer);
  dlpg_status_t st = dlpg_store_add(ps.store, mine.c_str(), 1, nullptr);
  if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
  double nap = 200e-6;
  for (;;) {
    if (stop.load())
      return dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted while rank %d waited for "
                         "rank %d to connect", fn, ps.rank, peer);
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0)
      return dlpg__error(DLPG_ERR_TIMEOUT,
                         "%s: rank %d timed out after %g s waiting for rank %d to take part in a "
                         "send/recv with it (store key '%s'); did rank %d issue the matching "
                         "operation?", fn, ps.rank, ps.timeout_s, peer, theirs.c_str(), peer);
    int64_t present = 0;
    st = dlpg_store_add(ps.store, theirs.c_str(), 0, &present);
    if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
    if (present > 0) return DLPG_OK;
    dlpg__sleep(nap < left ? nap : left);
    if (nap < 0.02) nap *= 2;
  }
}

}  // namespace

void complete(dlpg__op_t *op, dlpg_status_t st, const std::string &msg) {
  dlpg__work_complete(op->work, st, st == DLPG_OK ? nullptr : msg.c_str());
}

std::vector<PeerSocket> mesh_socket(dlpg__gloo_group_t *gg, int peer) {
  std::vector<PeerSocket> out;
  if (dlpg__gloo_ctx_t *mesh = gg->mesh.load())
    for (const PeerSocket &s : mesh->sockets)
      if (s.rank == peer) out.push_back(s);
  return out;
}

std::string pair_prefix(const PairSet &ps, int peer) {
  const int lo = ps.rank < peer ? ps.rank : peer, hi = ps.rank < peer ? peer : ps.rank;
  return ps.name + "/gloo/p2p/" + std::to_string(lo) + "-" + std::to_string(hi);
}

std::shared_ptr<Pair> pair_of(PairSet &ps, int peer) {
  std::shared_ptr<Pair> &p = ps.pairs[peer];
  if (!p) p = std::make_shared<Pair>();
  return p;
}

dlpg_status_t pair_ready(PairSet &ps, Pair &pair, int peer, Clock::time_point deadline,
                         std::vector<PeerSocket> mesh, dlpg__gloo_ctx_t **ctx, const char *fn) {
  std::unique_lock<std::mutex> lk(pair.mu);
  while (pair.state == Pair::kCreating) {
    if (ps.aborted.load())
      return dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted", fn);
    if (pair.cv.wait_until(lk, deadline) == std::cv_status::timeout)
      return dlpg__error(DLPG_ERR_TIMEOUT,
                         "%s: rank %d timed out after %g s waiting for its connection to rank %d",
                         fn, ps.rank, ps.timeout_s, peer);
  }
  if (pair.state == Pair::kReady) {
    *ctx = pair.ctx;
    return DLPG_OK;
  }
  if (pair.state == Pair::kFailed)
    return dlpg__error(pair.err, "%s: the connection to rank %d failed earlier: %s", fn, peer,
                       pair.msg.c_str());
  pair.state = Pair::kCreating;
  lk.unlock();

  const int lo = ps.rank < peer ? ps.rank : peer, hi = ps.rank < peer ? peer : ps.rank;
  const std::string prefix = pair_prefix(ps, peer);
  DLPG_INFO(GLOO, ps.rank, "connecting to rank %d (keys under %s)", peer, prefix.c_str());
  dlpg__gloo_ctx_t *c = nullptr;
  std::string msg;
  dlpg_status_t st;
  {
    ConnectWatch watch(ps, peer, std::move(mesh));
    st = await_peer(ps, prefix, peer, deadline, watch.flag(), fn);
    if (st == DLPG_OK) {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left < 0.001) left = 0.001;
      st = dlpg__gloo_ctx_create_abortable(ps.store, prefix.c_str(), ps.rank == lo ? 0 : 1, 2,
                                           left, &watch.flag(), &c);
      if (st != DLPG_OK)
        msg = "connecting rank " + std::to_string(ps.rank) + " to rank " + std::to_string(peer) +
              " for point-to-point failed: " + dlpg__last_error();
    } else {
      msg = dlpg__last_error();
    }
    const auto grace = std::chrono::milliseconds(300);
    if (st != DLPG_OK && !ps.aborted.load() &&
        (watch.lost() || (st == DLPG_ERR_REMOTE && watch.lost_within(grace)))) {
      st = DLPG_ERR_REMOTE;
      msg = lost_while_connecting(ps, peer, fn);
    }
  }
  lk.lock();
  if (st == DLPG_OK) {
    // The pair's context has ranks 0 and 1: messages name the group's ranks.
    c->group_ranks = {lo, hi};
    for (auto &p : c->peers) p.second = c->group_ranks[p.second];
    pair.ctx = c;
    pair.state = Pair::kReady;
    // An abort that ran during the rendezvous found no context to cut short.
    if (ps.aborted.load()) dlpg__gloo_ctx_abort(c);
  } else {
    pair.state = Pair::kFailed;
    pair.err = st;
    pair.msg = msg;
  }
  pair.cv.notify_all();
  lk.unlock();
  if (st != DLPG_OK) return dlpg__error(st, "%s", msg.c_str());
  *ctx = c;
  return DLPG_OK;
}


}  // namespace dlpg_gloo
