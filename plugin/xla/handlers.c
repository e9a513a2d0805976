/*
 * handlers.c -- the XLA FFI handlers: one per dlpg operation and platform.
 *
 * CUDA handlers enqueue the operation on the stream XLA hands over, reading XLA's input
 * buffer and writing straight into XLA's output buffer (work == NULL: no event, no host
 * sync). CPU handlers run the operation through dlpg's CPU path (the group's choice: shared
 * memory on one host, else Gloo) and return once it has completed. Every dlpg failure becomes an XLA_FFI_Error carrying dlpg's message.
 */
#include <stddef.h>
#include <stdlib.h>

#include "xla_ffi.h"

static void *const *streams_of(dlpg_xla_call_t *c) {
  return c->platform == DLPG_XLA_CUDA ? &c->stream : NULL;
}

static XLA_FFI_Error *run_allreduce(dlpg_xla_call_t *c) {
  DLTensor *in = &c->input, *out = &c->output;
  return dlpg_xla__check(c, c->dl->allreduce(c->group, &in, &out, 1,
                                             (dlpg_reduce_op_t)c->reduce_op, streams_of(c), NULL));
}

/* The reduction lands in root's output only; the Python side hands other ranks their
 * input back, so the unwritten output is never read. */
static XLA_FFI_Error *run_reduce(dlpg_xla_call_t *c) {
  DLTensor *in = &c->input, *out = &c->output;
  return dlpg_xla__check(c, c->dl->reduce(c->group, &in, &out, 1, (dlpg_reduce_op_t)c->reduce_op,
                                          (int)c->root, streams_of(c), NULL));
}

static XLA_FFI_Error *run_allgather(dlpg_xla_call_t *c) {
  DLTensor *in = &c->input, *out = &c->output;
  return dlpg_xla__check(c, c->dl->allgather(c->group, &in, &out, 1, streams_of(c), NULL));
}

static XLA_FFI_Error *run_reduce_scatter(dlpg_xla_call_t *c) {
  DLTensor *in = &c->input, *out = &c->output;
  return dlpg_xla__check(c, c->dl->reduce_scatter(c->group, &in, &out, 1,
                                                  (dlpg_reduce_op_t)c->reduce_op,
                                                  streams_of(c), NULL));
}

static XLA_FFI_Error *run_broadcast(dlpg_xla_call_t *c) {
  DLTensor *in = &c->input, *out = &c->output;
  return dlpg_xla__check(c, c->dl->broadcast(c->group, &in, &out, 1, (int)c->root,
                                             streams_of(c), NULL));
}

static XLA_FFI_Error *run_alltoall(dlpg_xla_call_t *c) {
  return dlpg_xla__check(c, c->dl->alltoall(c->group, &c->input, &c->output, c->stream, NULL));
}

static XLA_FFI_Error *run_send(dlpg_xla_call_t *c) {
  return dlpg_xla__check(c, c->dl->send(c->group, &c->input, (int)c->peer, (int)c->tag,
                                        c->stream, NULL));
}

static XLA_FFI_Error *run_recv(dlpg_xla_call_t *c) {
  return dlpg_xla__check(c, c->dl->recv(c->group, &c->output, (int)c->peer, (int)c->tag,
                                        c->stream, NULL));
}

/* Send to peer and receive from source in one batch, so a ring of them cannot deadlock
 * (each rank's send waits for its receiver; batched, the pair's transfers progress
 * together). The batch is ended even when a call in it fails. */
static XLA_FFI_Error *run_sendrecv(dlpg_xla_call_t *c) {
  dlpg_status_t st = c->dl->group_start(c->group);
  if (st != DLPG_OK) return dlpg_xla__check(c, st);
  st = c->dl->send(c->group, &c->input, (int)c->peer, (int)c->tag, c->stream, NULL);
  if (st == DLPG_OK)
    st = c->dl->recv(c->group, &c->output, (int)c->source, (int)c->tag, c->stream, NULL);
  if (st != DLPG_OK) {
    XLA_FFI_Error *e = dlpg_xla__check(c, st); /* read the message before group_end */
    (void)c->dl->group_end(c->group);
    return e;
  }
  return dlpg_xla__check(c, c->dl->group_end(c->group));
}

/* The functions added to dlpg_api_t after the first table: a libdlpg whose table ends
 * before field is refused with a message instead of read past its end. */
#define HAS(c, field) \
  ((c)->dl->struct_size >= offsetof(dlpg_api_t, field) + sizeof((c)->dl->field))

static XLA_FFI_Error *too_old(dlpg_xla_call_t *c, const char *fn) {
  return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_UNIMPLEMENTED,
                         "dlpg.jax.%s: the loaded libdlpg predates %s (its function table "
                         "has %zu bytes)", c->op, fn, c->dl->struct_size);
}

/* Ranks other than root pass their input to dlpg.jax.gather and get it back; their output
 * is an empty array, not handed to dlpg (which does not touch it there). */
static XLA_FFI_Error *run_gather(dlpg_xla_call_t *c) {
  if (!HAS(c, gather)) return too_old(c, "dlpg_gather");
  DLTensor *out = c->rank == (int)c->root ? &c->output : NULL;
  return dlpg_xla__check(c, c->dl->gather(c->group, &c->input, out, (int)c->root, c->stream,
                                          NULL));
}

