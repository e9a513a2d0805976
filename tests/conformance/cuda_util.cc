// Helpers of the CUDA conformance tests; see cuda_util.h.
#include "cuda_util.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <map>

namespace cudat {

// ------------------------------------------------------------------ failures

static std::mutex g_fail_mu;
static std::vector<std::string> g_failures;

void AddFailure(const std::string &msg) {
  std::lock_guard<std::mutex> l(g_fail_mu);
  g_failures.push_back(msg);
  fprintf(stderr, "[child %d] FAILURE: %s\n", (int)getpid(), msg.c_str());
}

std::vector<std::string> Failures() {
  std::lock_guard<std::mutex> l(g_fail_mu);
  return g_failures;
}

static double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void WriteAll(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return;
    c += w, n -= (size_t)w;
  }
}

// In the child: run fn, send the failures (one per line) through fd, and _exit.
[[noreturn]] static void ChildMain(int fd, const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Fatal &) {
  } catch (const std::exception &e) {
    AddFailure(std::string("exception: ") + e.what());
  }
  std::string out;
  for (auto &f : Failures()) out += f + "\n";
  WriteAll(fd, out.data(), out.size());
  close(fd);
  fflush(stdout);
  fflush(stderr);
  _exit(Failures().empty() ? 0 : 1);
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string text;
  bool done = false;
};

static pid_t Spawn(Child &c, const std::function<void()> &fn) {
  int p[2];
  if (pipe(p) != 0) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    ChildMain(p[1], fn);
  }
  close(p[1]);
  c.pid = pid;
  c.fd = p[0];
  return pid;
}

// Collect every child's text and exit status until deadline; kill the late ones.
static std::vector<std::string> Collect(std::vector<Child> &cs, double deadline) {
  std::vector<std::string> fails;
  for (;;) {
    bool all = true;
    for (auto &c : cs) {
      if (c.fd < 0) continue;
      all = false;
      pollfd pf{c.fd, POLLIN, 0};
      if (poll(&pf, 1, 10) > 0) {
        char buf[4096];
        ssize_t n = read(c.fd, buf, sizeof buf);
        if (n > 0) c.text.append(buf, (size_t)n);
        else close(c.fd), c.fd = -1;
      }
    }
    if (all || Now() > deadline) break;
  }
  for (auto &c : cs) {
    int status = 0;
    pid_t r = 0;
    while ((r = waitpid(c.pid, &status, WNOHANG)) == 0 && Now() < deadline + 2) usleep(10000);
    if (r == 0) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      fails.push_back("child " + std::to_string(c.pid) + " passed the test's deadline and was killed; " + c.text);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fails.push_back("child " + std::to_string(c.pid) + " failed (status " + std::to_string(status) + "): " + c.text);
    }
    if (c.fd >= 0) close(c.fd);
  }
  return fails;
}

std::vector<std::string> RunChild(double deadline_s, const std::function<void()> &fn) {
  std::vector<Child> cs(1);
  if (Spawn(cs[0], fn) < 0) return {"fork failed"};
  return Collect(cs, Now() + deadline_s);
}

dlpg_store_t *OpenServing(const dlpg_api_t *api, int *port) {
  dlpg_store_t *s = nullptr;
  CT_OK(api, api->store_open("tcp://127.0.0.1:0?serve=1", 60, &s));
  CT_OK(api, api->store_port(s, port));
  return s;
}

dlpg_store_t *OpenClient(const dlpg_api_t *api, int port) {
  dlpg_store_t *s = nullptr;
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  CT_OK(api, api->store_open(url.c_str(), 60, &s));
  return s;
}

// Every rank counts itself out; rank 0 (the server) waits until all did, so its store
// outlives the others' last use.
static void ExitBarrier(Env &e, int nprocs) {
  int64_t v = 0;
  e.api->store_add(e.store, "cuda_test/exit", 1, &v);
  if (e.rank != 0) return;
  double end = Now() + 30;
  while (v < nprocs && Now() < end) {
    usleep(20000);
    e.api->store_add(e.store, "cuda_test/exit", 0, &v);
  }
}

std::vector<std::string> RunProcs(int nprocs, int world, double deadline_s,
                                  const std::function<void(Env &)> &fn) {
  double deadline = Now() + deadline_s;
  std::vector<Child> cs((size_t)nprocs);
  int portpipe[2];
  if (pipe(portpipe) != 0) return {"pipe failed"};
  int port = 0;
  for (int r = 0; r < nprocs; r++) {
    if (r == 1) {
      // Child 0 reports the port its store serves on (once) before the others start.
      pollfd pf{portpipe[0], POLLIN, 0};
      if (poll(&pf, 1, 30000) <= 0 || read(portpipe[0], &port, sizeof port) != sizeof port) {
        auto f = Collect(cs, Now());
        f.push_back("rank 0 never reported its store port");
        return f;
      }
    }
    Spawn(cs[(size_t)r], [&, r, port] {
      Env e;
      e.api = dlpg_test_api();
      e.rank = r;
      e.size = world;
      if (r == 0) {
        e.store = OpenServing(e.api, &e.port);
        WriteAll(portpipe[1], &e.port, sizeof e.port);
      } else {
        e.port = port;
        e.store = OpenClient(e.api, port);
      }
      try {
        fn(e);
      } catch (const Fatal &) {
      }
      ExitBarrier(e, nprocs);
      e.api->store_close(e.store);
    });
  }
  close(portpipe[0]);
  close(portpipe[1]);
  return Collect(cs, deadline);
}

