/*
 * handlers.c -- the XLA FFI handlers: one per dlpg operation and platform.
 *
 * CUDA handlers enqueue the operation on the stream XLA hands over, reading XLA's input
 * buffer and writing straight into XLA's output buffer (work == NULL: no event, no host
 * sync). CPU handlers run the operation through dlpg's CPU path (the group's choice: shared
 * memory on one host, else Gloo) and return once it has completed. Every dlpg failure becomes an XLA_FFI_Error carrying dlpg's message.
 */
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
  SENDRECV = IO | DLPG_XLA_NEEDS_PEER | DLPG_XLA_NEEDS_SOURCE
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
DLPG_XLA_HANDLERS(link, 0)
