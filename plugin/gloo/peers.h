// Which rank is behind an address in Gloo's messages. Gloo names a failed connection by the
// peer's socket address ("Connection closed by peer [127.0.0.1]:33708"); users need the rank.
#pragma once

#include <sys/socket.h>

#include "gloo/c_headers.h"
#include <string>
#include <utility>
#include <vector>

struct dlpg__gloo_ctx;

namespace dlpg_gloo {

class MeshContext;

// Why a connection is lost, as every message about one says it.
constexpr const char *kLostWhy =
    " (its process ended, it gave up after a failure (its own or one it saw elsewhere), or "
    "the network failed)";

// The socket of one connected pair, found by its local address (peer_addresses).
struct PeerSocket {
  int rank = -1;
  int fd = -1;
  struct sockaddr_storage self {}, peer {};
};

// After connectFullMesh: the peer address of every connected pair as Gloo prints it
// ("[ip]:port"), with its rank. Finds each pair's socket among this process's descriptors
// by its local address. Best effort: pairs not found are left out.
// Also fills *sockets (may be NULL) with each pair's socket.
std::vector<std::pair<std::string, int>> peer_addresses(MeshContext &ctx,
                                                        std::vector<PeerSocket> *sockets);

// The rank of the first pair whose socket is gone, or -1. Gloo closes a pair's socket when
// the peer closed or reset the connection, but does not wake a receive whose data was
// already arriving (nor always a send), which would then wait for its whole timeout.
// A socket counts as gone once its peer closed or reset its end, even while Gloo still
// holds it open.
int first_lost_peer(const std::vector<PeerSocket> &sockets);
// The ranks of every such pair, in the order of sockets.
std::vector<int> lost_peers(const std::vector<PeerSocket> &sockets);

// Start/stop the context's watchdog: a thread that, while send/receive buffers are waited
// on, checks the pairs' sockets every quarter second and, when one is gone, marks its rank
// lost (ctx->lost_peer: the first) and wakes every waiting buffer (as an abort does); a
// waiter whose own peer is not lost waits again.
void start_watchdog(dlpg__gloo_ctx *ctx);
void stop_watchdog(dlpg__gloo_ctx *ctx);
// Whether the watchdog found the connection to rank lost.
bool peer_lost(dlpg__gloo_ctx *ctx, int rank);

// The status of a failed run (call inside a catch block): a lost peer found by the
// watchdog is DLPG_ERR_REMOTE naming it, unless the group was aborted or Gloo timed out;
// else as status_from_current_exception with the context's peer addresses.
dlpg_status_t run_failure_status(dlpg__gloo_ctx *ctx, const char *fn);


// text with a leading explanation naming the rank of the first known address it holds,
// when it reports a lost connection; else text unchanged.
std::string name_peer(const std::vector<std::pair<std::string, int>> &peers,
                      const std::string &text);

}  // namespace dlpg_gloo

