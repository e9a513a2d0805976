// Receives from any source on the Gloo line (dlpg.h's DLPG_ANY_SOURCE): the matcher of
// p2p_state.h.
//
// Each pair of ranks has a 2-rank context of its own, so no Gloo receive can wait on every
// peer at once, and a sender does not know that its receiver takes any source. So the
// receiver posts, on each peer's pair, the receive of the first message of that peer's next
// send with the tag (a probe, at the seq a named receive would use), and a receive takes the
// first probe to arrive; the probes it did not take stay posted for the receives after it.
// Matching follows MPI: a message goes to the earliest receive issued that accepts it, and
// only the oldest probe of a peer (its next message) is eligible, so each sender's messages
// are matched in its issue order. While probes of a peer and tag are pending, named receives
// from that peer with that tag go through the matcher too (they come after the probes' seqs).
//
// A probe's pair may not be connected yet: it connects once the peer begins its own side
// (its first transfer with this rank announces it in the store), not before, so a peer that
// never sends to this rank is never waited for and its pair is never marked failed. A probe
// waits with no deadline of its own (a Gloo wait that times out fails its whole context):
// the abort, the group's release and a lost peer end it; each receive has its deadline.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
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
namespace {

using Clock = std::chrono::steady_clock;

// The longest single wait of a probe's buffer: never reached in practice (see above), and
// far from the overflow of Gloo's deadline arithmetic in nanoseconds.
constexpr std::chrono::hours kProbeWait{24 * 7};

bool accepts(const MatchRecv &r, int peer) {
  return r.op->peer == DLPG_ANY_SOURCE || r.op->peer == peer;
}

// Give waiting receives of tag the probes that arrived (or failed), earliest receive first;
// among several arrived peers, the message that arrived first. A failed probe stays at its
// peer's front, so every later receive that would take that peer's next message fails alike.
// Under ps.mu.
void match_locked(PairSet &ps, int tag) {
  auto it = ps.unmatched.find(tag);
  if (it == ps.unmatched.end()) return;
  auto &queue = it->second;
  for (auto r = queue.begin(); r != queue.end();) {
    std::shared_ptr<Probe> best, failed;
    for (int p = 0; p < ps.size; p++) {
      if (p == ps.rank || !accepts(**r, p)) continue;
      auto pi = ps.probes.find(std::make_pair(p, tag));
      if (pi == ps.probes.end() || pi->second.empty()) continue;
      const std::shared_ptr<Probe> &front = pi->second.front();
      if (front->state == Probe::kArrived && (!best || front->arrival < best->arrival))
        best = front;
      else if (front->state == Probe::kFailed && !failed)
        failed = front;
    }
    if (best) {
      auto pi = ps.probes.find(std::make_pair(best->peer, tag));
      pi->second.pop_front();
      if (pi->second.empty()) ps.probes.erase(pi);
      (*r)->match = best;
    } else if (failed) {
      (*r)->match = failed;
    } else {
      ++r;
      continue;
    }
    r = queue.erase(r);
  }
  if (queue.empty()) ps.unmatched.erase(it);
}

// Probes so that every waiting receive of r's tag could take a message of each peer it
// accepts: the new ones, to start. Under ps.mu.
std::vector<std::shared_ptr<Probe>> add_probes(PairSet &ps, const MatchRecv &r) {
  std::vector<std::shared_ptr<Probe>> fresh;
  const int tag = r.op->tag;
  const auto &queue = ps.unmatched[tag];
  for (int p = 0; p < ps.size; p++) {
    if (p == ps.rank || !accepts(r, p)) continue;
    size_t need = 0;
    for (const auto &w : queue) need += accepts(*w, p) ? 1 : 0;
    auto &have = ps.probes[std::make_pair(p, tag)];
    while (have.size() < need) {
      auto probe = std::make_shared<Probe>();
      probe->peer = p;
      probe->tag = tag;
      probe->seq = ps.recv_seq[std::make_pair(p, tag)]++;
      have.push_back(probe);
      fresh.push_back(probe);
    }
  }
  return fresh;
}

// A probe's end: arrived (OK) or failed; hands it to the receives waiting for it.
void probe_done(PairSet &ps, const std::shared_ptr<Probe> &probe, dlpg_status_t st,
                const std::string &msg) {
  std::lock_guard<std::mutex> lk(ps.mu);
  ps.posted.erase(probe);
  if (st == DLPG_OK) {
    probe->state = Probe::kArrived;
    probe->arrival = ++ps.arrivals;
  } else {
    probe->state = Probe::kFailed;
    probe->err = st;
    probe->msg = msg;
  }
  match_locked(ps, probe->tag);
  ps.cv.notify_all();
}

dlpg_status_t stopped(const PairSet &ps, int peer) {
  if (ps.closing.load())
    return dlpg__error(DLPG_ERR_ABORTED, "dlpg_recv: the group was released while rank %d "
                       "waited for a message from rank %d", ps.rank, peer);
  return dlpg__error(DLPG_ERR_ABORTED, "dlpg_recv: the group was aborted while rank %d waited "
                     "for a message from rank %d", ps.rank, peer);
}

// The pair's context once the peer has begun its side of the pair (see the top), or the
// pair's failure; polls the store until then, ending only at the abort or the release.
dlpg_status_t connect_when_peer_comes(PairSet &ps, Pair &pair, int peer,
                                      std::vector<PeerSocket> mesh, dlpg__gloo_ctx_t **ctx) {
  const char *fn = "dlpg_recv";
  const std::string theirs = pair_prefix(ps, peer) + "/here/" + std::to_string(peer);
  double nap = 1e-3;
  for (;;) {
    Pair::State state;
    {
      std::lock_guard<std::mutex> lk(pair.mu);
      state = pair.state;
      if (state == Pair::kReady) {
        *ctx = pair.ctx;
        return DLPG_OK;
      }
      if (state == Pair::kFailed)
        return dlpg__error(pair.err, "%s: the connection to rank %d failed earlier: %s", fn,
                           peer, pair.msg.c_str());
    }
    if (ps.aborted.load() || ps.closing.load()) return stopped(ps, peer);
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(ps.timeout_s));
    if (state == Pair::kCreating) return pair_ready(ps, pair, peer, deadline, mesh, ctx, fn);
    int64_t present = 0;
    dlpg_status_t st = dlpg_store_add(ps.store, theirs.c_str(), 0, &present);
    if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
    if (present > 0) return pair_ready(ps, pair, peer, deadline, mesh, ctx, fn);
    dlpg__sleep(nap);
    if (nap < 0.1) nap *= 2;
  }
}

