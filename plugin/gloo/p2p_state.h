// The Gloo backend's group state behind dlpg__gloo_group_t (private to the island; the C
// face is p2p.h): the mesh of the collectives and the pairwise contexts of send/recv.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "gloo/c_headers.h"
#include "gloo/gloo.h"

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
  ~PairSet();
};

}  // namespace dlpg_gloo

struct dlpg__gloo_group {
  // The mesh: created and used by the worker thread only, read by abort (hence atomic).
  std::atomic<dlpg__gloo_ctx_t *> mesh{nullptr};
  bool mesh_tried = false;
  dlpg_status_t mesh_err = DLPG_OK;
  std::string mesh_msg;
  std::shared_ptr<dlpg_gloo::PairSet> p2p;
};
