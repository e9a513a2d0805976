// Point-to-point on pairwise Gloo contexts (p2p.h): issue on the caller's thread, the
// transfer on a pool thread, sends and receives to self matched in memory.
//
// Matching: the n-th send from rank a to rank b with tag t meets the n-th receive of b from
// a with tag t (Gloo's own order for one slot, and MPI's). Both sides count their transfers
// per (peer, tag) at issue, and a transfer's messages use slots made of the tag and that
// number (ops_p2p.cc), so transfers can run on any threads, in any order, each waiting only
// for its own peer: a receive issued before its send never blocks that send.
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
#include "gloo/thread_pool.h"

namespace dlpg_gloo {
namespace {

using Clock = std::chrono::steady_clock;

// Whoever moves t out of kConnecting first completes its work: the pool thread, the abort or
// a ConnectWatch.
bool claim(Transfer &t, int to) {
  int expect = Transfer::kConnecting;
  return t.phase.compare_exchange_strong(expect, to);
}

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

namespace {

// A pool thread's job: connect the pair if needed, run the transfer, complete the work.
void run_transfer(const std::shared_ptr<PairSet> &ps, const std::shared_ptr<Pair> &pair,
                  Transfer &t, Clock::time_point deadline, std::vector<PeerSocket> mesh) {
  dlpg__op_t *op = t.op;
  const char *fn = dlpg__op_name(op->kind);
  dlpg__clear_error();
  dlpg__gloo_ctx_t *ctx = nullptr;
  dlpg_status_t st = pair_ready(*ps, *pair, op->peer, deadline, std::move(mesh), &ctx, fn);
  bool mine = claim(t, st == DLPG_OK ? Transfer::kRunning : Transfer::kClaimed);
  if (st == DLPG_OK && mine) {
    try {
      P2pLink link{ctx, ps->rank, ps->rank < op->peer ? 1 : 0, t.seq};
      run_p2p_one(link, *op, deadline);
    } catch (const StatusError &e) {
      // The island's own errors name their operation already.
      st = dlpg__error(ps->aborted.load() ? DLPG_ERR_ABORTED : e.status(), "%s", e.what());
    } catch (...) {
      // Gloo's own errors (a lost connection) named by the pair's group ranks.
      st = ps->aborted.load() ? status_from_current_exception(fn, true) : run_failure_status(ctx, fn);
    }
  }
  {
    std::lock_guard<std::mutex> lk(ps->mu);
    ps->in_flight.erase(&t);
  }
  if (mine) complete(op, st, st == DLPG_OK ? "" : dlpg__last_error());
  free(op);
}

// Size check and copy of a matched send and receive to self.
void match_self(const PairSet &ps, dlpg__op_t *send, dlpg__op_t *recv) {
  const dlpg__tensor_t &s = send->in[0], &r = recv->out[0];
  if (s.numel == r.numel && s.dtype == r.dtype) {
    if (s.nbytes) memmove(r.ptr, s.ptr, s.nbytes);
    complete(send, DLPG_OK, "");
    complete(recv, DLPG_OK, "");
  } else {
    const std::string what = "rank " + std::to_string(ps.rank) + " sent " +
                             describe_bytes(s.numel, s.dtype) + " to itself with tag " +
                             std::to_string(send->tag) + " but posted a receive of " +
                             describe_bytes(r.numel, r.dtype);
    complete(send, DLPG_ERR_INVALID_ARGUMENT, std::string("dlpg_send: ") + what);
    complete(recv, DLPG_ERR_INVALID_ARGUMENT, std::string("dlpg_recv: ") + what);
  }
  free(send);
  free(recv);
}

// Queue a send or receive to self (an owned copy) and match it with the oldest queued one
// of the other direction and the same tag.
void issue_self(PairSet &ps, dlpg__op_t *op) {
  const bool send = op->kind == DLPG__OP_SEND;
  std::unique_lock<std::mutex> lk(ps.mu);
  if (ps.aborted.load()) {
    lk.unlock();
    complete(op, DLPG_ERR_ABORTED, std::string(dlpg__op_name(op->kind)) + ": group aborted");
    free(op);
    return;
  }
  auto &other = send ? ps.self_recvs[op->tag] : ps.self_sends[op->tag];
  if (other.empty()) {
    (send ? ps.self_sends : ps.self_recvs)[op->tag].push_back(op);
    return;
  }
  dlpg__op_t *peer_op = other.front();
  other.pop_front();
  lk.unlock();
  if (send) match_self(ps, op, peer_op);
  else match_self(ps, peer_op, op);
}

void issue_one(const dlpg__op_t *src) {
  const char *fn = dlpg__op_name(src->kind);
  auto *gg = static_cast<dlpg__gloo_group_t *>(src->state);
  dlpg__op_t *op = static_cast<dlpg__op_t *>(malloc(sizeof *op));
  if (!op) {
    dlpg__work_complete(src->work, DLPG_ERR_SYSTEM, (std::string(fn) + ": out of memory").c_str());
    return;
  }
  memcpy(op, src, sizeof *op);
  std::shared_ptr<PairSet> ps = gg->p2p;
  if (op->peer == DLPG_ANY_SOURCE) {
    // Each pair has a 2-rank context of its own, so Gloo's recvFromAny (the ranks of one
    // context) cannot serve it: the matcher receives ahead from every peer (p2p_any.cc).
    match_issue(gg, op);
    return;
  }
  if (op->peer == ps->rank) {
    issue_self(*ps, op);
    return;
  }
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(ps->timeout_s));
  std::shared_ptr<Pair> pair;
  auto t = std::make_shared<Transfer>();
  t->op = op;
  bool matcher = false;
  {
    std::lock_guard<std::mutex> lk(ps->mu);
    // A receive from a peer whose next messages are awaited already by probes of a receive
    // from any source takes them in turn (p2p_any.cc): decided with the seq taken, so no
    // receive issued after it gets an earlier message of that peer.
    matcher = op->kind == DLPG__OP_RECV && match_wanted(*ps, op->peer, op->tag);
    if (!matcher) {
      pair = pair_of(*ps, op->peer);
      auto &seqs = op->kind == DLPG__OP_SEND ? ps->send_seq : ps->recv_seq;
      t->seq = seqs[std::make_pair(op->peer, op->tag)]++;
      if (!ps->aborted.load()) ps->in_flight.insert(t.get());
    }
  }
  if (matcher) {
    match_issue(gg, op);
    return;
  }
  if (ps->aborted.load()) {
    {
      std::lock_guard<std::mutex> lk(ps->mu);
      ps->in_flight.erase(t.get());
    }
    if (claim(*t, Transfer::kClaimed))
      complete(op, DLPG_ERR_ABORTED, std::string(fn) + ": group aborted");
    free(op);
    return;
  }
  std::vector<PeerSocket> mesh = mesh_socket(gg, op->peer);
  auto job = [ps, pair, t, deadline, mesh] { run_transfer(ps, pair, *t, deadline, mesh); };
  if (!pool_run(job)) {
    {
      std::lock_guard<std::mutex> lk(ps->mu);
      ps->in_flight.erase(t.get());
    }
    if (claim(*t, Transfer::kClaimed))
      complete(op, DLPG_ERR_SYSTEM, std::string(fn) + ": cannot start a thread for the transfer");
    free(op);
  }
}

}  // namespace

PairSet::~PairSet() {
  // Unmatched transfers to self: their works were completed at abort, or the group would
  // not be released (each pending work holds it).
  for (auto *m : {&self_sends, &self_recvs})
    for (auto &kv : *m)
      for (dlpg__op_t *op : kv.second) free(op);
  // Probes' buffers before the contexts they were created on.
  probes.clear();
  posted.clear();
  pairs.clear();  // the contexts first: they were connected through the store
  if (store) dlpg__store_release(store);
}

}  // namespace dlpg_gloo