// Post the probe's receive on ctx and wait for its message. OK, or a status recorded.
dlpg_status_t post_and_wait(PairSet &ps, Probe &probe, dlpg__gloo_ctx_t *ctx,
                            const std::shared_ptr<Probe> &self) {
  const int peer_in_pair = ps.rank < probe.peer ? 1 : 0;
  probe.first.assign(kBlockBytes, 0);
  auto buf = ctx->gloo->createUnboundBuffer(probe.first.data(), probe.first.size());
  {
    // Under mu, so match_wake either sees the buffer posted or the probe sees the flags.
    std::lock_guard<std::mutex> lk(ps.mu);
    if (ps.aborted.load() || ps.closing.load()) return stopped(ps, probe.peer);
    buf->recv(peer_in_pair, p2p_header_slot(probe.tag, probe.seq), 0, kBlockBytes);
    probe.ctx = ctx;
    probe.buf = std::move(buf);
    ps.posted.insert(self);
  }
  LiveGuard live(ctx);
  live.add(probe.buf.get());
  for (;;) {
    // After the registration: an abort before it found no buffer to wake.
    if (ps.aborted.load() || ctx->aborted.load() || ps.closing.load())
      return stopped(ps, probe.peer);
    if (probe.buf->waitRecv(kProbeWait)) return DLPG_OK;
    if (peer_lost(ctx, peer_in_pair))
      return dlpg__error(DLPG_ERR_REMOTE, "dlpg_recv: lost the connection to rank %d%s",
                         probe.peer, kLostWhy);
  }
}

// A probe's pool job: connect (when the peer comes), post, wait, hand it over.
void run_probe(const std::shared_ptr<PairSet> &ps, const std::shared_ptr<Probe> &probe,
               std::vector<PeerSocket> mesh) {
  dlpg__clear_error();
  std::shared_ptr<Pair> pair;
  {
    std::lock_guard<std::mutex> lk(ps->mu);
    pair = pair_of(*ps, probe->peer);
  }
  dlpg__gloo_ctx_t *ctx = nullptr;
  dlpg_status_t st = connect_when_peer_comes(*ps, *pair, probe->peer, std::move(mesh), &ctx);
  if (st == DLPG_OK) {
    try {
      st = post_and_wait(*ps, *probe, ctx, probe);
    } catch (...) {
      st = ps->aborted.load() ? status_from_current_exception("dlpg_recv", true)
                              : run_failure_status(ctx, "dlpg_recv");
    }
  }
  probe_done(*ps, probe, st, st == DLPG_OK ? "" : dlpg__last_error());
}

std::string timeout_message(const PairSet &ps, const dlpg__op_t &op) {
  char m[400];
  if (op.peer == DLPG_ANY_SOURCE)
    snprintf(m, sizeof m, "dlpg_recv: rank %d timed out after %g s waiting for a send with tag "
             "%d (%zu bytes) from any rank; did another rank issue the matching dlpg_send?",
             ps.rank, ps.timeout_s, op.tag, op.out[0].nbytes);
  else
    snprintf(m, sizeof m, "dlpg_recv: rank %d timed out after %g s waiting for a send from "
             "rank %d with tag %d (%zu bytes); did rank %d issue the matching dlpg_send?",
             ps.rank, ps.timeout_s, op.peer, op.tag, op.out[0].nbytes, op.peer);
  return m;
}

