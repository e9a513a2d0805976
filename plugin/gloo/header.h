// The fixed-size header every operation of the island exchanges before any transfer whose
// size depends on a tensor. Gloo's TCP transport terminates the process (GLOO_ENFORCE on its
// own thread) when a peer sends more bytes than a receive posted, so the island never posts
// a receive sized from its own tensor before the peers' sizes are known to match: the first
// message of every collective and every send is a header, optionally followed by a payload
// of at most kSmallBytes, and its receiver always posts kHeaderBytes + kSmallBytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gloo/c_headers.h"

namespace dlpg_gloo {

// Payloads up to this many bytes travel inline with the header (the small-message path:
// one exchange instead of Gloo's multi-step algorithms).
constexpr size_t kSmallBytes = 4096;

// What a header describes (kind field): a collective uses its dlpg__op_kind_t; these mark
// the p2p acknowledgement.
constexpr uint32_t kKindAck = 0x100;

// Flags.
constexpr uint32_t kFlagInline = 1u;  // the payload follows the header in this message
constexpr uint32_t kFlagNack = 2u;    // ACK: the receiver refused the send (mismatch)

// The wire header: 64 bytes, host byte order (every rank of a context runs the same build
// on the same architecture). numel fields describe the sender's tensors, so a receiver can
// name both sides in its message.
struct WireHeader {
  uint32_t magic;
  uint32_t kind;
  uint32_t dtype;
  uint32_t rop;
  int32_t root;
  int32_t ntensors;
  int32_t rank;
  uint32_t flags;
  int64_t in_numel;
  int64_t out_numel;
  uint64_t seq;  // the context's collective counter, or the p2p tag
  uint64_t payload_bytes;  // bytes following the header in this message (kFlagInline)
};
static_assert(sizeof(WireHeader) == 64, "the wire header is 64 bytes");
constexpr size_t kHeaderBytes = sizeof(WireHeader);
constexpr size_t kBlockBytes = kHeaderBytes + kSmallBytes;  // what every first receive posts
constexpr uint32_t kMagic = 0x444c5047u;  // "DLPG"

// The header of a collective op (or of a send, for SEND) on this rank.
WireHeader make_header(const dlpg__op_t &op, int rank, uint64_t seq);

// Check the headers of all n ranks (hdrs[r] is rank r's, hdrs[self] this rank's own)
// against each other. Returns "" when they agree, else a message naming the field, both
// values and both ranks ("rank 0 has 1000 elements of float32 but rank 1 has 1001 elements
// of float32"), the same on every rank because it compares every rank with rank 0.
std::string compare_collective_headers(const WireHeader *const *hdrs, int n);

// Check a received send header h (from rank peer) against the receive op posted here.
// Returns "" when they agree, else the receiver's message.
std::string compare_p2p_recv(const dlpg__op_t &recv, int self, const WireHeader &h);

// The sender's message when its receiver answered with a NACK ack header.
std::string describe_p2p_nack(const dlpg__op_t &send, int self, const WireHeader &ack);

// "1000 elements of float32" / "400 bytes (100 x float32)".
std::string describe_elems(int64_t numel, uint32_t dtype);
std::string describe_bytes(int64_t numel, uint32_t dtype);

}  // namespace dlpg_gloo
