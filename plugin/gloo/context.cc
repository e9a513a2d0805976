// Creation, abort and teardown of the island's Gloo context: a TCP device bound to the
// address that reaches the store's host, and a full mesh built through the dlpg store.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "gloo/c_headers.h"  // before core/group/rendezvous.h (atomic_int)
#include "base/clock.h"
#include "core/group/rendezvous.h"
#include "gloo/create.h"
#include "gloo/ctx.h"
#include "gloo/errors.h"
#include "gloo/peers.h"
#include "gloo/store_adapter.h"

// Gloo 0.5 keeps tcp::Context::signalException protected, and Debian's libgloo-dev lacks
// gloo/common/memory.h, so <gloo/transport/tcp/context.h> cannot even be included. The
// function is exported by libgloo.so; it is a non-virtual member, which the Itanium C++ ABI
// calls with the object as its first argument, so it is declared here as a free function
// under its mangled name. The object is the tcp::Context our tcp::Device created; its first
// base is transport::Context, so the two pointers are equal.
extern "C++" void dlpg_gloo_tcp_context_signal_exception(void *tcp_context, const std::string &msg)
    __asm__("_ZN4gloo9transport3tcp7Context15signalExceptionERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");

namespace dlpg_gloo {
namespace {

bool is_wildcard(const char *host) {
  return !host || !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "::") ||
         !strcmp(host, "*");
}

// The local address the kernel would use to reach host (a connected UDP socket sends
// nothing). Empty when host cannot be resolved or routed.
std::string route_to(const char *host) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo *res = nullptr;
  if (getaddrinfo(host, "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  for (struct addrinfo *ai = res; ai && out.empty(); ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<struct sockaddr *>(&ss), &sl) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void *a = ss.ss_family == AF_INET
                          ? static_cast<const void *>(&reinterpret_cast<sockaddr_in *>(&ss)->sin_addr)
                          : static_cast<const void *>(&reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_addr);
      if (inet_ntop(ss.ss_family, a, buf, sizeof buf)) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

// Device attributes in order of precedence: DLPG_GLOO_HOSTNAME, DLPG_GLOO_IFACE,
// GLOO_SOCKET_IFNAME, then the route to the store's host (127.0.0.1 for a loopback store;
// for a host store, the host it names or MASTER_ADDR), then this host's name (Gloo
// resolves it, as torch does).
::gloo::transport::tcp::attr device_attr(dlpg_store_t *store, std::string *how) {
  ::gloo::transport::tcp::attr attr;
  const char *hn = dlpg__param_get(DLPG__GLOO_PARAM(HOSTNAME));
  if (hn && *hn) {
    attr.hostname = hn;
    *how = std::string("DLPG_GLOO_HOSTNAME=") + hn;
    return attr;
  }
  const char *iface = dlpg__param_get(DLPG__GLOO_PARAM(IFACE));
  if (iface && *iface) {
    attr.iface = iface;
    *how = std::string("DLPG_GLOO_IFACE=") + iface;
    return attr;
  }
  // torch users' variable; torch's Gloo opens one device per listed interface, dlpg one.
  const char *torch_iface = dlpg__param_get(DLPG__GLOO_PARAM(SOCKET_IFNAME));
  if (torch_iface && *torch_iface) {
    std::string first(torch_iface, strcspn(torch_iface, ","));
    if (!first.empty()) {
      attr.iface = first;
      *how = "GLOO_SOCKET_IFNAME=" + first;
      return attr;
    }
  }
  if (store && !is_wildcard(dlpg__store_host(store))) {
    std::string local = route_to(dlpg__store_host(store));
    if (!local.empty()) {
      attr.hostname = local;
      *how = "route to store host " + std::string(dlpg__store_host(store)) + ": " + local;
      return attr;
    }
  }
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) strcpy(name, "127.0.0.1");
  attr.hostname = name;
  *how = std::string("host name ") + name;
  return attr;
}

}  // namespace

std::string loopback_hint(const std::string &text) {
  // Gloo's message quotes the address it tried: "connect [127.0.0.1]:27059: ...".
  if (text.find("[127.") == std::string::npos && text.find("[::1]") == std::string::npos)
    return "";
  return "; that rank published a loopback address, which only its own host reaches: if "
         "it runs on another host, its host name resolves to loopback there; set "
         "DLPG_GLOO_IFACE or GLOO_SOCKET_IFNAME to the interface that reaches the other "
         "hosts (or DLPG_GLOO_HOSTNAME to its address) on every rank";
}

void signal_transport_abort(MeshContext &ctx, const std::string &why) {
  ::gloo::transport::Context *tc = ctx.transport();
  if (!tc || !dynamic_cast<::gloo::transport::tcp::Device *>(ctx.getDevice().get())) return;
  // Sets an exception on every pair: threads blocked in an operation of this context wake
  // and throw, later operations throw at once, and the pairs are closed (so the peers see
  // their connections closed and fail with DLPG_ERR_REMOTE instead of waiting).
  dlpg_gloo_tcp_context_signal_exception(static_cast<void *>(tc), why);
}

}  // namespace dlpg_gloo

