/*
 * frame.c -- reading an XLA FFI call frame: the metadata query, attributes, buffers as
 * DLTensors, the stream and device, and XLA errors that carry dlpg's messages.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "xla_ffi.h"

/* DLPack type codes of dlpack.h; bool and float8 codes are DLPack 1.1's (dlpg.h). */
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_COMPLEX = 5 };

static const char *platform_name(dlpg_xla_platform_t p) { return p == DLPG_XLA_CUDA ? "cuda" : "cpu"; }

XLA_FFI_Error *dlpg_xla__error(const XLA_FFI_Api *xla, XLA_FFI_Error_Code code,
                               const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = msg; /* XLA copies the message into its status */
  args.errc = code;
  return xla->XLA_FFI_Error_Create(&args);
}

static XLA_FFI_Error_Code code_of(dlpg_status_t st) {
  switch (st) {
    case DLPG_ERR_INVALID_ARGUMENT: return XLA_FFI_Error_Code_INVALID_ARGUMENT;
    case DLPG_ERR_UNSUPPORTED: return XLA_FFI_Error_Code_UNIMPLEMENTED;
    case DLPG_ERR_TIMEOUT: return XLA_FFI_Error_Code_DEADLINE_EXCEEDED;
    case DLPG_ERR_REMOTE: return XLA_FFI_Error_Code_UNAVAILABLE;
    case DLPG_ERR_ABORTED: return XLA_FFI_Error_Code_ABORTED;
    default: return XLA_FFI_Error_Code_INTERNAL;
  }
}

XLA_FFI_Error *dlpg_xla__check(const dlpg_xla_call_t *c, dlpg_status_t st) {
  if (st == DLPG_OK) return NULL;
  /* dlpg_last_error is per thread: read it right after the failed call, on this thread. */
  const char *msg = c->dl->last_error();
  return dlpg_xla__error(c->xla, code_of(st), "dlpg.jax.%s (%s): %s: %s", c->op,
                         platform_name(c->platform), c->dl->status_name(st),
                         msg && msg[0] ? msg : "(no message)");
}

/* XLA asks each handler at registration which FFI version it was built for and which
 * traits it has, through a call whose frame carries the metadata extension. Headers differ
 * in how the frame's extension is typed: where its header has a `type` member (CMake and
 * build.sh probe it) that is checked; elsewhere the query is recognised as the one call
 * made without an execution context. */
static int answer_metadata(XLA_FFI_CallFrame *f) {
  if (f->extension_start == NULL) return 0;
  XLA_FFI_Metadata_Extension *m = (XLA_FFI_Metadata_Extension *)(void *)f->extension_start;
#ifdef DLPG_XLA_EXTENSION_HAS_TYPE
  if (m->extension_base.type != XLA_FFI_Extension_Metadata) return 0;
#else
  if (f->ctx != NULL) return 0;
#endif
  if (m->metadata != NULL) {
    m->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    m->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    m->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    /* Not command-buffer compatible: the first call of a group connects through the store,
     * which must not be captured into a CUDA graph. */
    m->metadata->traits = 0;
  }
  return 1;
}

static int scalar_as_int(const XLA_FFI_Scalar *s, int64_t *v) {
  switch (s->dtype) {
    case XLA_FFI_DataType_S8: *v = *(const int8_t *)s->value; return 1;
    case XLA_FFI_DataType_S16: *v = *(const int16_t *)s->value; return 1;
    case XLA_FFI_DataType_S32: *v = *(const int32_t *)s->value; return 1;
    case XLA_FFI_DataType_S64: *v = *(const int64_t *)s->value; return 1;
    case XLA_FFI_DataType_U8: *v = *(const uint8_t *)s->value; return 1;
    case XLA_FFI_DataType_U16: *v = *(const uint16_t *)s->value; return 1;
    case XLA_FFI_DataType_U32: *v = *(const uint32_t *)s->value; return 1;
    case XLA_FFI_DataType_U64: *v = (int64_t)*(const uint64_t *)s->value; return 1;
    default: return 0;
  }
}

/* Integer attribute name: 1 found, 0 absent, -1 present but not an integer scalar. */
static int attr_int(const XLA_FFI_CallFrame *f, const char *name, int64_t *v) {
  size_t n = strlen(name);
  for (int64_t i = 0; i < f->attrs.size; i++) {
    const XLA_FFI_ByteSpan *s = f->attrs.names[i];
    if (s->len != n || memcmp(s->ptr, name, n) != 0) continue;
    if (f->attrs.types[i] != XLA_FFI_AttrType_SCALAR) return -1;
    return scalar_as_int((const XLA_FFI_Scalar *)f->attrs.attrs[i], v) ? 1 : -1;
  }
  return 0;
}

/* int64 array attribute name of exactly n entries: 1 found, 0 absent, -1 another type or
 * length (*len receives its length, -1 where it is not an int64 array). */