/* Ranks other than root pass an array of the block's shape (its values unread) so that
 * jax.vmap batches every rank's call alike; dlpg does not touch it there. */
static XLA_FFI_Error *run_scatter(dlpg_xla_call_t *c) {
  if (!HAS(c, scatter)) return too_old(c, "dlpg_scatter");
  DLTensor *in = c->rank == (int)c->root ? &c->input : NULL;
  return dlpg_xla__check(c, c->dl->scatter(c->group, in, &c->output, (int)c->root, c->stream,
                                           NULL));
}

/* dlpg.jax counts rows of axis 0 (so that jax.vmap can move its batch axis behind it);
 * dlpg counts elements: every count and displacement is scaled by the elements of a row. */
static XLA_FFI_Error *run_alltoallv(dlpg_xla_call_t *c) {
  if (!HAS(c, alltoallv)) return too_old(c, "dlpg_alltoallv");
  int64_t row = 1;
  for (int d = 1; d < c->input.ndim; d++) row *= c->input.shape[d];
  int64_t *scaled = malloc(sizeof(int64_t) * DLPG_XLA_NCOUNTS * (size_t)c->size);
  if (scaled == NULL)
    return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                           "dlpg.jax.alltoallv: out of memory for %d ranks' counts", c->size);
  for (int i = 0; i < DLPG_XLA_NCOUNTS; i++)
    for (int r = 0; r < c->size; r++) scaled[i * c->size + r] = c->counts[i][r] * row;
  const int64_t *at = scaled;
  dlpg_status_t st = c->dl->alltoallv(c->group, &c->input, at + DLPG_XLA_SEND_COUNTS * c->size,
                                      at + DLPG_XLA_SEND_DISPLS * c->size, &c->output,
                                      at + DLPG_XLA_RECV_COUNTS * c->size,
                                      at + DLPG_XLA_RECV_DISPLS * c->size, c->stream, NULL);
  XLA_FFI_Error *e = dlpg_xla__check(c, st); /* reads the message before anything else */
  free(scaled);
  return e;
}

/* dlpg.jax's default mode joins the chain of a jitted body's calls to the ordered effect's
 * token with this call: its operands and results are the ordering, there is nothing to do. */
static XLA_FFI_Error *run_link(dlpg_xla_call_t *c) {
  (void)c;
  return NULL;
}

enum {
  IO = DLPG_XLA_NEEDS_INPUT | DLPG_XLA_NEEDS_OUTPUT,
  IO_OP = IO | DLPG_XLA_NEEDS_OP,
  IO_ROOT = IO | DLPG_XLA_NEEDS_ROOT,
  SEND = DLPG_XLA_NEEDS_INPUT | DLPG_XLA_NEEDS_PEER,
  RECV = DLPG_XLA_NEEDS_OUTPUT | DLPG_XLA_NEEDS_PEER,
  IO_OP_ROOT = IO_OP | DLPG_XLA_NEEDS_ROOT,
  SENDRECV = IO | DLPG_XLA_NEEDS_PEER | DLPG_XLA_NEEDS_SOURCE,
  IO_COUNTS = IO | DLPG_XLA_NEEDS_COUNTS
};

/* dlpg_xla_<op>_cpu and dlpg_xla_<op>_cuda, the symbols the Python shim registers. */
#define DLPG_XLA_HANDLERS(name, needs)                                                  \
  DLPG_XLA_EXPORT XLA_FFI_Error *dlpg_xla_##name##_cpu(XLA_FFI_CallFrame *f);          \
  DLPG_XLA_EXPORT XLA_FFI_Error *dlpg_xla_##name##_cuda(XLA_FFI_CallFrame *f);         \
  XLA_FFI_Error *dlpg_xla_##name##_cpu(XLA_FFI_CallFrame *f) {                         \
    return dlpg_xla__handle(f, #name, DLPG_XLA_CPU, needs, run_##name);                \
  }                                                                                     \
  XLA_FFI_Error *dlpg_xla_##name##_cuda(XLA_FFI_CallFrame *f) {                        \
    return dlpg_xla__handle(f, #name, DLPG_XLA_CUDA, needs, run_##name);               \
  }

DLPG_XLA_HANDLERS(allreduce, IO_OP)
DLPG_XLA_HANDLERS(reduce, IO_OP_ROOT)
DLPG_XLA_HANDLERS(allgather, IO)
DLPG_XLA_HANDLERS(reduce_scatter, IO_OP)
DLPG_XLA_HANDLERS(broadcast, IO_ROOT)
DLPG_XLA_HANDLERS(alltoall, IO)
DLPG_XLA_HANDLERS(send, SEND)
DLPG_XLA_HANDLERS(recv, RECV)
DLPG_XLA_HANDLERS(sendrecv, SENDRECV)
DLPG_XLA_HANDLERS(gather, IO_ROOT)
DLPG_XLA_HANDLERS(scatter, IO_ROOT)
DLPG_XLA_HANDLERS(alltoallv, IO_COUNTS)
DLPG_XLA_HANDLERS(link, 0)