using dlpg_gloo::status_from_current_exception;

extern "C" dlpg_status_t dlpg__gloo_ctx_create_abortable(dlpg_store_t *store, const char *prefix,
                                                         int rank, int size, double timeout_s,
                                                         const atomic_int *aborted,
                                                         dlpg__gloo_ctx_t **out) {
  static const char *fn = "dlpg__gloo_ctx_create_abortable";
  if (!out) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = nullptr;
  if (!store) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: store is NULL", fn);
  if (size < 1 || rank < 0 || rank >= size)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: rank %d is outside [0, %d)", fn, rank,
                       size);
  if (!(timeout_s > 0)) timeout_s = dlpg__store_timeout(store);
  auto ms = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000.0 + 0.5));
  if (ms.count() < 1) ms = std::chrono::milliseconds(1);
  const double deadline = dlpg__now() + timeout_s;
  char secs[32];
  snprintf(secs, sizeof secs, "%g", timeout_s);
  // Every key of this creation lives under a scope of its own (core/group/rendezvous.h), so an
  // earlier job's keys under the same group name are never read; the handshake also names
  // a missing rank, a rank claimed twice and differing world sizes.
  char scope[DLPG__RDV_SCOPE_MAX];
  const char *base = prefix && *prefix ? prefix : "dlpg/gloo";
  dlpg_status_t rst =
      dlpg__rendezvous_begin(store, base, "Gloo rendezvous", rank, size, deadline, aborted, scope);
  if (rst != DLPG_OK) return rst;
  dlpg__gloo_ctx_t *ctx = nullptr;
  std::string peer_key;
  try {
    ctx = new dlpg__gloo_ctx();
    ctx->rank = rank;
    ctx->size = size;
    ctx->timeout = ms;
    std::string how;
    auto attr = dlpg_gloo::device_attr(store, &how);
    DLPG_INFO(GLOO, rank, "Gloo device: %s", how.c_str());
    auto dev = ::gloo::transport::tcp::CreateDevice(attr);
    ctx->gloo = std::make_shared<dlpg_gloo::MeshContext>(rank, size);
    // Gloo waits up to 5x its timeout for a pair to connect: give it a fifth of what is left,
    // so that a peer that published its address and vanished ends within the group's
    // deadline (the store calls are cut to the deadline by the adapter). Operations pass
    // their own timeouts, so the group's is restored afterwards.
    double left = deadline - dlpg__now();
    auto connect_ms = std::chrono::milliseconds(static_cast<long long>(left * 1000.0 / 5.0));
    if (connect_ms.count() < 1) connect_ms = std::chrono::milliseconds(1);
    ctx->gloo->setTimeout(connect_ms);
    {
      dlpg_gloo::StoreAdapter adapter(store, timeout_s, deadline);
      ::gloo::rendezvous::PrefixStore pstore(scope, adapter);
      try {
        ctx->gloo->connectFullMesh(pstore, dev);
      } catch (...) {
        peer_key = adapter.last_get();
        throw;
      }
    }
    ctx->gloo->setTimeout(ms);
    ctx->peers = dlpg_gloo::peer_addresses(*ctx->gloo, &ctx->sockets);
    dlpg_gloo::start_watchdog(ctx);
    for (const auto &p : ctx->peers)
      DLPG_INFO(GLOO, rank, "Gloo peer rank %d at %s", p.second, p.first.c_str());
    DLPG_INFO(GLOO, rank, "Gloo full mesh of %d ranks connected (keys under %s)", size, scope);
    static const char *const kGlooKeys[] = {"rank_%d", "%d"};
    dlpg__rendezvous_end(store, scope, rank, size, kGlooKeys, 2);
    *out = ctx;
    return DLPG_OK;
  } catch (...) {
    std::string text;
    dlpg_status_t st = dlpg_gloo::classify_current_exception(&text);
    // Gloo reads "<scope>/<i>" just before connecting to rank i: name that rank.
    std::string peer;
    size_t slash = peer_key.rfind('/');
    if (slash != std::string::npos && peer_key.compare(0, slash, scope) == 0 &&
        slash + 1 < peer_key.size() &&
        peer_key.find_first_not_of("0123456789", slash + 1) == std::string::npos)
      peer = "could not reach rank " + peer_key.substr(slash + 1) + " ";
    if (aborted && aborted->load()) {
      delete ctx;
      return dlpg__error(DLPG_ERR_ABORTED, "Gloo rendezvous: the group was aborted (%s)",
                         text.c_str());
    }
    if (st == DLPG_ERR_TIMEOUT || dlpg__now() >= deadline)
      st = dlpg__error(DLPG_ERR_TIMEOUT,
                       "Gloo rendezvous: rank %d of %d %swithin the group's timeout of %s s "
                       "(%s)%s",
                       rank, size, peer.empty() ? "timed out waiting for peers " : peer.c_str(),
                       secs, text.c_str(), dlpg_gloo::loopback_hint(text).c_str());
    else if (!peer.empty())
      st = dlpg__error(st == DLPG_ERR_SYSTEM ? DLPG_ERR_REMOTE : st,
                       "Gloo rendezvous: rank %d of %d %s(it left or is unreachable): %s%s",
                       rank, size, peer.c_str(), text.c_str(),
                       dlpg_gloo::loopback_hint(text).c_str());
    else
      st = dlpg__error(st, "Gloo rendezvous: rank %d of %d failed: %s", rank, size, text.c_str());
    delete ctx;
    return st;
  }
}

extern "C" void dlpg__gloo_ctx_abort(dlpg__gloo_ctx_t *ctx) {
  if (!ctx) return;
  try {
    ctx->aborted.store(true);
    {
      std::lock_guard<std::mutex> lk(ctx->live_mu);
      for (auto *b : ctx->live) {
        b->abortWaitRecv();
        b->abortWaitSend();
      }
    }
    if (ctx->gloo) dlpg_gloo::signal_transport_abort(*ctx->gloo, "dlpg group aborted");
  } catch (...) {
    // Best effort: a blocked run still ends at Gloo's timeout.
  }
}

extern "C" void dlpg__gloo_ctx_destroy(dlpg__gloo_ctx_t *ctx) {
  if (!ctx) return;
  try {
    delete ctx;
  } catch (...) {
  }
}

extern "C" const char *dlpg__gloo_version(void) {
#ifdef DLPG_GLOO_VERSION_STRING
  if (DLPG_GLOO_VERSION_STRING[0]) return DLPG_GLOO_VERSION_STRING;
#endif
  return "0.5.0";
}