// Take r out of the receives waiting for a match (it gave up). Under ps.mu.
void drop_unmatched(PairSet &ps, const std::shared_ptr<MatchRecv> &r) {
  auto it = ps.unmatched.find(r->op->tag);
  if (it == ps.unmatched.end()) return;
  for (auto q = it->second.begin(); q != it->second.end(); ++q)
    if (*q == r) {
      it->second.erase(q);
      break;
    }
  if (it->second.empty()) ps.unmatched.erase(it);
}

// A receive's pool job: wait for its match until its deadline, then run the rest of the
// transfer with the matched peer and complete the work (naming the sender).
void run_receive(const std::shared_ptr<PairSet> &ps, const std::shared_ptr<MatchRecv> &r,
                 Clock::time_point deadline) {
  dlpg__clear_error();
  dlpg__op_t *op = r->op;
  const bool any = op->peer == DLPG_ANY_SOURCE;
  std::shared_ptr<Probe> m;
  dlpg_status_t st = DLPG_OK;
  std::string msg;
  {
    std::unique_lock<std::mutex> lk(ps->mu);
    while (!r->match && !ps->aborted.load() && !ps->closing.load() && Clock::now() < deadline)
      ps->cv.wait_until(lk, deadline);
    m = r->match;
    if (!m) {
      drop_unmatched(*ps, r);
      const bool timed_out = !ps->aborted.load() && !ps->closing.load();
      st = timed_out ? DLPG_ERR_TIMEOUT : DLPG_ERR_ABORTED;
      msg = timed_out ? timeout_message(*ps, *op)
                      : std::string("dlpg_recv") + (any ? " from any rank" : "") +
                            ": group aborted";
    }
  }
  if (m && m->state == Probe::kFailed) {
    st = m->err;
    msg = any ? "dlpg_recv from any rank (tag " + std::to_string(op->tag) + "), via rank " +
                    std::to_string(m->peer) + ": " + m->msg
              : m->msg;
  } else if (m) {
    dlpg__op_t view = *op;
    view.peer = m->peer;  // the sender, as the header check and the messages name it
    try {
      finish_recv(P2pLink{m->ctx, ps->rank, ps->rank < m->peer ? 1 : 0, m->seq}, view, m->first,
                  deadline);
    } catch (const StatusError &e) {
      st = ps->aborted.load() ? DLPG_ERR_ABORTED : e.status();
      msg = e.what();
    } catch (...) {
      st = ps->aborted.load() ? status_from_current_exception("dlpg_recv", true)
                              : run_failure_status(m->ctx, "dlpg_recv");
      msg = dlpg__last_error();
    }
    if (st == DLPG_OK) dlpg__work_set_source(op->work, m->peer);
  }
  complete(op, st, msg);
  free(op);
}

}  // namespace

bool match_wanted(const PairSet &ps, int peer, int tag) {
  auto it = ps.probes.find(std::make_pair(peer, tag));
  return it != ps.probes.end() && !it->second.empty();
}

void match_issue(dlpg__gloo_group_t *gg, dlpg__op_t *op) {
  std::shared_ptr<PairSet> ps = gg->p2p;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(ps->timeout_s));
  std::shared_ptr<MatchRecv> r;
  std::vector<std::shared_ptr<Probe>> fresh;
  try {
    r = std::make_shared<MatchRecv>();
    r->op = op;
    std::lock_guard<std::mutex> lk(ps->mu);
    if (!ps->aborted.load() && !ps->closing.load()) {
      ps->unmatched[op->tag].push_back(r);
      match_locked(*ps, op->tag);  // a probe that arrived before this receive
      if (!r->match) fresh = add_probes(*ps, *r);
    }
  } catch (...) {
    complete(op, DLPG_ERR_SYSTEM, "dlpg_recv: out of memory issuing the receive");
    free(op);
    return;
  }
  // Not queued when the group was aborted or released already: the job reports that.
  for (const auto &probe : fresh) {
    std::vector<PeerSocket> mesh = mesh_socket(gg, probe->peer);
    if (!pool_run([ps, probe, mesh] { run_probe(ps, probe, mesh); }))
      probe_done(*ps, probe, DLPG_ERR_SYSTEM,
                 "dlpg_recv: cannot start a thread to receive from rank " +
                     std::to_string(probe->peer));
  }
  if (!pool_run([ps, r, deadline] { run_receive(ps, r, deadline); })) {
    {
      std::lock_guard<std::mutex> lk(ps->mu);
      drop_unmatched(*ps, r);
    }
    complete(op, DLPG_ERR_SYSTEM, "dlpg_recv: cannot start a thread for the receive");
    free(op);
  }
}

void match_wake(PairSet &ps) {
  std::lock_guard<std::mutex> lk(ps.mu);
  // The abort also wakes them through their contexts; the release only through this.
  for (const auto &probe : ps.posted)
    if (probe->buf) probe->buf->abortWaitRecv();
  ps.cv.notify_all();
}

}  // namespace dlpg_gloo
