// The rooted and uneven collectives of the Gloo path: gather, scatter, allgatherv and
// alltoallv run Gloo's own algorithms; reduce_scatter_v, which this Gloo lacks (its
// reduce_scatter.h is a fixed-type algorithm class without a tag or timeout), runs a ring on
// unbound buffers as reduce_scatter does. Every one starts with the header exchange
// (ops_small.cc): the v-forms' first message carries this rank's counts instead of a
// payload, so every rank judges every rank's counts (core/group/vcounts.h) before any receive
// sized from them is posted -- Gloo's transport ends the process when a message outgrows
// its receive.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>
#include <gloo/types.h>

#include "core/group/vcounts.h"
#include "gloo/ops_internal.h"
#include "gloo/reduce_fns.h"

namespace dlpg_gloo {

namespace {

// Gloo's buffers must point somewhere even when empty.
char g_empty;
void *or_empty(void *p) { return p ? p : &g_empty; }

// Whether blocks (counts[i] at displs[i], elements) lie packed in rank order from 0.
bool packed(const int64_t *counts, const int64_t *displs, int n) {
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (displs[i] != off) return false;
    off += counts[i];
  }
  return true;
}

void do_gather(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, size_t E, uint32_t tag) {
  const size_t block = static_cast<size_t>(op.in[0].numel);
  if (block == 0) return;  // every rank's header said so
  with_elem_type(E <= 8 ? E : 8, [&](auto e) {
    using T = typename decltype(e)::type;
    const size_t k = E / sizeof(T);  // a complex element as its parts
    ::gloo::GatherOptions opts(ctx->gloo);
    opts.setInput<T>(static_cast<T *>(op.in[0].ptr), block * k);
    if (ctx->rank == op.root)
      opts.setOutput<T>(static_cast<T *>(op.out[0].ptr), block * k * ctx->size);
    opts.setRoot(op.root);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::gather(opts);
  });
}

void do_scatter(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, size_t E, uint32_t tag) {
  const size_t block = static_cast<size_t>(op.out[0].numel);
  if (block == 0) return;
  with_elem_type(E <= 8 ? E : 8, [&](auto e) {
    using T = typename decltype(e)::type;
    const size_t k = E / sizeof(T);
    ::gloo::ScatterOptions opts(ctx->gloo);
    if (ctx->rank == op.root) {
      std::vector<T *> ins(static_cast<size_t>(ctx->size));
      for (int i = 0; i < ctx->size; i++)
        ins[static_cast<size_t>(i)] = static_cast<T *>(op.in[0].ptr) + static_cast<size_t>(i) * block * k;
      opts.setInputs<T>(ins, block * k);
    }
    opts.setOutput<T>(static_cast<T *>(op.out[0].ptr), block * k);
    opts.setRoot(op.root);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::scatter(opts);
  });
}

void do_allgatherv(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, size_t E, uint32_t tag) {
  const int n = ctx->size;
  const int64_t *cnt = op.counts, *dsp = op.displs;
  const int64_t total = std::accumulate(cnt, cnt + n, int64_t{0});
  if (total == 0) return;
  // Gloo packs the blocks in rank order: straight into the output when the caller's
  // displacements say the same, else into scratch, then each block to its place.
  const bool direct = packed(cnt, dsp, n);
  std::vector<char> scratch(direct ? 0 : static_cast<size_t>(total) * E);
  char *out = direct ? static_cast<char *>(op.out[0].ptr) : scratch.data();
  with_elem_type(E <= 8 ? E : 8, [&](auto e) {
    using T = typename decltype(e)::type;
    const size_t k = E / sizeof(T);
    std::vector<size_t> elems(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) elems[static_cast<size_t>(i)] = static_cast<size_t>(cnt[i]) * k;
    ::gloo::AllgathervOptions opts(ctx->gloo);
    opts.setInput<T>(static_cast<T *>(or_empty(op.in[0].ptr)), elems[static_cast<size_t>(ctx->rank)]);
    opts.setOutput<T>(reinterpret_cast<T *>(out), elems);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::allgatherv(opts);
  });
  if (direct) return;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const size_t len = static_cast<size_t>(cnt[i]) * E;
    if (len) memcpy(static_cast<char *>(op.out[0].ptr) + static_cast<size_t>(dsp[i]) * E, out + off, len);
    off += len;
  }
}

