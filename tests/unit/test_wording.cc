// dlpg's own sentences. The conformance suite checks the status of each failure and that the
// message names the ranks, arguments and values the ABI promises (any plugin can pass it);
// the exact words dlpg chose for them are dlpg's, checked here against the built plugin
// through the same harness: peers that disagree, failure propagation and timeouts, the
// flight recorder's dump and arguments, the store's authentication and a port in use.
#include <unistd.h>

#include <string>
#include <vector>

#include "harness.h"
#include "test_store_util.h"
#include "test_store_wire.h"

using namespace dlpgt;

namespace {

void ExpectHas(const std::string &msg, const std::string &words) {
  EXPECT_NE(msg.find(words), std::string::npos) << "\"" << words << "\" not in: " << msg;
}

// A timeout's note on rank r and coll_seq seq: behind when r published its progress (its
// watcher does, blocked or idle, once it issued an operation), unknown when it published none.
void ExpectBehindOrUnknown(const std::string &msg, int r, int seq) {
  std::string rs = "rank " + std::to_string(r), ss = "coll_seq " + std::to_string(seq);
  bool behind = msg.find(rs + " had not reached " + ss) != std::string::npos ||
                (msg.find(rs + " has not called ") != std::string::npos &&
                 msg.find("(" + ss + "): its last call was") != std::string::npos);
  bool unknown = msg.find(rs + " published no progress, so whether it reached " + ss +
                          " is unknown") != std::string::npos;
  EXPECT_TRUE(behind != unknown) << msg;
}



}  // namespace

// An output of another dtype than its input: the message names what differs (the dtypes),
// not the device they share.
TEST(Wording, OutputDtypeNamesOnlyTheDtypes) {
  RunRanks(Mode::kThreads, 1, [](RankCtx &c) {
    HostTensor in(DT::F32, {4}), out(DT::F64, {4});
    DLTensor *ip = in.dl(), *op = out.dl();
    EXPECT_EQ(c.api->allreduce(c.group, &ip, &op, 1, DLPG_SUM, nullptr, nullptr),
              DLPG_ERR_INVALID_ARGUMENT);
    std::string msg = c.api->last_error();
    ExpectHas(msg, "outputs[0] is float64 but inputs[0] is float32 (the dtypes must match)");
    EXPECT_EQ(msg.find("is on cpu"), std::string::npos) << msg;
  });
}

// A receive posted for fewer or more bytes than were sent (tests/conformance
// test_errors_peers.cc: MismatchedSendRecvIsInvalidArgument).
TEST(Wording, MismatchedSendRecv) {
  RunOptions ro;
  ro.group_timeout_s = 8;
  ro.deadline_s = 120;
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    // 101 floats sent inline (the sender does not learn of it), 100 posted.
    if (c.rank == 0) {
      HostTensor t(DT::F32, {101});
      c.api->send(c.group, t.dl(), 1, 3, nullptr, nullptr);
    } else {
      HostTensor t(DT::F32, {100});
      EXPECT_EQ(c.api->recv(c.group, t.dl(), 0, 3, nullptr, nullptr), DLPG_ERR_INVALID_ARGUMENT);
      std::string m = c.api->last_error();
      ExpectHas(m, "rank 1 posted 400 bytes");
      ExpectHas(m, "tag 3");
      ExpectHas(m, "rank 0 sent 404 bytes");
    }
    // 3000 floats sent (the sender waits for the receiver's answer), 2000 posted.
    if (c.rank == 0) {
      HostTensor t(DT::F32, {3000});
      EXPECT_EQ(c.api->send(c.group, t.dl(), 1, 4, nullptr, nullptr), DLPG_ERR_INVALID_ARGUMENT);
      ExpectHas(c.api->last_error(), "8000 bytes");
    } else {
      HostTensor t(DT::F32, {2000});
      EXPECT_EQ(c.api->recv(c.group, t.dl(), 0, 4, nullptr, nullptr), DLPG_ERR_INVALID_ARGUMENT);
      ExpectHas(c.api->last_error(), "rank 0 sent 12000 bytes");
    }
  }, ro);
}