const GpuInfo &Gpus() {
  static GpuInfo info;
  static bool probed = false;
  if (probed) return info;
  probed = true;
  int p[2];
  if (pipe(p) != 0) return info;
  pid_t pid = fork();
  if (pid == 0) {
    int v[2] = {0, 0};
    if (cudaGetDeviceCount(&v[0]) != cudaSuccess) v[0] = 0;
    if (v[0] > 0) cudaDeviceGetAttribute(&v[1], cudaDevAttrComputeCapabilityMajor, 0);
    WriteAll(p[1], v, sizeof v);
    _exit(0);
  }
  close(p[1]);
  int v[2] = {0, 0};
  pollfd pf{p[0], POLLIN, 0};
  if (poll(&pf, 1, 60000) > 0 && read(p[0], v, sizeof v) == sizeof v) {
    info.count = v[0];
    info.cc_major = v[1];
  }
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return info;
}

// ------------------------------------------------------------------ dtypes

struct DTDesc {
  const char *name;
  uint8_t code, bits;
};
static const DTDesc kDT[] = {
    {"float32", kDLFloat, 32}, {"float16", kDLFloat, 16}, {"bfloat16", kDLBfloat, 16},
    {"int32", kDLInt, 32},     {"int64", kDLInt, 64},     {"uint8", kDLUInt, 8},
    {"float64", kDLFloat, 64}, {"int8", kDLInt, 8},       {"bool", DLPG_DL_BOOL, 8},
    {"float8_e4m3fn", DLPG_DL_FLOAT8_E4M3FN, 8},           {"float8_e5m2", DLPG_DL_FLOAT8_E5M2, 8},
};

const char *DTName(DT dt) { return kDT[(int)dt].name; }
size_t DTSize(DT dt) { return kDT[(int)dt].bits / 8; }
DLDataType DTDl(DT dt) {
  DLDataType t;
  t.code = kDT[(int)dt].code;
  t.bits = kDT[(int)dt].bits;
  t.lanes = 1;
  return t;
}
bool DTIsFloat(DT dt) {
  return dt == DT::F32 || dt == DT::F16 || dt == DT::BF16 || dt == DT::F64 || DTIsFp8(dt);
}
bool DTIsFp8(DT dt) { return dt == DT::F8E4M3 || dt == DT::F8E5M2; }

// Minifloat decoding written from the format definitions: sign, ebits exponent bits with
// bias, mbits mantissa bits; e4m3fn has no infinities (exponent 15 is normal, except the
// all-ones NaN pattern), so decoding only needs the finite cases.
static double DecodeMini(uint32_t bits, int ebits, int mbits, int bias) {
  uint32_t sign = (bits >> (ebits + mbits)) & 1u;
  uint32_t e = (bits >> mbits) & ((1u << ebits) - 1);
  uint32_t m = bits & ((1u << mbits) - 1);
  double v = e == 0 ? std::ldexp((double)m, 1 - bias - mbits)
                    : std::ldexp((double)((1u << mbits) | m), (int)e - bias - mbits);
  return sign ? -v : v;
}

static double DecodeOne(DT dt, const uint8_t *p) {
  switch (dt) {
    case DT::F32: { float f; memcpy(&f, p, 4); return f; }
    case DT::F64: { double d; memcpy(&d, p, 8); return d; }
    case DT::F16: { uint16_t h; memcpy(&h, p, 2); return DecodeMini(h, 5, 10, 15); }
    case DT::BF16: {
      uint16_t h; memcpy(&h, p, 2);
      uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
    }
    case DT::I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case DT::I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case DT::U8: case DT::BOOL: return *p;
    case DT::I8: return (int8_t)*p;
    case DT::F8E4M3: return DecodeMini(*p, 4, 3, 7);
    case DT::F8E5M2: return DecodeMini(*p, 5, 2, 15);
  }
  return 0;
}

// Encoding of exactly representable values by table lookup over every bit pattern.
static uint32_t EncodeTable(DT dt, double v, int nbits) {
  static std::mutex mu;
  static std::map<int, std::map<double, uint32_t>> tables;
  std::lock_guard<std::mutex> l(mu);
  auto &t = tables[(int)dt];
  if (t.empty()) {
    for (uint32_t b = 0; b < (1u << nbits); b++) {
      uint8_t raw[2] = {(uint8_t)(b & 0xff), (uint8_t)(b >> 8)};
      double d = DecodeOne(dt, raw);
      if (!std::isnan(d) && !t.count(d)) t[d] = b;
    }
    t[0.0] = 0;
  }
  auto it = t.find(v);
  if (it == t.end()) throw std::runtime_error(CT_STR("value " << v << " not exact in " << DTName(dt)));
  return it->second;
}

