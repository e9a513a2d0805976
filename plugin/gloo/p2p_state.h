// The Gloo backend's group state behind dlpg__gloo_group_t (private to the island; the C
// face is p2p.h): the mesh of the collectives and the pairwise contexts of send/recv.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

#include "gloo/c_headers.h"
#include "gloo/gloo.h"
#include "gloo/peers.h"

namespace dlpg_gloo {

// The 2-rank context of this rank and one peer, created by the first transfer that needs it.
struct Pair {
  enum State { kNew, kCreating, kReady, kFailed };
  std::mutex mu;
  std::condition_variable cv;  // left kCreating
  State state = kNew;
  dlpg__gloo_ctx_t *ctx = nullptr;
  dlpg_status_t err = DLPG_OK;  // kFailed: why, repeated to every later transfer
  std::string msg;
  Pair() = default;
  Pair(const Pair &) = delete;
  Pair &operator=(const Pair &) = delete;
  ~Pair() { dlpg__gloo_ctx_destroy(ctx); }
};

// One send or receive in flight on a pool thread. Until its pair is connected an abort may
// complete its work at once (it touches no tensor yet); once running, the pool thread owns
// it and the abort only wakes it.
struct Transfer {
  enum Phase { kConnecting, kRunning, kClaimed };
  dlpg__op_t *op = nullptr;  // owned copy, freed by the pool thread
  uint32_t seq = 0;
  std::atomic<int> phase{kConnecting};
};

// The first message (header, inline payload) of the next send of one peer with one tag,
// received ahead into a buffer of the group's: receives from any source (p2p_any.cc) post one
// per peer, and the receive that matches it runs the rest of the transfer.
struct Probe {
  enum State { kWaiting, kArrived, kFailed };
  int peer = 0, tag = 0;
  uint32_t seq = 0;         // the transfer's number among the (peer, tag) receives
  State state = kWaiting;   // under PairSet::mu
  uint64_t arrival = 0;     // kArrived: its place in the order of arrivals
  dlpg_status_t err = DLPG_OK;
  std::string msg;          // kFailed: why
  dlpg__gloo_ctx_t *ctx = nullptr;  // the pair's, once connected
  std::vector<char> first;  // kBlockBytes landing
  std::unique_ptr<::gloo::transport::UnboundBuffer> buf;  // posted on ctx (set under mu)
};

// A receive in the matcher (from any source, or from a peer that has probes pending).
struct MatchRecv {
  dlpg__op_t *op = nullptr;        // owned copy, freed by its pool thread
  std::shared_ptr<Probe> match;    // set under PairSet::mu once matched
};

// Every point-to-point resource of one group: shared by the group's state and by each
// transfer in flight, so the contexts outlive the group's release while a pool thread still
// holds them.
struct PairSet {
  dlpg_store_t *store = nullptr;  // the group's, retained until the last transfer is gone
  std::string name;               // the group's key prefix (its job's scope)
  int rank = 0, size = 0;
  double timeout_s = 0;
  std::atomic<int> aborted{0};  // an int: the rendezvous polls it (gloo/create.h)
  std::mutex mu;  // the maps below
  std::map<int, std::shared_ptr<Pair>> pairs;                  // by peer
  std::map<std::pair<int, int>, uint32_t> send_seq, recv_seq;  // by (peer, tag)
  // Sends and receives to self not yet matched, by tag, in issue order (owned copies).
  std::map<int, std::deque<dlpg__op_t *>> self_sends, self_recvs;
  std::set<Transfer *> in_flight;
  // The matcher of receives from any source (p2p_any.cc), under mu: probes not yet taken by
  // a receive, by (peer, tag), in seq order; receives not yet matched, by tag, in issue
  // order; cv wakes those receives (a probe arrived, the abort, the release).
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Probe>>> probes;
  std::map<int, std::deque<std::shared_ptr<MatchRecv>>> unmatched;
  std::set<std::shared_ptr<Probe>> posted;  // probes whose buffer may still be waited on
  uint64_t arrivals = 0;
  std::atomic<bool> closing{false};  // the group is being released: probes stop waiting
  std::condition_variable cv;
  ~PairSet();
};

// p2p_connect.cc, shared by p2p_pairs.cc and p2p_any.cc.
// Whoever moves t out of kConnecting first (to `to`) completes its work: the pool thread, the
// abort or the watch of a connection.
bool claim(Transfer &t, int to);
void complete(dlpg__op_t *op, dlpg_status_t st, const std::string &msg);
// The mesh's socket to peer, when the group's mesh exists (empty otherwise). Its sockets
// are fixed before the mesh is published.
std::vector<PeerSocket> mesh_socket(dlpg__gloo_group_t *gg, int peer);
// The store key prefix of the pair of this rank and peer ("<name>/gloo/p2p/<lo>-<hi>").
std::string pair_prefix(const PairSet &ps, int peer);
// The pair with peer, made on first use (under ps.mu).
std::shared_ptr<Pair> pair_of(PairSet &ps, int peer);
// The pair context with peer, connecting it when this is its first transfer (only the two
// ranks take part: keys "<pair_prefix>/<0|1>"). Waits for a concurrent creation until
// deadline. OK with *ctx set, or a status with the message recorded. mesh: the group mesh's
// socket to peer, watched during the connection.
dlpg_status_t pair_ready(PairSet &ps, Pair &pair, int peer,
                         std::chrono::steady_clock::time_point deadline,
                         std::vector<PeerSocket> mesh, dlpg__gloo_ctx_t **ctx, const char *fn);

// p2p_any.cc: whether a receive from peer with tag must go through the matcher (probes of
// that peer and tag are pending); call under ps.mu.
bool match_wanted(const PairSet &ps, int peer, int tag);
// Issue a receive from DLPG_ANY_SOURCE, or one from a peer that match_wanted: op is an owned
// copy, its work completed later (never throws after taking op).
void match_issue(dlpg__gloo_group_t *gg, dlpg__op_t *op);
// At abort (ps.aborted set) and at release (ps.closing set): wake the matcher's waits.
void match_wake(PairSet &ps);

}  // namespace dlpg_gloo

struct dlpg__gloo_group {
  // The mesh: created and used by the worker thread only, read by abort (hence atomic).
  std::atomic<dlpg__gloo_ctx_t *> mesh{nullptr};
  bool mesh_tried = false;
  dlpg_status_t mesh_err = DLPG_OK;
  std::string mesh_msg;
  std::shared_ptr<dlpg_gloo::PairSet> p2p;
};