// A call rejected on rank 1 (test_propagation.cc: RejectedCall..., SendRejected...): the
// peers' REMOTE quotes it, and rank 1's own next call says it was this rank.
TEST(Wording, RemoteFailure) {
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    HostTensor in(DT::F32, {1000}), out(DT::F32, {c.rank == 1 ? 999 : 1000});
    DLTensor *ip = in.dl(), *op = out.dl();
    // Rank 1 makes its bad call once rank 0's allreduce has started (its flight record says
    // so), as the conformance test's peers are inside theirs; else rank 1's next call could
    // meet that allreduce: a mismatch both ranks report, in other words.
    const std::string issued = c.name + "/issued";
    const char *kp = issued.c_str();
    if (c.rank == 1) {
      DLPG_ASSERT_OK(c.api, c.api->store_wait(c.store, &kp, 1, Scaled(60)));
      dlpg_status_t s = c.api->allreduce(c.group, &ip, &op, 1, DLPG_SUM, nullptr, nullptr);
      EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << c.api->last_error();
    } else {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &ip, &op, 1, DLPG_SUM, nullptr, &w));
      bool started = false;
      for (double end = NowSeconds() + Scaled(30); !started && NowSeconds() < end;) {
        char buf[4096];
        size_t len = 0;
        DLPG_ASSERT_OK(c.api, c.api->group_flight_record(c.group, buf, sizeof buf, &len));
        std::string rec = buf;
        size_t at = rec.find("coll_seq=2 ");
        started = at != std::string::npos && rec.find("state=started", at) != std::string::npos;
        if (!started) usleep(2000);
      }
      ASSERT_TRUE(started) << "rank 0's allreduce did not start";
      DLPG_ASSERT_OK(c.api, c.api->store_set(c.store, kp, "1", 1));
      EXPECT_EQ(c.api->work_wait(w, Scaled(60)), DLPG_ERR_REMOTE) << c.api->last_error();
      c.api->work_free(w);
      ExpectHas(c.api->last_error(), "failed on rank 1");
      ExpectHas(c.api->last_error(), "outputs[0] has 999 elements");
    }
    Meet(c, "failed");
    // The next call on either rank names the failed rank; on rank 1 it reads the record its
    // peer wrote in its name at the door (it rejected a call a moment ago), so it never meets
    // the peer's failed allreduce.
    EXPECT_EQ(c.api->barrier(c.group, nullptr), DLPG_ERR_REMOTE) << c.api->last_error();
    ExpectHas(c.api->last_error(), c.rank == 0 ? "failed on rank 1" : "rank 1 (this rank)");
  });
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    HostTensor t(DT::I64, {33});
    if (c.rank == 1) {
      EXPECT_EQ(c.api->send(c.group, t.dl(), 0, -5, nullptr, nullptr), DLPG_ERR_INVALID_ARGUMENT);
    } else {
      EXPECT_EQ(c.api->recv(c.group, t.dl(), 1, 7, nullptr, nullptr), DLPG_ERR_REMOTE);
      ExpectHas(c.api->last_error(), "failed on rank 1: dlpg_send");
    }
  });
}

// Timeouts (test_propagation.cc: PropagationTimeout.*): the group's deadline, and a
// work_wait's, name the rank that had not reached the operation; the peer's REMOTE says
// which rank failed and why.
TEST(Wording, Timeouts) {
  RunOptions ro;
  ro.group_timeout_s = 2;
  ro.deadline_s = 90;
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // coll_seq 1
    HostTensor t(DT::U8, {99});
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr),
                DLPG_ERR_TIMEOUT);
      ExpectBehindOrUnknown(c.api->last_error(), 1, 2);
    }
    Meet(c, "timedout");
    if (c.rank == 1) {
      EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr),
                DLPG_ERR_REMOTE);
      ExpectHas(c.api->last_error(), "failed on rank 0");
    }
    Meet(c, "end");
  }, ro);
  ro.group_timeout_s = 60;
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    HostTensor t(DT::F64, {256});
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      EXPECT_EQ(c.api->work_wait(w, 1.5), DLPG_ERR_TIMEOUT);
      ExpectBehindOrUnknown(c.api->last_error(), 1, 2);
      c.api->work_wait(w, 10);
      c.api->work_free(w);
    }
    Meet(c, "timedout");
    if (c.rank == 1) {
      EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr),
                DLPG_ERR_REMOTE);
      ExpectHas(c.api->last_error(), "failed on rank 0");
      ExpectHas(c.api->last_error(), "did not complete within 1.5 s");
    }
    Meet(c, "end");
  }, ro);
}

