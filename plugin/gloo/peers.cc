// Peer addresses to ranks (peers.h).
#include "gloo/peers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <cctype>
#include <sys/socket.h>

#include <gloo/transport/tcp/address.h>

#include "gloo/ctx.h"
#include "gloo/errors.h"

namespace dlpg_gloo {
namespace {

// "[ip]:port", as gloo::transport::tcp::Address::str() writes it. Gloo 0.5 (Debian's
// 20220518 snapshot) prints the port field as stored, in network byte order ("[127.0.0.1]:415"
// for port 40705); raw selects that form, else the port is converted as it should be.
std::string format_addr(const struct sockaddr_storage &ss, bool raw) {
  char ip[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto *a = reinterpret_cast<const sockaddr_in *>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    port = raw ? a->sin_port : ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto *a = reinterpret_cast<const sockaddr_in6 *>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    port = raw ? a->sin6_port : ntohs(a->sin6_port);
  } else {
    return "";
  }
  return "[" + std::string(ip) + "]:" + std::to_string(port);
}

bool same_addr(const struct sockaddr_storage &a, const struct sockaddr_storage &b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    auto *x = reinterpret_cast<const sockaddr_in *>(&a);
    auto *y = reinterpret_cast<const sockaddr_in *>(&b);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    auto *x = reinterpret_cast<const sockaddr_in6 *>(&a);
    auto *y = reinterpret_cast<const sockaddr_in6 *>(&b);
    return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr);
  }
  return false;
}

struct Addrs {
  sockaddr_storage self, peer;
};

// The socket's local and peer addresses; false when fd is not a connected socket.
bool socket_addrs(int fd, Addrs *a) {
  socklen_t sl = sizeof a->self, pl = sizeof a->peer;
  memset(a, 0, sizeof *a);
  return getsockname(fd, reinterpret_cast<sockaddr *>(&a->self), &sl) == 0 &&
         getpeername(fd, reinterpret_cast<sockaddr *>(&a->peer), &pl) == 0;
}

// The connected sockets of this process: (addresses, descriptor).
std::vector<std::pair<Addrs, int>> connected_sockets() {
  std::vector<std::pair<Addrs, int>> out;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return out;
  while (struct dirent *e = readdir(d)) {
    char *end = nullptr;
    long fd = strtol(e->d_name, &end, 10);
    if (!end || *end || fd < 0 || fd == dirfd(d)) continue;
    Addrs a;
    if (socket_addrs(static_cast<int>(fd), &a)) out.emplace_back(a, static_cast<int>(fd));
  }
  closedir(d);
  return out;
}

