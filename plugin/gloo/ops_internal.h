// Shared helpers of the island's operation files (ops_coll.cc, ops_small.cc, ops_p2p.cc, ops_run.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gloo/ctx.h"
#include "gloo/errors.h"
#include "gloo/header.h"
#include "gloo/reduce_fns.h"

namespace dlpg_gloo {

// Gloo's algorithms only need the element size, so one unsigned type per width stands in
// for every dtype of that width when handing buffers to them.
template <class T>
struct Elem {
  using type = T;
};
template <class F>
void with_elem_type(size_t esize, F &&f) {
  switch (esize) {
    case 1: f(Elem<uint8_t>{}); break;
    case 2: f(Elem<uint16_t>{}); break;
    case 4: f(Elem<uint32_t>{}); break;
    case 8: f(Elem<uint64_t>{}); break;
    default:
      throw StatusError(DLPG_ERR_INTERNAL, "no Gloo element type of size " + std::to_string(esize));
  }
}

// op's reduce function for its input dtype and reduce op. The pair was judged once, at
// validation, by the backend's check (backend.c), whose every accepted pair has a function
// (tests/unit pins that); a missing one is a bug: INTERNAL. Shared by the Gloo algorithms
// and the small path.
ReduceFn op_reduce_fn(const dlpg__op_t &op);

// The AVG step: divide numel elements at ptr (dtype of t) by size; the check accepts avg
// only on dtypes that divide, so a dtype that cannot is a bug: INTERNAL.
void average(const dlpg__tensor_t &t, void *ptr, size_t numel, int size);

// The op as the algorithms below run it: a complex tensor as its real parts (twice the
// elements; sum, avg and premul_sum act on each part alone, movement moves them), and
// premul_sum as a sum of the input multiplied into scratch, so the algorithms see only real
// dtypes and the ops they know. Returns op itself when neither applies, else view.
const dlpg__op_t &reduce_view(const dlpg__op_t &op, dlpg__op_t &view, std::vector<char> &scratch);

// Run one collective (every kind but SEND and RECV). Throws on failure; a mismatch with
// the peers' operation is INVALID_ARGUMENT on every rank and leaves the context usable.
void run_collective(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op);

// The rooted and uneven collectives (ops_vcoll.cc): is kind one of them, and run one (the
// op as core gave it, not reduce_view's: its counts are in the caller's elements). Throws
// as run_collective.
bool is_vcollective(dlpg__op_kind_t kind);
void run_vcollective(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op);

// Which peers a collective's first message carries this rank's payload to.
enum class PayloadTo { kAll, kNone, kRoot };

// The first step of every collective (header.h): send this rank's header h, followed by
// payload_bytes (<= kSmallBytes) of payload to the peers that `to` selects (header only to
// the others), and receive every peer's first message into ctx->coll_recv. Throws
// INVALID_ARGUMENT with compare_collective_headers' message when the headers disagree.
// On return, first_payload(ctx, r) is rank r's payload (this rank's own copy for self).
void exchange_first(dlpg__gloo_ctx_t *ctx, const WireHeader &h, const void *payload,
                    size_t payload_bytes, PayloadTo to, int root, uint32_t tag);
const char *first_payload(const dlpg__gloo_ctx_t *ctx, int r);

// Post the first-message receives of the next collective (tag ctx->next_tag) into
// ctx->coll_recv; call once nothing reads coll_recv any more. Never throws: on failure the
// next exchange_first posts them itself and meets the error there.
void prepost_next_first(dlpg__gloo_ctx_t *ctx) noexcept;

// The small-message path: compute op's result from the exchanged payloads (every rank's
// input is <= kSmallBytes and the headers agree). Defined in ops_small.cc.
void run_small(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op);

// Where one transfer runs: ctx (the pair's 2-rank context), this rank's group rank (the one
// its headers carry), the peer's rank within ctx, and the transfer's number among those of
// its direction with that peer and tag (its slots).
struct P2pLink {
  dlpg__gloo_ctx_t *ctx;
  int self;
  int peer;
  uint32_t seq;
};

// Run one send or receive to completion (first message, answer, payload) before deadline;
// throws on failure (INVALID_ARGUMENT for a size mismatch, which leaves ctx usable).
void run_p2p_one(const P2pLink &link, const dlpg__op_t &op,
                 std::chrono::steady_clock::time_point deadline);

// The slot of the first message of the seq-th send with tag between a pair (its header,
// which a receive posts kBlockBytes for).
uint64_t p2p_header_slot(int tag, uint32_t seq);

// The rest of a receive whose first message (kBlockBytes at first) arrived already: check
// it, take an inline payload or answer a large sender and receive its payload; as
// run_p2p_one otherwise (op.peer is the sender).
void finish_recv(const P2pLink &link, const dlpg__op_t &op, const std::vector<char> &first,
                 std::chrono::steady_clock::time_point deadline);

// Registers unbound buffers with the context while they are waited on, so that
// dlpg__gloo_ctx_abort can wake them; unregisters them all on every exit path.
class LiveGuard {
 public:
  explicit LiveGuard(dlpg__gloo_ctx_t *ctx) : ctx_(ctx) {}
  LiveGuard(const LiveGuard &) = delete;
  LiveGuard &operator=(const LiveGuard &) = delete;
  void add(::gloo::transport::UnboundBuffer *b) {
    std::lock_guard<std::mutex> lk(ctx_->live_mu);
    ctx_->live.insert(b);
    bufs_.push_back(b);
  }
  ~LiveGuard() {
    std::lock_guard<std::mutex> lk(ctx_->live_mu);
    for (auto *b : bufs_) ctx_->live.erase(b);
  }

 private:
  dlpg__gloo_ctx_t *ctx_;
  std::vector<::gloo::transport::UnboundBuffer *> bufs_;
};

// Milliseconds left until deadline, at least 1 (Gloo's waits take a positive timeout).
inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return ms.count() < 1 ? std::chrono::milliseconds(1) : ms;
}

// Slot prefixes of the island's own traffic: beyond Gloo's collective prefixes (0x01..0x08).
constexpr uint8_t kP2pHeaderSlotPrefix = 0x10;  // a send's first message
constexpr uint8_t kReduceScatterSlotPrefix = 0x11;
constexpr uint8_t kCollFirstSlotPrefix = 0x12;  // a collective's first message
constexpr uint8_t kP2pAckSlotPrefix = 0x13;     // a receiver's answer to a large send
constexpr uint8_t kP2pDataSlotPrefix = 0x14;    // a large send's payload
constexpr uint8_t kReduceScatterVSlotPrefix = 0x15;

}  // namespace dlpg_gloo
