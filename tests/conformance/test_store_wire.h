// The dlpg TCP store's wire format as the store's tests speak it on raw sockets, to play a
// client that does not follow the protocol (an attacker, a stalled or greedy peer): connect,
// build frames, read replies, and the handshake of an authenticated store computed here
// independently with libcrypto's HMAC (layout: plugin/store/tcp_proto.h, tcp_auth.h).
#pragma once

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "test_store_util.h"

namespace wire {

enum : uint8_t { SET = 1, GET = 2, ADD = 3, CHECK = 4, DEL = 5, WAIT = 6, HELLO = 7, AUTH = 8 };
enum : uint8_t { OK = 0, NOT_FOUND = 1, TIMEOUT = 2, ERROR = 3, AUTH_FAILED = 4, BUSY = 5 };

inline void PutU32(std::string *s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void PutU64(std::string *s, uint64_t v) {
  PutU32(s, static_cast<uint32_t>(v >> 32));
  PutU32(s, static_cast<uint32_t>(v));
}
inline uint32_t GetU32(const std::string &s, size_t off) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[off + i]);
  return v;
}

inline std::string Frame(uint8_t type, const std::vector<std::string> &fields) {
  std::string body(1, static_cast<char>(type));
  PutU32(&body, static_cast<uint32_t>(fields.size()));
  for (const auto &f : fields) {
    PutU32(&body, static_cast<uint32_t>(f.size()));
    body += f;
  }
  std::string out;
  PutU32(&out, static_cast<uint32_t>(body.size()));
  return out + body;
}

inline std::string U64(uint64_t v) {
  std::string s;
  PutU64(&s, v);
  return s;
}

inline int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string &s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Exactly n bytes within timeout seconds, or false.
inline bool RecvN(int fd, size_t n, std::string *out, double timeout) {
  out->clear();
  double end = Now() + timeout;
  char buf[65536];
  while (out->size() < n) {
    pollfd p{fd, POLLIN, 0};
    int ms = static_cast<int>((end - Now()) * 1000);
    if (ms <= 0 || poll(&p, 1, ms) <= 0) return false;
    size_t want = n - out->size() < sizeof buf ? n - out->size() : sizeof buf;
    ssize_t r = recv(fd, buf, want, 0);
    if (r <= 0) return false;
    out->append(buf, static_cast<size_t>(r));
  }
  return true;
}

// A reply: type and fields; the raw frame (length included) for MAC checks.
struct Reply {
  uint8_t type = 255;
  std::vector<std::string> fields;
  std::string raw;
};

inline bool ReadReply(int fd, Reply *r, double timeout = 5.0) {
  std::string head, body;
  if (!RecvN(fd, 4, &head, timeout)) return false;
  uint32_t len = GetU32(head, 0);
  if (len < 5 || !RecvN(fd, len, &body, timeout)) return false;
  r->raw = head + body;
  r->type = static_cast<uint8_t>(body[0]);
  r->fields.clear();
  uint32_t n = GetU32(body, 1);
  size_t off = 5;
  for (uint32_t i = 0; i < n && off + 4 <= body.size(); ++i) {
    uint32_t fl = GetU32(body, off);
    r->fields.push_back(body.substr(off + 4, fl));
    off += 4 + fl;
  }
  return true;
}

// True when the server closes fd within timeout seconds (recv returns 0 or an error).
inline bool ClosedByPeer(int fd, double timeout) {
  double end = Now() + timeout;
  char buf[4096];
  while (Now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }
  return false;
}

inline std::string Hmac(const std::string &key, const std::string &data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char *>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char *>(out), len);
}

// An authenticated raw session: the handshake, then frames with MACs and counters.
struct Session {
  int fd = -1;
  std::string key;
  uint64_t sent = 0, received = 0;

