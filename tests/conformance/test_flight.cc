// The flight recorder: dlpg_group_flight_record after a sequence of
// operations (sequence numbers, op names, dtypes, counts, peers, states, monotonic times),
// its bound (64 entries by default; DLPG_FLIGHT_RECORDER_ENTRIES, checked by the
// test_flight_env entry), the sizing protocol and argument checks, the WARN dump on abort
// and the DLPG_DEBUG=TRACE line per operation.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>

#include "harness.h"

using namespace dlpgt;

namespace {

using Entry = std::map<std::string, std::string>;

std::vector<Entry> Parse(const std::string &text) {
  std::vector<Entry> v;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    Entry e;
    std::istringstream f(line);
    std::string kv;
    while (f >> kv) {
      size_t eq = kv.find('=');
      if (eq != std::string::npos) e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    v.push_back(e);
  }
  return v;
}

std::string Record(const dlpg_api_t *api, dlpg_group_t *g) {
  size_t len = 0;
  EXPECT_EQ(api->group_flight_record(g, nullptr, 0, &len), DLPG_OK) << api->last_error();
  std::string buf(len + 1, '\0');
  size_t len2 = 0;
  EXPECT_EQ(api->group_flight_record(g, &buf[0], buf.size(), &len2), DLPG_OK);
  EXPECT_EQ(len2, len);
  buf.resize(strlen(buf.c_str()));
  EXPECT_EQ(buf.size(), len);
  return buf;
}


double Num(const Entry &e, const char *k) { return atof(e.at(k).c_str()); }

// A mixed sequence on 2 ranks; every field of every entry checked on both.
TEST(Flight, ContentsAfterASequence) {
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    const dlpg_api_t *api = c.api;
    uint64_t rnd = c.seed;
    const int64_t n1 = 100 + static_cast<int64_t>(rnd % 900), n2 = 1 + static_cast<int64_t>(rnd % 77);
    HostTensor a(DT::F32, {n1}), b(DT::I32, {n2}), p(DT::F64, {40}), gin(DT::U8, {7}),
        gout(DT::U8, {14});
    Generate(DT::F32, DLPG_SUM, rnd, c.rank, a.elems(), a.numel());
    DLTensor *ap = a.dl(), *bp = b.dl(), *gi = gin.dl(), *go = gout.dl();
    double t0 = NowSeconds();
    DLPG_ASSERT_OK(api, api->barrier(c.group, nullptr));
    DLPG_ASSERT_OK(api, api->allreduce(c.group, &ap, nullptr, 1, DLPG_MAX, nullptr, nullptr));
    DLPG_ASSERT_OK(api, api->broadcast(c.group, &bp, nullptr, 1, 1, nullptr, nullptr));
    dlpg_work_t *w = nullptr;
    if (c.rank == 0) DLPG_ASSERT_OK(api, api->send(c.group, p.dl(), 1, 3, nullptr, &w));
    else DLPG_ASSERT_OK(api, api->recv(c.group, p.dl(), 0, 3, nullptr, &w));
    DLPG_ASSERT_OK(api, api->work_wait(w, 0));
    api->work_free(w);
    DLPG_ASSERT_OK(api, api->allgather(c.group, &gi, &go, 1, nullptr, nullptr));
    double t1 = NowSeconds();

    std::vector<Entry> v = Parse(Record(api, c.group));
    ASSERT_EQ(v.size(), 5u);
    const char *ops[] = {"dlpg_barrier", "dlpg_allreduce", "dlpg_broadcast",
                         c.rank == 0 ? "dlpg_send" : "dlpg_recv", "dlpg_allgather"};
    const char *dtypes[] = {"-", "float32", "int32", "float64", "uint8"};
    const std::string counts[] = {"0", std::to_string(n1), std::to_string(n2), "40", "7"};
    const std::string peers[] = {"-", "-", "1", c.rank == 0 ? "1" : "0", "-"};
    for (int i = 0; i < 5; i++) {
      Entry &e = v[i];
      SCOPED_TRACE("entry " + std::to_string(i));
      if (i == 3) {
        EXPECT_EQ(e["p2p_seq"], "1");
        EXPECT_EQ(e.count("coll_seq"), 0u);
      } else {
        EXPECT_EQ(e["coll_seq"], std::to_string(i < 3 ? i + 1 : 4));
      }
      EXPECT_EQ(e["op"], ops[i]);
      EXPECT_EQ(e["dtype"], dtypes[i]);
      EXPECT_EQ(e["count"], counts[i]);
      EXPECT_EQ(e["peer"], peers[i]);
      EXPECT_EQ(e["devices"], i == 0 ? "-" : "cpu");
      // Host memory of ranks on one host: collectives and (per pair) sends and receives on
      // the shared-memory backend, unless DLPG_CPU_BACKEND forces Gloo.
      const char *cpu = getenv("DLPG_CPU_BACKEND");
      const bool gloo_forced = cpu && std::string(cpu) == "gloo";
      EXPECT_EQ(e["backend"], gloo_forced ? "gloo" : "shm");
      EXPECT_EQ(e["state"], "done");
      EXPECT_EQ(e["status"], "DLPG_OK");
      // Timestamps: on CLOCK_MONOTONIC, within the calls, ordered inside and across entries.
      double is = Num(e, "issued"), st = Num(e, "started"), en = Num(e, "ended");
      const double us = 1e-6;  // printed with 6 decimals
      EXPECT_LE(t0, is + us);
      EXPECT_LE(is, st);
      EXPECT_LE(st, en);
      EXPECT_LE(en, t1 + us);
      EXPECT_NEAR(Num(e, "duration_ms"), (en - is) * 1e3, 0.01);
      if (i > 0) {
        EXPECT_LE(Num(v[i - 1], "ended"), is + us);
      }
    }
  });
}