static int attr_i64_array(const XLA_FFI_CallFrame *f, const char *name, int64_t n,
                          const int64_t **v, int64_t *len) {
  size_t k = strlen(name);
  *len = -1;
  for (int64_t i = 0; i < f->attrs.size; i++) {
    const XLA_FFI_ByteSpan *s = f->attrs.names[i];
    if (s->len != k || memcmp(s->ptr, name, k) != 0) continue;
    if (f->attrs.types[i] != XLA_FFI_AttrType_ARRAY) return -1;
    const XLA_FFI_Array *a = (const XLA_FFI_Array *)f->attrs.attrs[i];
    if (a->dtype != XLA_FFI_DataType_S64) return -1;
    *len = (int64_t)a->size;
    if (*len != n) return -1;
    *v = (const int64_t *)a->data;
    return 1;
  }
  return 0;
}

static int dl_dtype(XLA_FFI_DataType t, DLDataType *d) {
  d->lanes = 1;
  switch (t) {
    case XLA_FFI_DataType_PRED: d->code = DLPG_DL_BOOL; d->bits = 8; return 1;
    case XLA_FFI_DataType_S8: d->code = DL_INT; d->bits = 8; return 1;
    case XLA_FFI_DataType_S16: d->code = DL_INT; d->bits = 16; return 1;
    case XLA_FFI_DataType_S32: d->code = DL_INT; d->bits = 32; return 1;
    case XLA_FFI_DataType_S64: d->code = DL_INT; d->bits = 64; return 1;
    case XLA_FFI_DataType_U8: d->code = DL_UINT; d->bits = 8; return 1;
    case XLA_FFI_DataType_U16: d->code = DL_UINT; d->bits = 16; return 1;
    case XLA_FFI_DataType_U32: d->code = DL_UINT; d->bits = 32; return 1;
    case XLA_FFI_DataType_U64: d->code = DL_UINT; d->bits = 64; return 1;
    case XLA_FFI_DataType_F16: d->code = DL_FLOAT; d->bits = 16; return 1;
    case XLA_FFI_DataType_F32: d->code = DL_FLOAT; d->bits = 32; return 1;
    case XLA_FFI_DataType_F64: d->code = DL_FLOAT; d->bits = 64; return 1;
    case XLA_FFI_DataType_BF16: d->code = DL_BFLOAT; d->bits = 16; return 1;
    case XLA_FFI_DataType_C64: d->code = DL_COMPLEX; d->bits = 64; return 1;
    case XLA_FFI_DataType_C128: d->code = DL_COMPLEX; d->bits = 128; return 1;
    case XLA_FFI_DataType_F8E4M3FN: d->code = DLPG_DL_FLOAT8_E4M3FN; d->bits = 8; return 1;
    case XLA_FFI_DataType_F8E5M2: d->code = DLPG_DL_FLOAT8_E5M2; d->bits = 8; return 1;
    default: return 0;
  }
}

/* The first non-token argument / result buffer. The last argument and result of every call
 * is its ordering link (python_shim/dlpg/_jax_prims.py): a token with dlpg.jax.init(ordered=
 * True), an int32 scalar nobody reads with ordered=False; it follows the data, so the first
 * buffer is the data (recv has no input, send no output: their link is never asked for). */
static XLA_FFI_Buffer *first_arg(const XLA_FFI_CallFrame *f) {
  for (int64_t i = 0; i < f->args.size; i++) {
    XLA_FFI_Buffer *b = (XLA_FFI_Buffer *)f->args.args[i];
    if (f->args.types[i] == XLA_FFI_ArgType_BUFFER && b->dtype != XLA_FFI_DataType_TOKEN) return b;
  }
  return NULL;
}

static XLA_FFI_Buffer *first_ret(const XLA_FFI_CallFrame *f) {
  for (int64_t i = 0; i < f->rets.size; i++) {
    XLA_FFI_Buffer *b = (XLA_FFI_Buffer *)f->rets.rets[i];
    if (f->rets.types[i] == XLA_FFI_RetType_BUFFER && b->dtype != XLA_FFI_DataType_TOKEN) return b;
  }
  return NULL;
}

static XLA_FFI_Error *to_tensor(const dlpg_xla_call_t *c, const XLA_FFI_Buffer *b,
                                const char *what, int device, DLTensor *t) {
  memset(t, 0, sizeof *t);
  if (b == NULL)
    return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                           "dlpg.jax.%s (%s): the call has no %s array", c->op,
                           platform_name(c->platform), what);
  if (!dl_dtype(b->dtype, &t->dtype))
    return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                           "dlpg.jax.%s (%s): the %s has XLA element type %d, which dlpg does "
                           "not carry (exotic float types are not supported)",
                           c->op, platform_name(c->platform), what, (int)b->dtype);
  t->data = b->data;
  t->ndim = (int32_t)b->rank;
  t->shape = b->dims;
  t->strides = NULL; /* XLA hands custom calls row-major buffers (the lowering asks so) */
  t->byte_offset = 0;
  t->device.device_type = c->platform == DLPG_XLA_CUDA ? kDLCUDA : kDLCPU;
  t->device.device_id = device;
  return NULL;
}