// Whether text holds addr not followed by another digit (":415" must not match ":4150").
bool contains_token(const std::string &text, const std::string &addr) {
  for (size_t at = text.find(addr); at != std::string::npos; at = text.find(addr, at + 1)) {
    size_t end = at + addr.size();
    if (end >= text.size() || !isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

}  // namespace

std::vector<std::pair<std::string, int>> peer_addresses(MeshContext &ctx,
                                                        std::vector<PeerSocket> *sockets) {
  std::vector<std::pair<std::string, int>> out;
  auto socks = connected_sockets();
  for (int i = 0; i < ctx.size; i++) {
    if (i == ctx.rank) continue;
    auto *addr = dynamic_cast<const ::gloo::transport::tcp::Address *>(&ctx.getPair(i)->address());
    if (!addr) continue;
    // A pair's local address: the listening socket's for the side that accepted (the
    // accepted socket shares it), the connecting socket's own for the other side.
    for (const auto &s : socks)
      if (same_addr(s.first.self, addr->getSockaddr())) {
        if (sockets) sockets->push_back({i, s.second, s.first.self, s.first.peer});
        out.emplace_back(format_addr(s.first.peer, true), i);
        out.emplace_back(format_addr(s.first.peer, false), i);
        break;
      }
  }
  return out;
}

std::string name_peer(const std::vector<std::pair<std::string, int>> &peers,
                      const std::string &text) {
  static const char *const kLost[] = {"closed by peer", "reset by peer", "Broken pipe",
                                      "Connection refused", "unexpectedly closed"};
  bool lost = false;
  for (const char *k : kLost) lost = lost || text.find(k) != std::string::npos;
  if (!lost) return text;
  for (const auto &p : peers)
    if (!p.first.empty() && contains_token(text, p.first))
      return "lost the connection to rank " + std::to_string(p.second) + kLostWhy + " [Gloo: " +
             text + "]";
  return std::string("lost the connection to a peer") + kLostWhy + " [Gloo: " + text + "]";
}

}  // namespace dlpg_gloo

namespace dlpg_gloo {

namespace {

// Whether the peer closed or reset its end of a socket this process still holds: Gloo
// closes the pair's socket from its loop thread, which may come after the waiter that saw
// the error already reports it. Looks without reading.
bool peer_hung_up(int fd) {
  struct pollfd pfd = {fd, POLLRDHUP, 0};
  return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

}  // namespace

std::vector<int> lost_peers(const std::vector<PeerSocket> &sockets) {
  std::vector<int> out;
  for (const auto &p : sockets) {
    Addrs a;
    // Gone, or the descriptor now belongs to another socket: Gloo closed the pair's.
    if (!socket_addrs(p.fd, &a) || !same_addr(a.self, p.self) || !same_addr(a.peer, p.peer) ||
        peer_hung_up(p.fd))
      out.push_back(p.rank);
  }
  return out;
}

int first_lost_peer(const std::vector<PeerSocket> &sockets) {
  auto lost = lost_peers(sockets);
  return lost.empty() ? -1 : lost.front();
}

void start_watchdog(dlpg__gloo_ctx *ctx) {
  if (ctx->sockets.empty()) return;
  ctx->lost.assign(static_cast<size_t>(ctx->size), 0);
  ctx->watchdog = std::thread([ctx] {
    std::unique_lock<std::mutex> lk(ctx->wd_mu);
    while (!ctx->wd_stop) {
      ctx->wd_cv.wait_for(lk, std::chrono::milliseconds(250));
      if (ctx->wd_stop) break;
      // Only while send/receive buffers are waited on: collectives see Gloo's own errors.
      {
        std::lock_guard<std::mutex> live(ctx->live_mu);
        if (ctx->live.empty()) continue;
      }
      bool fresh = false;
      for (const auto &p : ctx->sockets) {
        if (ctx->lost[static_cast<size_t>(p.rank)]) continue;
        std::vector<PeerSocket> one{p};
        if (first_lost_peer(one) < 0) continue;
        ctx->lost[static_cast<size_t>(p.rank)] = 1;
        int none = -1;
        ctx->lost_peer.compare_exchange_strong(none, p.rank);
        fresh = true;
      }
      if (!fresh) continue;
      // Wake the waiters; those whose peer is still there wait again (peer_lost).
      std::lock_guard<std::mutex> live(ctx->live_mu);
      for (auto *b : ctx->live) {
        b->abortWaitRecv();
        b->abortWaitSend();
      }
    }
  });
}

bool peer_lost(dlpg__gloo_ctx *ctx, int rank) {
  std::lock_guard<std::mutex> lk(ctx->wd_mu);
  return rank >= 0 && static_cast<size_t>(rank) < ctx->lost.size() &&
         ctx->lost[static_cast<size_t>(rank)];
}

void stop_watchdog(dlpg__gloo_ctx *ctx) {
  if (!ctx->watchdog.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(ctx->wd_mu);
    ctx->wd_stop = true;
  }
  ctx->wd_cv.notify_all();
  ctx->watchdog.join();
}

dlpg_status_t run_failure_status(dlpg__gloo_ctx *ctx, const char *fn) {
  std::string text;
  dlpg_status_t st = classify_current_exception(&text);
  int lost = ctx->lost_peer.load();
  auto group_rank = [ctx](int r) {
    return r >= 0 && static_cast<size_t>(r) < ctx->group_ranks.size() ? ctx->group_ranks[r] : r;
  };
  // A wait the watchdog woke ends as ABORTED (the group itself was not aborted).
  if (!ctx->aborted.load() && lost >= 0 && st == DLPG_ERR_ABORTED)
    return dlpg__error(DLPG_ERR_REMOTE, "%s: lost the connection to rank %d%s", fn, group_rank(lost),
                       kLostWhy);
  if (ctx->aborted.load()) return status_from_current_exception(fn, true);
  text = name_peer(ctx->peers, text);
  // An address Gloo printed that the table lacks: the pair whose socket Gloo has closed.
  const std::string unknown = "lost the connection to a peer";
  if (text.compare(0, unknown.size(), unknown) == 0) {
    // Every closed pair is named: when another survivor gave up at about the same time,
    // which closing Gloo saw first is unknown.
    auto gone = lost_peers(ctx->sockets);
    std::string who;
    for (size_t i = 0; i < gone.size(); i++)
      who += (i == 0 ? "" : i + 1 == gone.size() ? " and " : ", ") +
             std::to_string(group_rank(gone[i]));
    if (gone.size() == 1) text = "lost the connection to rank " + who + text.substr(unknown.size());
    if (gone.size() > 1) text = "lost the connections to ranks " + who + text.substr(unknown.size());
  }
  return dlpg__error(st, "%s: %s", fn, text.c_str());
}

}  // namespace dlpg_gloo
