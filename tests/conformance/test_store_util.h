// Helpers shared by the store's tests (test_store_ops.cc, test_store_server.cc): the API
// table, a clock, random binary values, a TCP store serving on an ephemeral port, and a
// get that sizes its buffer first. Inline, so each test file includes it freely.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api_loader.h"
#include "time_scale.h"

inline const dlpg_api_t *A() { return dlpg_test_api(); }

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::string RandomBytes(std::mt19937_64 &rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rng() & 0xff);
  if (n > 2) s[n / 2] = '\0';  // make sure a NUL sits in the middle
  return s;
}

// A store serving on 127.0.0.1 with an ephemeral port.
struct Served {
  dlpg_store_t *s = nullptr;
  int port = 0;
  explicit Served(double timeout = 10.0) {
    EXPECT_EQ(A()->store_open("tcp://127.0.0.1:0?serve=1", timeout, &s), DLPG_OK)
        << A()->last_error();
    if (s) {
      EXPECT_EQ(A()->store_port(s, &port), DLPG_OK);
    }
  }
  ~Served() { A()->store_close(s); }
  std::string Url() const { return "tcp://127.0.0.1:" + std::to_string(port); }
};

inline std::string Get(dlpg_store_t *s, const char *key, double timeout = 5.0) {
  size_t len = 0;
  EXPECT_EQ(A()->store_get(s, key, timeout, nullptr, 0, &len), DLPG_OK) << A()->last_error();
  std::string v(len, '\0');
  size_t len2 = 0;
  EXPECT_EQ(A()->store_get(s, key, timeout, len ? &v[0] : nullptr, len, &len2), DLPG_OK);
  EXPECT_EQ(len2, len);
  return v;
}