static XLA_FFI_Error *cuda_context(XLA_FFI_CallFrame *f, dlpg_xla_call_t *c, int *device) {
  XLA_FFI_Stream_Get_Args sa;
  memset(&sa, 0, sizeof sa);
  sa.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
  sa.ctx = f->ctx;
  XLA_FFI_Error *e = f->api->XLA_FFI_Stream_Get(&sa);
  if (e != NULL) return e;
  c->stream = sa.stream;
  *device = 0;
#ifdef DLPG_XLA_HAVE_DEVICE_ORDINAL
  if (f->api->struct_size >= XLA_FFI_Api_STRUCT_SIZE && f->api->XLA_FFI_DeviceOrdinal_Get) {
    XLA_FFI_DeviceOrdinal_Get_Args da;
    memset(&da, 0, sizeof da);
    da.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
    da.ctx = f->ctx;
    e = f->api->XLA_FFI_DeviceOrdinal_Get(&da);
    if (e != NULL) return e;
    *device = da.device_ordinal;
  }
#endif
  return NULL;
}

static XLA_FFI_Error *need_attr(XLA_FFI_CallFrame *f, const dlpg_xla_call_t *c,
                                const char *name, int64_t *v) {
  int r = attr_int(f, name, v);
  if (r == 1) return NULL;
  return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                         "dlpg.jax.%s (%s): attribute \"%s\" is %s", c->op,
                         platform_name(c->platform), name,
                         r == 0 ? "missing" : "not an integer scalar");
}

static XLA_FFI_Error *need_counts(XLA_FFI_CallFrame *f, dlpg_xla_call_t *c) {
  static const char *const names[DLPG_XLA_NCOUNTS] = {"send_counts", "send_displs",
                                                       "recv_counts", "recv_displs"};
  for (int i = 0; i < DLPG_XLA_NCOUNTS; i++) {
    int64_t len;
    int r = attr_i64_array(f, names[i], c->size, &c->counts[i], &len);
    if (r == 1) continue;
    if (r == 0 || len < 0)
      return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                             "dlpg.jax.%s (%s): attribute \"%s\" is %s", c->op,
                             platform_name(c->platform), names[i],
                             r == 0 ? "missing" : "not an int64 array");
    return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                           "dlpg.jax.%s (%s): attribute \"%s\" has %lld entries but the "
                           "group has %d ranks", c->op, platform_name(c->platform), names[i],
                           (long long)len, c->size);
  }
  return NULL;
}

static XLA_FFI_Error *decode(XLA_FFI_CallFrame *f, dlpg_xla_call_t *c, unsigned needs) {
  XLA_FFI_Error *e;
  int64_t gid = 0;
  if ((e = need_attr(f, c, "group", &gid)) != NULL) return e;
  if ((c->dl = dlpg_xla__api()) == NULL)
    return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                           "dlpg.jax.%s (%s): libdlpg_xla is not bound to a libdlpg "
                           "(dlpg.jax.init was not called in this process)", c->op,
                           platform_name(c->platform));
  if ((c->group = dlpg_xla__group(gid)) == NULL)
    return dlpg_xla__error(c->xla, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                           "dlpg.jax.%s (%s): group id %lld is not registered (the group was "
                           "finalized, or this computation was compiled in another process)",
                           c->op, platform_name(c->platform), (long long)gid);
  dlpg_status_t st = c->dl->group_rank(c->group, &c->rank);
  if (st == DLPG_OK) st = c->dl->group_size(c->group, &c->size);
  if (st != DLPG_OK) return dlpg_xla__check(c, st);
  if ((needs & DLPG_XLA_NEEDS_COUNTS) && (e = need_counts(f, c)) != NULL) return e;
  if ((needs & DLPG_XLA_NEEDS_OP) && (e = need_attr(f, c, "op", &c->reduce_op)) != NULL) return e;
  if ((needs & DLPG_XLA_NEEDS_ROOT) && (e = need_attr(f, c, "root", &c->root)) != NULL) return e;
  if ((needs & DLPG_XLA_NEEDS_PEER) && ((e = need_attr(f, c, "peer", &c->peer)) != NULL ||
                                        (e = need_attr(f, c, "tag", &c->tag)) != NULL))
    return e;
  if ((needs & DLPG_XLA_NEEDS_SOURCE) && (e = need_attr(f, c, "source", &c->source)) != NULL)
    return e;
  int device = 0;
  if (c->platform == DLPG_XLA_CUDA && (e = cuda_context(f, c, &device)) != NULL) return e;
  if ((needs & DLPG_XLA_NEEDS_INPUT) &&
      (e = to_tensor(c, first_arg(f), "input", device, &c->input)) != NULL)
    return e;
  if ((needs & DLPG_XLA_NEEDS_OUTPUT) &&
      (e = to_tensor(c, first_ret(f), "output", device, &c->output)) != NULL)
    return e;
  return NULL;
}

XLA_FFI_Error *dlpg_xla__handle(XLA_FFI_CallFrame *f, const char *op,
                                dlpg_xla_platform_t platform, unsigned needs,
                                dlpg_xla_run_fn run) {
  if (answer_metadata(f)) return NULL;
  dlpg_xla_call_t c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.platform = platform;
  c.xla = f->api;
  XLA_FFI_Error *e = decode(f, &c, needs);
  return e != NULL ? e : run(&c);
}