// A timeout's headline names as not having called the operation the ranks whose progress
// record says so, with their last call and its age. Rank 2 comes last to the barrier (ranks
// 0 and 1 block there; rank 2 never blocks), then ranks 1 and 2 stay out of the group and
// rank 0 times out in coll_seq 2: rank 2's record was published by its idle watcher.
TEST(Wording, TimeoutNamesTheRanksThatDidNotCall) {
  RunOptions ro;
  ro.group_timeout_s = Scaled(3);
  ro.deadline_s = 120;
  RunRanks(Mode::kProcesses, 3, [](RankCtx &c) {
    if (c.rank == 2) usleep(static_cast<useconds_t>(Scaled(1.0) * 1e6));
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // coll_seq 1
    HostTensor t(DT::F32, {16});
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr),
                DLPG_ERR_TIMEOUT);
      std::string msg = c.api->last_error();
      printf("rank 0's timeout: %s\n", msg.c_str());
      // Both stayed away after coll_seq 1; their watchers published that while idle.
      ExpectHas(msg, "rank 1 has not called dlpg_allreduce (coll_seq 2): its last call was "
                     "coll_seq 1, ");
      ExpectHas(msg, "rank 2 has not called dlpg_allreduce (coll_seq 2): its last call was "
                     "coll_seq 1, ");
      ExpectHas(msg, " s ago");
      EXPECT_EQ(msg.find("unknown"), std::string::npos) << msg;
    }
    Meet(c, "end");
  }, ro);
}

// The flight recorder (test_flight.cc): the heading of the dump logged on abort, and the
// NULL group's message.
TEST(Wording, FlightRecorder) {
  const dlpg_api_t *api = dlpg_test_api();
  size_t len = 0;
  EXPECT_EQ(api->group_flight_record(nullptr, nullptr, 0, &len), DLPG_ERR_INVALID_ARGUMENT);
  ExpectHas(api->last_error(), "dlpg_group_flight_record: group is NULL");
  RunRanks(Mode::kProcesses, 2, [](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    // Both ranks out of the barrier before rank 0 aborts: rank 0's barrier can return while
    // rank 1 still waits for the release, and the abort would fail rank 1's barrier.
    Meet(c, "barrier-returned");
    if (c.rank == 0) {
      HostTensor t(DT::I16, {12});
      DLTensor *tp = t.dl();
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      std::string log = CaptureStderr([&] { c.api->group_abort(c.group); });
      ExpectHas(log, "flight recorder, last 2 operations");
      EXPECT_EQ(c.api->work_wait(w, 10), DLPG_ERR_ABORTED);
      c.api->work_free(w);
    }
    Meet(c, "done");  // rank 1 never joins the allreduce
  });
}

// The TCP store's authentication (test_store_auth.cc): the refusal's words, at the API and
// on the wire, and the URL quoted with its secret masked as token=***.
TEST(Wording, StoreAuthentication) {
  dlpg_store_t *s = nullptr, *c = nullptr;
  ASSERT_EQ(A()->store_open("tcp://127.0.0.1:0?serve=1&token=Right-Token", 10.0, &s), DLPG_OK)
      << A()->last_error();
  int port = 0;
  ASSERT_EQ(A()->store_port(s, &port), DLPG_OK);
  std::string url = "tcp://127.0.0.1:" + std::to_string(port) + "?token=Wr0ngToken";
  EXPECT_EQ(A()->store_open(url.c_str(), 2.0, &c), DLPG_ERR_INVALID_ARGUMENT);
  ExpectHas(A()->last_error(), "authentication failed");
  ExpectHas(A()->last_error(), "token=***");
  int fd = RawConnect(port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(wire::SendAll(fd, wire::Frame(wire::GET, {"k"})));
  wire::Reply r;
  ASSERT_TRUE(wire::ReadReply(fd, &r));
  EXPECT_EQ(r.type, wire::AUTH_FAILED);
  ASSERT_EQ(r.fields.size(), 1u);
  ExpectHas(r.fields[0], "authentication failed");
  close(fd);
  A()->store_close(s);
  EXPECT_NE(A()->store_open("tcp://127.0.0.1:1?token=TopSecret99", 0.3, &c), DLPG_OK);
  ExpectHas(A()->last_error(), "token=***");
}

// A server's port already taken (test_store_server.cc: PortInUseIsAnErrorNotACrash).
TEST(Wording, StorePortInUse) {
  Served srv;
  std::string url = "tcp://127.0.0.1:" + std::to_string(srv.port) + "?serve=1";
  dlpg_store_t *s2 = nullptr;
  EXPECT_EQ(A()->store_open(url.c_str(), 2, &s2), DLPG_ERR_SYSTEM);
  ExpectHas(A()->last_error(), "in use");
}
