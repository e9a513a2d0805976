// Peer addresses to ranks (peers.h).
#include "gloo/peers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <cctype>
#include <sys/socket.h>

#include <gloo/transport/tcp/address.h>

#include "gloo/ctx.h"

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

// The connected sockets of this process: (local address, peer address).
std::vector<std::pair<sockaddr_storage, sockaddr_storage>> connected_sockets() {
  std::vector<std::pair<sockaddr_storage, sockaddr_storage>> out;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return out;
  while (struct dirent *e = readdir(d)) {
    char *end = nullptr;
    long fd = strtol(e->d_name, &end, 10);
    if (!end || *end || fd < 0 || fd == dirfd(d)) continue;
    sockaddr_storage self{}, peer{};
    socklen_t sl = sizeof self, pl = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr *>(&self), &sl) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr *>(&peer), &pl) != 0) continue;
    out.emplace_back(self, peer);
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

std::vector<std::pair<std::string, int>> peer_addresses(MeshContext &ctx) {
  std::vector<std::pair<std::string, int>> out;
  auto socks = connected_sockets();
  for (int i = 0; i < ctx.size; i++) {
    if (i == ctx.rank) continue;
    auto *addr = dynamic_cast<const ::gloo::transport::tcp::Address *>(&ctx.getPair(i)->address());
    if (!addr) continue;
    // A pair's local address: the listening socket's for the side that accepted (the
    // accepted socket shares it), the connecting socket's own for the other side.
    for (const auto &s : socks)
      if (same_addr(s.first, addr->getSockaddr())) {
        out.emplace_back(format_addr(s.second, true), i);
        out.emplace_back(format_addr(s.second, false), i);
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
      return "lost the connection to rank " + std::to_string(p.second) +
             " (its process ended, it gave up after a failure of its own, or the network "
             "failed) [Gloo: " + text + "]";
  return "lost the connection to a peer (its process ended or was killed, or the network "
         "failed) [Gloo: " + text + "]";
}

}  // namespace dlpg_gloo
