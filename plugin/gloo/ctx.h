// The Gloo context object behind dlpg__gloo_ctx_t (private to the island).
#pragma once

#include <atomic>
#include <condition_variable>
#include <thread>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "gloo/c_headers.h"
#include "gloo/peers.h"

namespace dlpg_gloo {

// rendezvous::Context with access to its transport context, which the abort path needs
// (gloo::Context keeps it protected).
class MeshContext : public ::gloo::rendezvous::Context {
 public:
  MeshContext(int rank, int size) : ::gloo::rendezvous::Context(rank, size) {}
  ::gloo::transport::Context *transport() { return transportContext_.get(); }
};

// Wake every thread blocked on an operation of ctx's transport with an exception
// (best effort; see context.cc).
void signal_transport_abort(MeshContext &ctx, const std::string &why);
// A hint for a connect failure whose message names a loopback address (a multi-host job
// whose host names resolve to loopback), naming the variables that choose the interface;
// "" for any other message.
std::string loopback_hint(const std::string &text);

}  // namespace dlpg_gloo

struct dlpg__gloo_ctx {
  std::shared_ptr<dlpg_gloo::MeshContext> gloo;
  int rank = 0;
  int size = 0;
  std::chrono::milliseconds timeout{0};
  // Collective tag: every rank runs the same collectives in the same order, so a counter
  // incremented per collective gives matching tags everywhere (as torch's nextTag()).
  uint32_t next_tag = 0;
  std::atomic<bool> aborted{false};
  // Each peer's address as Gloo's messages print it, with its rank, and each pair's socket
  // (gloo/peers.h); the watchdog that notices a lost connection Gloo does not report.
  std::vector<std::pair<std::string, int>> peers;
  std::vector<dlpg_gloo::PeerSocket> sockets;
  std::atomic<int> lost_peer{-1};
  // The group rank of each rank of this context, for messages (a point-to-point pair's 2-rank
  // context: {lo, hi}); empty when they are the same (the group's mesh).
  std::vector<int> group_ranks;
  std::vector<char> lost;  // per rank, under wd_mu
  std::thread watchdog;
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  bool wd_stop = false;
  // The unbound buffers of send/recv now being waited on, so that abort can wake them.
  std::mutex live_mu;
  std::set<::gloo::transport::UnboundBuffer *> live;
  // The first-message buffers of the collectives (header.h), created at the first one and
  // reused by every later one (a peer's next message cannot land before this rank posts the
  // next receive, because Gloo sends an unbound buffer only to a posted receive): a landing
  // block of kBlockBytes per rank and one outgoing block. Declared after gloo, so they are
  // destroyed before the context they were created on.
  std::vector<char> coll_recv, coll_send;
  std::unique_ptr<::gloo::transport::UnboundBuffer> coll_recv_buf, coll_send_buf;
  // The collective tag whose first-message receives are already posted into coll_recv, or
  // -1. Posting the next collective's receives as soon as coll_recv is free lets a peer's
  // first message go out as data at once instead of after a ready-to-receive round trip.
  int64_t coll_posted_tag = -1;

  ~dlpg__gloo_ctx() { dlpg_gloo::stop_watchdog(this); }
};