  // Handshake with token; false (and a message in *why) when refused.
  bool Open(int port, const std::string &token, std::string *why) {
    fd = Connect(port);
    if (fd < 0) return false;
    std::string cn(32, '\0');
    for (size_t i = 0; i < cn.size(); ++i) cn[i] = static_cast<char>(i * 7 + 1);
    Reply r;
    if (!SendAll(fd, Frame(HELLO, {cn})) || !ReadReply(fd, &r)) return false;
    if (r.type != OK || r.fields.size() != 2) {
      *why = r.fields.empty() ? "" : r.fields[0];
      return false;
    }
    const std::string &sn = r.fields[0];
    if (r.fields[1] != Hmac(token, "dlpg-store v1 server" + cn + sn)) {
      *why = "server proof mismatch";
      return false;
    }
    key = Hmac(token, "dlpg-store v1 session" + cn + sn);
    if (!SendAll(fd, Frame(AUTH, {Hmac(token, "dlpg-store v1 client" + cn + sn)}))) return false;
    return Read(&r) && r.type == OK;
  }
  std::string Mac(char dir, uint64_t ctr, const std::string &frame) const {
    std::string head(1, dir);
    PutU64(&head, ctr);
    return Hmac(key, head + frame);
  }
  std::string Seal(const std::string &frame) { return frame + Mac('C', sent++, frame); }
  // Read a reply and check its MAC; false when absent or forged.
  bool Read(Reply *r, double timeout = 5.0) {
    std::string mac;
    if (!ReadReply(fd, r, timeout) || !RecvN(fd, 32, &mac, timeout)) return false;
    return mac == Mac('S', received++, r->raw);
  }
  ~Session() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace wire

using wire::ClosedByPeer;
inline int RawConnect(int port) { return wire::Connect(port); }

// Set an environment variable for one scope (the store server reads its DLPG_STORE_*
// limits and DLPG_STORE_TOKEN when it starts), restoring the previous value after.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    const char *old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char *name_;
  bool had_ = false;
  std::string old_;
};

// n ranks (threads) each take store_of(rank) (nullptr: it failed, A()->last_error says why),
// create a group on it and allreduce 64 floats (rank-dependent values) with the default CPU
// backend; returns the number of ranks whose result differs from the sum computed here, or
// that failed (the message is recorded with ADD_FAILURE). Each store is closed after.
template <class StoreOf>
int AllreduceOn(int n, StoreOf store_of, const std::string &name) {
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      dlpg_store_t *s = store_of(r);
      if (!s) {
        ADD_FAILURE() << "rank " << r << ": " << A()->last_error();
        bad++;
        return;
      }
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.timeout_s = 30;
      o.name = name.c_str();
      dlpg_group_t *g = nullptr;
      std::vector<float> v(64);
      for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(r * 100 + i);
      int64_t shape[1] = {64};
      DLTensor t{};
      t.data = v.data();
      t.device = {kDLCPU, 0};
      t.ndim = 1;
      t.dtype = {kDLFloat, 32, 1};
      t.shape = shape;
      DLTensor *tp = &t;
      if (A()->group_create(s, r, n, &o, &g) != DLPG_OK ||
          A()->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr) != DLPG_OK) {
        ADD_FAILURE() << "rank " << r << ": " << A()->last_error();
        bad++;
      } else {
        for (int i = 0; i < 64; ++i) {
          float want = 0;
          for (int q = 0; q < n; ++q) want += static_cast<float>(q * 100 + i);
          if (v[i] != want) {
            bad++;
            break;
          }
        }
      }
      if (g) A()->group_destroy(g);
      A()->store_close(s);
    });
  for (auto &t : ts) t.join();
  return bad.load();
}

// The same, each rank opening url_of(rank).
template <class UrlOf>
int AllreduceThrough(int n, UrlOf url_of, const std::string &name) {
  return AllreduceOn(n, [&](int r) {
    dlpg_store_t *s = nullptr;
    std::string url = url_of(r);
    return A()->store_open(url.c_str(), 30.0, &s) == DLPG_OK ? s : nullptr;
  }, name);
}
