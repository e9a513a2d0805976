// The Gloo context object behind dlpg__gloo_ctx_t (private to the island).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "gloo/c_headers.h"

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
  // The unbound buffers of send/recv now being waited on, so that abort can wake them.
  std::mutex live_mu;
  std::set<::gloo::transport::UnboundBuffer *> live;
};