void do_alltoallv(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, size_t E, uint32_t tag) {
  const int n = ctx->size;
  const int64_t *sc = op.counts, *sd = op.displs, *rc = op.recv_counts, *rd = op.recv_displs;
  const int64_t sent = std::accumulate(sc, sc + n, int64_t{0});
  const int64_t got = std::accumulate(rc, rc + n, int64_t{0});
  // Gloo takes packed blocks on both sides: pack into scratch (unpack from it) only where
  // the caller's displacements are not already packed.
  const bool in_direct = packed(sc, sd, n), out_direct = packed(rc, rd, n);
  std::vector<char> sbuf(in_direct ? 0 : static_cast<size_t>(sent) * E);
  std::vector<char> rbuf(out_direct ? 0 : static_cast<size_t>(got) * E);
  char *in = in_direct ? static_cast<char *>(op.in[0].ptr) : sbuf.data();
  char *out = out_direct ? static_cast<char *>(op.out[0].ptr) : rbuf.data();
  if (!in_direct) {
    size_t off = 0;
    for (int j = 0; j < n; j++) {
      const size_t len = static_cast<size_t>(sc[j]) * E;
      if (len) memcpy(in + off, static_cast<const char *>(op.in[0].ptr) + static_cast<size_t>(sd[j]) * E, len);
      off += len;
    }
  }
  with_elem_type(E <= 8 ? E : 8, [&](auto e) {
    using T = typename decltype(e)::type;
    const int64_t k = static_cast<int64_t>(E / sizeof(T));
    std::vector<int64_t> se(sc, sc + n), re(rc, rc + n);
    for (auto &v : se) v *= k;
    for (auto &v : re) v *= k;
    ::gloo::AlltoallvOptions opts(ctx->gloo);
    opts.setInput<T>(reinterpret_cast<T *>(or_empty(in)), se);
    opts.setOutput<T>(reinterpret_cast<T *>(or_empty(out)), re);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::alltoallv(opts);
  });
  if (out_direct) return;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const size_t len = static_cast<size_t>(rc[i]) * E;
    if (len) memcpy(static_cast<char *>(op.out[0].ptr) + static_cast<size_t>(rd[i]) * E, out + off, len);
    off += len;
  }
}

// A ring as reduce_scatter's (ops_coll.cc), over blocks of their own sizes: at step s rank r
// sends its partial block (r-1-s) to r+1 and adds block (r-2-s) from r-1 into its copy;
// after n-1 steps its block r holds every contribution. Blocks of zero elements are known
// to both ends (the counts agree), so neither sends nor posts them.
void do_reduce_scatter_v(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &orig, size_t E, uint32_t tag) {
  const int n = ctx->size, r = ctx->rank;
  const int64_t *cnt = orig.counts, *dsp = orig.displs;
  dlpg__op_t view_store;
  std::vector<char> scaled;
  const dlpg__op_t &op = reduce_view(orig, view_store, scaled);  // complex parts, premul
  dlpg__op_t sum = op;
  if (sum.rop == DLPG_AVG) sum.rop = DLPG_SUM;  // average only the kept block
  ReduceFn fn = op_reduce_fn(sum);
  const size_t part = dlpg__dtype_size(op.in[0].dtype);  // what fn counts (a complex part)
  std::vector<size_t> off(static_cast<size_t>(n) + 1, 0);
  size_t biggest = 0;
  for (int i = 0; i < n; i++) {
    const size_t len = static_cast<size_t>(cnt[i]) * E;
    off[static_cast<size_t>(i) + 1] = off[static_cast<size_t>(i)] + len;
    biggest = std::max(biggest, len);
  }
  std::vector<char> acc(std::max<size_t>(off[static_cast<size_t>(n)], 1)), tmp(std::max<size_t>(biggest, 1));
  for (int i = 0; i < n; i++)
    if (cnt[i])
      memcpy(acc.data() + off[static_cast<size_t>(i)],
             static_cast<const char *>(op.in[0].ptr) + static_cast<size_t>(dsp[i]) * E,
             static_cast<size_t>(cnt[i]) * E);
  if (n > 1) {
    auto sendbuf = ctx->gloo->createUnboundBuffer(acc.data(), acc.size());
    auto recvbuf = ctx->gloo->createUnboundBuffer(tmp.data(), tmp.size());
    LiveGuard live(ctx);
    live.add(sendbuf.get());
    live.add(recvbuf.get());
    const auto slot = ::gloo::Slot::build(kReduceScatterVSlotPrefix, tag);
    const auto deadline = std::chrono::steady_clock::now() + ctx->timeout;
    for (int s = 0; s < n - 1; s++) {
      const int send_blk = ((r - 1 - s) % n + n) % n, recv_blk = ((r - 2 - s) % n + n) % n;
      const size_t slen = static_cast<size_t>(cnt[send_blk]) * E;
      const size_t rlen = static_cast<size_t>(cnt[recv_blk]) * E;
      if (rlen) recvbuf->recv((r + n - 1) % n, slot + static_cast<uint8_t>(s), 0, rlen);
      if (slen) sendbuf->send((r + 1) % n, slot + static_cast<uint8_t>(s), off[static_cast<size_t>(send_blk)], slen);
      if ((rlen && !recvbuf->waitRecv(time_left(deadline))) ||
          (slen && !sendbuf->waitSend(time_left(deadline))))
        throw StatusError(DLPG_ERR_ABORTED, "the group was aborted");
      if (rlen) {
        char *dst = acc.data() + off[static_cast<size_t>(recv_blk)];
        fn(dst, dst, tmp.data(), rlen / part);
      }
    }
  }
  const size_t mine = static_cast<size_t>(cnt[r]) * E;
  if (mine) memcpy(op.out[0].ptr, acc.data() + off[static_cast<size_t>(r)], mine);
  if (op.rop == DLPG_AVG && mine) average(op.in[0], op.out[0].ptr, mine / part, n);
}

}  // namespace

