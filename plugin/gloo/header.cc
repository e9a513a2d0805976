// Building and checking the island's wire headers (see header.h). Messages name the field,
// both values and both ranks, so that every rank of a mismatched collective reports the same
// readable cause.
#include "gloo/header.h"

#include <cstring>

namespace dlpg_gloo {
namespace {

bool reduces(uint32_t kind) {
  return kind == DLPG__OP_ALLREDUCE || kind == DLPG__OP_REDUCE ||
         kind == DLPG__OP_REDUCE_SCATTER || kind == DLPG__OP_REDUCE_SCATTER_V;
}

bool rooted(uint32_t kind) {
  return kind == DLPG__OP_BROADCAST || kind == DLPG__OP_REDUCE || kind == DLPG__OP_GATHER ||
         kind == DLPG__OP_SCATTER;
}

std::string dtype_name(uint32_t dt) {
  if (dt < DLPG__DT_COUNT) return dlpg__dtype_name(static_cast<dlpg__dtype_t>(dt));
  return "dtype(" + std::to_string(dt) + ")";
}

std::string kind_name(uint32_t kind) {
  if (kind < DLPG__OP_COUNT) return dlpg__op_name(static_cast<dlpg__op_kind_t>(kind));
  return "operation(" + std::to_string(kind) + ")";
}

// What a collective header says about its tensors.
std::string describe_tensors(const WireHeader &h) {
  if (h.in_numel < 0) return dtype_name(h.dtype) + " elements";  // counts compared apart
  if (h.in_numel == h.out_numel) return describe_elems(h.in_numel, h.dtype);
  return "an input of " + std::to_string(h.in_numel) + " and an output of " +
         std::to_string(h.out_numel) + " elements of " + dtype_name(h.dtype);
}

std::string rank_str(int r) { return "rank " + std::to_string(r); }

}  // namespace

std::string describe_elems(int64_t numel, uint32_t dtype) {
  return std::to_string(numel) + (numel == 1 ? " element of " : " elements of ") +
         dtype_name(dtype);
}

std::string describe_bytes(int64_t numel, uint32_t dtype) {
  const size_t es = dtype < DLPG__DT_COUNT ? dlpg__dtype_size(static_cast<dlpg__dtype_t>(dtype)) : 0;
  return std::to_string(static_cast<long long>(numel) * static_cast<long long>(es)) +
         " bytes (" + std::to_string(numel) + " x " + dtype_name(dtype) + ")";
}

WireHeader make_header(const dlpg__op_t &op, int rank, uint64_t seq) {
  WireHeader h;
  memset(&h, 0, sizeof h);
  h.magic = kMagic;
  h.kind = static_cast<uint32_t>(op.kind);
  h.rank = rank;
  h.seq = seq;
  h.ntensors = op.ntensors;
  if (op.kind == DLPG__OP_BARRIER || op.ntensors < 1) return h;
  const dlpg__tensor_t &t = op.kind == DLPG__OP_RECV ? op.out[0] : op.in[0];
  h.dtype = static_cast<uint32_t>(t.dtype);
  h.in_numel = t.numel;
  h.out_numel = op.kind == DLPG__OP_SEND || op.kind == DLPG__OP_RECV ? t.numel : op.out[0].numel;
  // Gather's and scatter's block is what the ranks share (the root alone holds the rest);
  // the v-forms' counts differ by rank and are compared on their own (ops_vcoll.cc).
  if (op.kind == DLPG__OP_GATHER) h.out_numel = t.numel;
  if (op.kind == DLPG__OP_SCATTER) h.in_numel = op.out[0].numel;
  if (op.kind == DLPG__OP_ALLGATHERV || op.kind == DLPG__OP_ALLTOALLV ||
      op.kind == DLPG__OP_REDUCE_SCATTER_V)
    h.in_numel = h.out_numel = -1;
  if (reduces(h.kind)) h.rop = static_cast<uint32_t>(op.rop);
  if (rooted(h.kind)) h.root = op.root;
  return h;
}

std::string compare_collective_headers(const WireHeader *const *hdrs, int n) {
  for (int r = 0; r < n; r++)
    if (hdrs[r]->magic != kMagic || hdrs[r]->rank != r) {
      char m[32];
      snprintf(m, sizeof m, "0x%08x", hdrs[r]->magic);
      return rank_str(r) + " sent a malformed operation header (magic " + m + ", rank " +
             std::to_string(hdrs[r]->rank) + ")";
    }
  const WireHeader &a = *hdrs[0];
  const std::string r0 = rank_str(0);
  for (int r = 1; r < n; r++) {
    const WireHeader &b = *hdrs[r];
    const std::string rr = rank_str(r);
    if (a.kind != b.kind)
      return r0 + " called " + kind_name(a.kind) + " but " + rr + " called " + kind_name(b.kind);
    if (a.seq != b.seq)
      return r0 + " is at collective #" + std::to_string(a.seq) + " but " + rr +
             " at collective #" + std::to_string(b.seq);
    if (a.ntensors != b.ntensors)
      return r0 + " passed " + std::to_string(a.ntensors) + " tensors but " + rr + " passed " +
             std::to_string(b.ntensors);
    if (a.dtype != b.dtype || a.in_numel != b.in_numel || a.out_numel != b.out_numel)
      return r0 + " has " + describe_tensors(a) + " but " + rr + " has " + describe_tensors(b);
    if (reduces(a.kind) && a.rop != b.rop)
      return r0 + " reduces with " +
             dlpg__reduce_op_name(static_cast<dlpg_reduce_op_t>(a.rop)) + " but " + rr +
             " with " + dlpg__reduce_op_name(static_cast<dlpg_reduce_op_t>(b.rop));
    if (rooted(a.kind) && a.root != b.root)
      return r0 + " names root " + std::to_string(a.root) + " but " + rr + " names root " +
             std::to_string(b.root);
  }
  return "";
}

std::string compare_p2p_recv(const dlpg__op_t &recv, int self, const WireHeader &h) {
  const std::string where = " from rank " + std::to_string(recv.peer) + ", tag " +
                            std::to_string(recv.tag);
  if (h.magic != kMagic || h.kind != DLPG__OP_SEND || h.rank != recv.peer)
    return rank_str(self) + " received a malformed send header" + where;
  const dlpg__tensor_t &t = recv.out[0];
  if (h.in_numel == t.numel && h.dtype == static_cast<uint32_t>(t.dtype)) return "";
  return rank_str(self) + " posted " + describe_bytes(t.numel, t.dtype) + where + ", but rank " +
         std::to_string(recv.peer) + " sent " + describe_bytes(h.in_numel, h.dtype);
}

std::string describe_p2p_nack(const dlpg__op_t &send, int self, const WireHeader &ack) {
  const dlpg__tensor_t &t = send.in[0];
  return rank_str(self) + " sent " + describe_bytes(t.numel, t.dtype) + " to rank " +
         std::to_string(send.peer) + ", tag " + std::to_string(send.tag) + ", but rank " +
         std::to_string(send.peer) + " posted " + describe_bytes(ack.in_numel, ack.dtype);
}

}  // namespace dlpg_gloo
