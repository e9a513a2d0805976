// Shared helpers of the island's operation files (ops_coll.cc, ops_p2p.cc, ops_run.cc).
#pragma once

#include <cstdint>

#include <string>

#include "gloo/ctx.h"
#include "gloo/errors.h"

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

// Run one collective (every kind but SEND and RECV). Throws on failure.
void run_collective(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op);

// Post every SEND and RECV of ops[0..n) (others are skipped), then wait for them all,
// within one deadline of ctx's timeout. Throws on the first failure.
void run_p2p(dlpg__gloo_ctx_t *ctx, dlpg__op_t *const *ops, int n);

// Slot of a send/recv with user tag: prefix 0x10 is beyond Gloo's collective prefixes
// (0x01..0x08), so a user tag can never match a collective's traffic.
uint64_t p2p_slot(int tag);

}  // namespace dlpg_gloo