bool is_vcollective(dlpg__op_kind_t kind) {
  return kind == DLPG__OP_GATHER || kind == DLPG__OP_SCATTER || kind == DLPG__OP_ALLGATHERV ||
         kind == DLPG__OP_ALLTOALLV || kind == DLPG__OP_REDUCE_SCATTER_V;
}

void run_vcollective(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op) {
  const int n = ctx->size;
  const size_t npub = dlpg__vcounts_len(op.kind, n);
  // Every rank has the same size, so all refuse alike, before the collective's counter moves.
  if (npub * sizeof(int64_t) > kSmallBytes || (op.kind == DLPG__OP_REDUCE_SCATTER_V && n > 255))
    throw StatusError(DLPG_ERR_UNSUPPORTED,
                      std::string("not on Gloo for ") + std::to_string(n) +
                          " ranks (its counts travel in the first message: at most " +
                          std::to_string(op.kind == DLPG__OP_ALLTOALLV ? 256 : 255) + " ranks)");
  if (!dlpg__be_op_counts(&op.be) && npub)
    throw StatusError(DLPG_ERR_INTERNAL, "the operation came without its counts");
  const size_t E = dlpg__dtype_size(op.in[0].dtype);
  const uint32_t tag = ctx->next_tag++;
  const WireHeader h = make_header(op, ctx->rank, tag);
  std::vector<int64_t> mine(npub), all(npub * static_cast<size_t>(n));
  if (npub) dlpg__vcounts_publish(&op.be, n, mine.data());
  try {
    exchange_first(ctx, h, mine.data(), npub * sizeof(int64_t),
                   npub ? PayloadTo::kAll : PayloadTo::kNone, op.root, tag);
  } catch (const StatusError &e) {
    if (e.status() == DLPG_ERR_INVALID_ARGUMENT) prepost_next_first(ctx);
    throw;
  }
  // The payloads are read out before the next collective's receives reuse their buffer.
  std::vector<const int64_t *> pub(static_cast<size_t>(n));
  for (int q = 0; q < n && npub; q++) {
    int64_t *dst = all.data() + static_cast<size_t>(q) * npub;
    memcpy(dst, first_payload(ctx, q), npub * sizeof(int64_t));
    pub[static_cast<size_t>(q)] = dst;
  }
  prepost_next_first(ctx);
  char why[256];
  if (npub && dlpg__vcounts_disagree(op.kind, n, pub.data(), why, sizeof why))
    throw StatusError(DLPG_ERR_INVALID_ARGUMENT, why);
  switch (op.kind) {
    case DLPG__OP_GATHER: do_gather(ctx, op, E, tag); break;
    case DLPG__OP_SCATTER: do_scatter(ctx, op, E, tag); break;
    case DLPG__OP_ALLGATHERV: do_allgatherv(ctx, op, E, tag); break;
    case DLPG__OP_ALLTOALLV: do_alltoallv(ctx, op, E, tag); break;
    case DLPG__OP_REDUCE_SCATTER_V: do_reduce_scatter_v(ctx, op, E, tag); break;
    default:
      throw StatusError(DLPG_ERR_INTERNAL, "operation kind " +
                                               std::to_string(static_cast<int>(op.kind)) +
                                               " is not a rooted or uneven collective");
  }
}

}  // namespace dlpg_gloo