extern "C" dlpg_status_t dlpg__gloo_p2p_issue(dlpg__op_t *const *ops, int n) {
  for (int i = 0; i < n; i++) {
    try {
      dlpg_gloo::issue_one(ops[i]);
    } catch (...) {
      // Only allocation can fail before the op reaches the pool or the self queue.
      const char *fn = dlpg__op_name(ops[i]->kind);
      dlpg__work_complete(ops[i]->work, DLPG_ERR_SYSTEM,
                          (std::string(fn) + ": out of memory issuing the transfer").c_str());
    }
  }
  return DLPG_OK;
}

extern "C" void dlpg__gloo_group_abort(dlpg__gloo_group_t *gg) {
  if (!gg) return;
  try {
    dlpg_gloo::PairSet &ps = *gg->p2p;
    ps.aborted.store(true);
    if (dlpg__gloo_ctx_t *mesh = gg->mesh.load()) dlpg__gloo_ctx_abort(mesh);
    std::map<int, std::deque<dlpg__op_t *>> sends, recvs;
    std::map<int, std::shared_ptr<dlpg_gloo::Pair>> pairs;
    std::vector<std::pair<dlpg_work *, std::string>> claimed;
    {
      std::lock_guard<std::mutex> lk(ps.mu);
      sends.swap(ps.self_sends);
      recvs.swap(ps.self_recvs);
      pairs = ps.pairs;
      // Transfers still connecting touch no tensor: complete them now, as the worker does
      // with its queue. Running ones are woken by the contexts' abort below.
      for (dlpg_gloo::Transfer *t : ps.in_flight)
        if (dlpg_gloo::claim(*t, dlpg_gloo::Transfer::kClaimed))
          claimed.emplace_back(t->op->work, std::string(dlpg__op_name(t->op->kind)) +
                                                ": group aborted while rank " +
                                                std::to_string(ps.rank) +
                                                " waited for its connection to rank " +
                                                std::to_string(t->op->peer));
    }
    // Outside ps.mu, as every completion of this file: a failed work goes to the group's
    // observer, and an abort's own could take this lock again (ConnectWatch says why).
    for (auto &c : claimed) dlpg__work_complete(c.first, DLPG_ERR_ABORTED, c.second.c_str());
    dlpg_gloo::match_wake(ps);
    for (auto &kv : pairs) {
      dlpg_gloo::Pair &p = *kv.second;
      std::lock_guard<std::mutex> lk(p.mu);
      if (p.ctx) dlpg__gloo_ctx_abort(p.ctx);
      p.cv.notify_all();
    }
    for (auto *m : {&sends, &recvs})
      for (auto &kv : *m)
        for (dlpg__op_t *op : kv.second) {
          dlpg_gloo::complete(op, DLPG_ERR_ABORTED,
                              std::string(dlpg__op_name(op->kind)) + ": group aborted");
          free(op);
        }
  } catch (...) {
    // Best effort: transfers still end at their deadline.
  }
}
