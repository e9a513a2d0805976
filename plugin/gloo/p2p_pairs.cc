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
#include <utility>
#include <vector>

#include "base/clock.h"
#include "core/group/work.h"
#include "gloo/c_headers.h"
#include "gloo/ops_internal.h"
#include "gloo/p2p.h"
#include "gloo/p2p_state.h"
#include "gloo/thread_pool.h"

namespace dlpg_gloo {

using Clock = std::chrono::steady_clock;

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