// 70 operations: the ring keeps the last 64 (the default), oldest first.
TEST(Flight, BoundedRing) {
  if (getenv("DLPG_FLIGHT_RECORDER_ENTRIES")) GTEST_SKIP() << "ring size set by the environment";
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    HostTensor t(DT::I64, {3});
    DLTensor *tp = t.dl();
    for (int i = 0; i < 70; i++)
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    std::vector<Entry> v = Parse(Record(c.api, c.group));
    ASSERT_EQ(v.size(), 64u);
    for (int i = 0; i < 64; i++) EXPECT_EQ(v[i]["coll_seq"], std::to_string(7 + i));
  });
}

// DLPG_FLIGHT_RECORDER_ENTRIES=8 and DLPG_DEBUG=TRACE (the test_flight_env entry): 8 entries
// kept; one TRACE line per operation with its fields and duration.
TEST(FlightEnv, SizeAndTrace) {
  const char *n = getenv("DLPG_FLIGHT_RECORDER_ENTRIES");
  if (!n || std::string(n) != "8") GTEST_SKIP() << "run by the test_flight_env entry";
  std::string err;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    HostTensor t(DT::F32, {5});
    DLTensor *tp = t.dl();
    std::string log = CaptureStderr([&] {
      for (int i = 0; i < 20; i++)
        DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    });
    std::vector<Entry> v = Parse(Record(c.api, c.group));
    ASSERT_EQ(v.size(), 8u);
    for (int i = 0; i < 8; i++) EXPECT_EQ(v[i]["coll_seq"], std::to_string(13 + i));
    for (int i = 1; i <= 20; i++) {
      std::string want = "coll_seq=" + std::to_string(i) + " op=dlpg_allreduce dtype=float32 count=5";
      size_t at = log.find(want);
      ASSERT_NE(at, std::string::npos) << want << " not logged:\n" << log;
      std::string line = log.substr(at, log.find('\n', at) - at);
      EXPECT_NE(line.find("state=done"), std::string::npos) << line;
      EXPECT_EQ(line.find("duration_ms=-"), std::string::npos) << line;
    }
  });
}

// The dump on abort (WARN, the default level), and the states of what was cut short.
TEST(Flight, DumpedOnAbort) {
  RunOptions ro;
  ro.group_timeout_s = 30;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    if (c.rank == 0) {
      HostTensor t(DT::I16, {12});
      DLTensor *tp = t.dl();
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      std::string log = CaptureStderr([&] {
        usleep(200000);
        c.api->group_abort(c.group);
      });
      // The record's lines (dlpg.h's format) are logged; dlpg's heading above them is
      // checked in tests/unit/test_wording.cc.
      EXPECT_NE(log.find("coll_seq=2 op=dlpg_allreduce dtype=int16 count=12"), std::string::npos)
          << log;
      EXPECT_EQ(c.api->work_wait(w, 10), DLPG_ERR_ABORTED);
      c.api->work_free(w);
      std::vector<Entry> v = Parse(Record(c.api, c.group));
      ASSERT_EQ(v.size(), 2u);
      EXPECT_EQ(v[1]["state"], "failed");
      EXPECT_EQ(v[1]["status"], "DLPG_ERR_ABORTED");
    }
    // Rank 1 never joins the allreduce; it learns of the abort at its next operation.
    std::string k = c.name + "/r0done";
    if (c.rank == 0) c.api->store_set(c.store, k.c_str(), "1", 1);
    const char *kp = k.c_str();
    DLPG_EXPECT_OK(c.api, c.api->store_wait(c.store, &kp, 1, 30));
  }, ro);
}

TEST(Flight, ArgumentsAndSizing) {
  const dlpg_api_t *api = dlpg_test_api();
  ASSERT_GE(api->struct_size, offsetof(dlpg_api_t, group_flight_record) + sizeof(void *));
  size_t len = 7;
  EXPECT_EQ(api->group_flight_record(nullptr, nullptr, 0, &len), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api->last_error()).find("group"), std::string::npos)  // the argument
      << api->last_error();
  RunRanks(Mode::kThreads, 2, [&](RankCtx &c) {
    char small[16];
    EXPECT_EQ(c.api->group_flight_record(c.group, nullptr, 8, &len), DLPG_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(c.api->group_flight_record(c.group, small, sizeof small, nullptr),
              DLPG_ERR_INVALID_ARGUMENT);
    // Empty before the first operation.
    DLPG_EXPECT_OK(c.api, c.api->group_flight_record(c.group, small, sizeof small, &len));
    EXPECT_EQ(len, 0u);
    EXPECT_STREQ(small, "");
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    // Too small for one line: nothing but the NUL, and the needed length.
    size_t need = 0;
    DLPG_EXPECT_OK(c.api, c.api->group_flight_record(c.group, small, sizeof small, &need));
    EXPECT_STREQ(small, "");
    EXPECT_GT(need, sizeof small);
    std::string full = Record(c.api, c.group);
    EXPECT_EQ(full.size(), need);
    EXPECT_EQ(full.back(), '\n');
  });
}

}  // namespace