std::vector<uint8_t> Encode(DT dt, const std::vector<double> &v) {
  size_t es = DTSize(dt);
  std::vector<uint8_t> b(v.size() * es);
  for (size_t i = 0; i < v.size(); i++) {
    uint8_t *p = &b[i * es];
    switch (dt) {
      case DT::F32: { float f = (float)v[i]; memcpy(p, &f, 4); break; }
      case DT::F64: memcpy(p, &v[i], 8); break;
      case DT::F16: { uint16_t h = (uint16_t)EncodeTable(dt, v[i], 16); memcpy(p, &h, 2); break; }
      case DT::BF16: {
        float f = (float)v[i]; uint32_t u; memcpy(&u, &f, 4);
        uint16_t h = (uint16_t)(u >> 16); memcpy(p, &h, 2); break;
      }
      case DT::I32: { int32_t x = (int32_t)v[i]; memcpy(p, &x, 4); break; }
      case DT::I64: { int64_t x = (int64_t)v[i]; memcpy(p, &x, 8); break; }
      case DT::U8: case DT::BOOL: *p = (uint8_t)v[i]; break;
      case DT::I8: *p = (uint8_t)(int8_t)v[i]; break;
      case DT::F8E4M3: case DT::F8E5M2: *p = (uint8_t)EncodeTable(dt, v[i], 8); break;
    }
  }
  return b;
}

std::vector<double> Decode(DT dt, const std::vector<uint8_t> &b) {
  size_t es = DTSize(dt);
  std::vector<double> v(b.size() / es);
  for (size_t i = 0; i < v.size(); i++) v[i] = DecodeOne(dt, &b[i * es]);
  return v;
}

static uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double Value(DT dt, dlpg_reduce_op_t op, uint64_t k, int c, int64_t j) {
  uint64_t h = Mix(Mix(Mix(k) ^ (uint64_t)c) ^ (uint64_t)j);
  if (dt == DT::BOOL) return (double)(h & 1u);
  int range = op == DLPG_PROD ? 3 : 8;
  if (DTIsFp8(dt)) range = 2;
  bool uns = dt == DT::U8;
  int64_t r = uns ? (int64_t)(h % (uint64_t)(range + 1)) : (int64_t)(h % (uint64_t)(2 * range + 1)) - range;
  // Floating values are quarters (exact in every float type here), integers whole.
  if (DTIsFloat(dt) && !DTIsFp8(dt)) return (double)r * (op == DLPG_PROD ? 0.5 : 0.25);
  return (double)r;
}

double Reduce(DT dt, dlpg_reduce_op_t op, const std::vector<double> &xs) {
  double acc = xs[0];
  for (size_t i = 1; i < xs.size(); i++) {
    double x = xs[i];
    switch (op) {
      case DLPG_SUM: case DLPG_AVG: acc += x; break;
      case DLPG_PROD: acc *= x; break;
      case DLPG_MIN: acc = std::min(acc, x); break;
      case DLPG_MAX: acc = std::max(acc, x); break;
      default: break;
    }
  }
  if (op == DLPG_AVG) acc /= (double)xs.size();
  if (dt == DT::BOOL) acc = acc != 0 ? 1 : 0;
  return acc;
}

// ------------------------------------------------------------------ device tensors

DevTensor::DevTensor(int d, DT type, int64_t n) : dev(d), shape(n), dt(type) {
  CT_CUDA(cudaSetDevice(dev));
  CT_CUDA(cudaMalloc(&ptr, bytes() ? bytes() : 1));
  CT_CUDA(cudaMemset(ptr, 0xEE, bytes() ? bytes() : 1));
  t.data = ptr;
  t.device = {kDLCUDA, dev};
  t.ndim = 1;
  t.dtype = DTDl(dt);
  t.shape = &shape;
  t.strides = nullptr;
  t.byte_offset = 0;
}

DevTensor::~DevTensor() {
  if (ptr) {
    cudaSetDevice(dev);
    cudaFree(ptr);
  }
}

void DevTensor::Upload(const std::vector<double> &v) {
  auto b = Encode(dt, v);
  CT_CUDA(cudaSetDevice(dev));
  CT_CUDA(cudaMemcpy(ptr, b.data(), b.size(), cudaMemcpyHostToDevice));
}

std::vector<double> DevTensor::Download() {
  std::vector<uint8_t> b(bytes());
  // No device synchronisation: the operation's completion must come from dlpg_work_wait.
  CT_CUDA(cudaSetDevice(dev));
  CT_CUDA(cudaMemcpy(b.data(), ptr, b.size(), cudaMemcpyDeviceToHost));
  return Decode(dt, b);
}

}  // namespace cudat
