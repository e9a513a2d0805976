// Point-to-point transfers of the Gloo path: unbound buffers on slots derived from the user
// tag. Gloo's TCP transport terminates the process when a send is larger than the receive it
// lands in, so a send never transfers a size the receiver has not agreed to:
//  - its first message, on the header slot, is a WireHeader followed by the payload when
//    that is at most kSmallBytes; the receiver always posts kBlockBytes there, compares the
//    header with its own tensor and copies the inline payload out. (A small sender does not
//    learn of a mismatch: only its receiver fails.)
//  - a larger payload waits for the receiver's answer on the ack slot: an ACK, after which
//    the receiver has posted a receive of exactly the agreed size on the data slot, or a
//    NACK, after which both sides fail with INVALID_ARGUMENT naming both sizes.
// Each transfer runs on its pair's own 2-rank context (p2p_pairs.cc), and every message of a
// transfer has its own slots, made of the tag and the transfer's sequence number among the
// (peer, tag) transfers of its direction, so transfers run by different threads in any
// order can never take each other's messages.
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <gloo/types.h>

#include "gloo/ops_internal.h"
#include "gloo/peers.h"

namespace dlpg_gloo {

namespace {

using UBuf = std::unique_ptr<::gloo::transport::UnboundBuffer>;

// Gloo's Slot::build(prefix, tag) with the sequence number in bits 32..55.
uint64_t slot_of(uint8_t prefix, int tag, uint32_t seq) {
  return ::gloo::Slot::build(prefix, static_cast<uint32_t>(tag)) |
         (static_cast<uint64_t>(seq & 0xffffffu) << 32);
}

// One send or receive and the buffers of its messages.
struct P2p {
  const dlpg__op_t *op = nullptr;
  P2pLink link{};
  std::vector<char> first;  // SEND: header + inline payload; RECV: kBlockBytes landing
  WireHeader ack{};         // SEND: the receiver's answer; RECV: this rank's answer
  UBuf first_buf, ack_buf, data_buf;
  bool large = false;       // SEND: payload > kSmallBytes; RECV: the sender's is
  std::string error;        // the mismatch found, reported after every wait has ended
};

std::string who(const dlpg__op_t &op) {
  return std::string(dlpg__op_name(op.kind)) + " with peer " + std::to_string(op.peer) +
         ", tag " + std::to_string(op.tag);
}

// Wait for b's receive (recv) or send of transfer p. A wake-up by the watchdog (gloo/peers.h)
// for another peer's lost connection waits again; one for p's peer fails with
// DLPG_ERR_REMOTE naming the peer's group rank (p.link.peer is its rank in the pair's own
// 2-rank context).
void wait_buf(const P2p &p, ::gloo::transport::UnboundBuffer *b, bool recv,
              std::chrono::steady_clock::time_point deadline) {
  dlpg__gloo_ctx_t *ctx = p.link.ctx;
  const dlpg__op_t &op = *p.op;
  for (;;) {
    if (recv ? b->waitRecv(time_left(deadline)) : b->waitSend(time_left(deadline))) return;
    if (ctx->aborted.load() || ctx->lost_peer.load() < 0)
      throw StatusError(DLPG_ERR_ABORTED, who(op) + ": the group was aborted");
    if (peer_lost(ctx, p.link.peer))
      throw StatusError(DLPG_ERR_REMOTE,
                        who(op) + ": lost the connection to rank " + std::to_string(op.peer) +
                            kLostWhy);
  }
}

void wait_recv(const P2p &p, ::gloo::transport::UnboundBuffer *b,
               std::chrono::steady_clock::time_point deadline) {
  wait_buf(p, b, true, deadline);
}

void wait_send(const P2p &p, ::gloo::transport::UnboundBuffer *b,
               std::chrono::steady_clock::time_point deadline) {
  wait_buf(p, b, false, deadline);
}

// Post the first message of a send (and the receive of its answer), or the first receive.
void post_first(P2p &p, LiveGuard &live) {
  const dlpg__op_t &op = *p.op;
  dlpg__gloo_ctx_t *ctx = p.link.ctx;
  const int peer = p.link.peer;
  const uint32_t seq = p.link.seq;
  if (op.kind == DLPG__OP_SEND) {
    const dlpg__tensor_t &t = op.in[0];
    WireHeader h = make_header(op, p.link.self, static_cast<uint64_t>(op.tag));
    p.large = t.nbytes > kSmallBytes;
    const size_t inline_bytes = p.large ? 0 : t.nbytes;
    if (!p.large) h.flags |= kFlagInline;
    h.payload_bytes = inline_bytes;
    p.first.resize(kHeaderBytes + inline_bytes);
    memcpy(p.first.data(), &h, kHeaderBytes);
    if (inline_bytes) memcpy(p.first.data() + kHeaderBytes, t.ptr, inline_bytes);
    if (p.large) {
      p.ack_buf = ctx->gloo->createUnboundBuffer(&p.ack, sizeof p.ack);
      live.add(p.ack_buf.get());
      p.ack_buf->recv(peer, slot_of(kP2pAckSlotPrefix, op.tag, seq), 0, sizeof p.ack);
    }
    p.first_buf = ctx->gloo->createUnboundBuffer(p.first.data(), p.first.size());
    live.add(p.first_buf.get());
    p.first_buf->send(peer, slot_of(kP2pHeaderSlotPrefix, op.tag, seq));
  } else {
    p.first.assign(kBlockBytes, 0);
    p.first_buf = ctx->gloo->createUnboundBuffer(p.first.data(), p.first.size());
    live.add(p.first_buf.get());
    p.first_buf->recv(peer, slot_of(kP2pHeaderSlotPrefix, op.tag, seq), 0, kBlockBytes);
  }
}

// A receive whose first message arrived: check it, take an inline payload, or answer a
// large sender (and post the payload's receive when the sizes agree).
void answer_first(P2p &p, LiveGuard &live) {
  const dlpg__op_t &op = *p.op;
  dlpg__gloo_ctx_t *ctx = p.link.ctx;
  WireHeader h;
  memcpy(&h, p.first.data(), sizeof h);
  p.error = compare_p2p_recv(op, p.link.self, h);
  const bool malformed = h.magic != kMagic || h.kind != DLPG__OP_SEND;
  p.large = !malformed && !(h.flags & kFlagInline);
  if (!p.large) {
    if (p.error.empty() && op.out[0].nbytes)
      memcpy(op.out[0].ptr, p.first.data() + kHeaderBytes, op.out[0].nbytes);
    return;
  }
  p.ack = make_header(op, p.link.self, static_cast<uint64_t>(op.tag));
  p.ack.kind = kKindAck;
  if (!p.error.empty()) p.ack.flags |= kFlagNack;
  if (p.error.empty()) {
    // Post the payload's receive before the ACK leaves, so the payload always finds it.
    p.data_buf = ctx->gloo->createUnboundBuffer(op.out[0].ptr, op.out[0].nbytes);
    live.add(p.data_buf.get());
    p.data_buf->recv(p.link.peer, slot_of(kP2pDataSlotPrefix, op.tag, p.link.seq), 0,
                     op.out[0].nbytes);
  }
  p.ack_buf = ctx->gloo->createUnboundBuffer(&p.ack, sizeof p.ack);
  live.add(p.ack_buf.get());
  p.ack_buf->send(p.link.peer, slot_of(kP2pAckSlotPrefix, op.tag, p.link.seq), 0, sizeof p.ack);
}

// A large send whose answer arrived: send the payload after an ACK, fail after a NACK.
void send_payload(P2p &p, LiveGuard &live) {
  const dlpg__op_t &op = *p.op;
  dlpg__gloo_ctx_t *ctx = p.link.ctx;
  if (p.ack.magic != kMagic || p.ack.kind != kKindAck || p.ack.rank != op.peer) {
    p.error = "rank " + std::to_string(op.peer) + " answered " + who(op) +
              " with a malformed acknowledgement";
    return;
  }
  if (p.ack.flags & kFlagNack) {
    p.error = describe_p2p_nack(op, p.link.self, p.ack);
    return;
  }
  p.data_buf = ctx->gloo->createUnboundBuffer(op.in[0].ptr, op.in[0].nbytes);
  live.add(p.data_buf.get());
  p.data_buf->send(p.link.peer, slot_of(kP2pDataSlotPrefix, op.tag, p.link.seq), 0,
                   op.in[0].nbytes);
}

// Post, then wait message by message (first message, answer, payload) within deadline;
// throws a mismatch found (INVALID_ARGUMENT) once every wait has ended. Every buffer is
// registered with live.
void run_messages(P2p &p, LiveGuard &live, std::chrono::steady_clock::time_point deadline) {
  post_first(p, live);
  if (p.op->kind == DLPG__OP_RECV) {
    // The receiver checks the sender's header and answers a large one.
    wait_recv(p, p.first_buf.get(), deadline);
    answer_first(p, live);
    if (p.ack_buf) wait_send(p, p.ack_buf.get(), deadline);
    if (p.data_buf) wait_recv(p, p.data_buf.get(), deadline);
  } else {
    // The sender sees its first message taken and, for a large one, the answer.
    wait_send(p, p.first_buf.get(), deadline);
    if (p.large) {
      wait_recv(p, p.ack_buf.get(), deadline);
      send_payload(p, live);
    }
    if (p.data_buf) wait_send(p, p.data_buf.get(), deadline);
  }
  if (!p.error.empty())
    throw StatusError(DLPG_ERR_INVALID_ARGUMENT,
                      std::string(dlpg__op_name(p.op->kind)) + ": " + p.error);
}

}  // namespace

void run_p2p_one(const P2pLink &link, const dlpg__op_t &op,
                 std::chrono::steady_clock::time_point deadline) {
  P2p p;
  p.op = &op;
  p.link = link;
  LiveGuard live(link.ctx);
  run_messages(p, live, deadline);
}

uint64_t p2p_header_slot(int tag, uint32_t seq) { return slot_of(kP2pHeaderSlotPrefix, tag, seq); }

void finish_recv(const P2pLink &link, const dlpg__op_t &op, const std::vector<char> &first,
                 std::chrono::steady_clock::time_point deadline) {
  P2p p;
  p.op = &op;
  p.link = link;
  p.first = first;
  LiveGuard live(link.ctx);
  answer_first(p, live);
  if (p.ack_buf) wait_send(p, p.ack_buf.get(), deadline);
  if (p.data_buf) wait_recv(p, p.data_buf.get(), deadline);
  if (!p.error.empty())
    throw StatusError(DLPG_ERR_INVALID_ARGUMENT, std::string(dlpg__op_name(op.kind)) + ": " + p.error);
}

}  // namespace dlpg_gloo
