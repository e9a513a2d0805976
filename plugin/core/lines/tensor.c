/* DLPack rules in one place (dlpg.h, "Tensors"): a DLTensor checked and normalised into a
 * dlpg__tensor_t, with the contiguity rule and byte_offset. The dtype table and the device
 * names are names.c's; which backend serves a device is the registry's (core/lines/backend.h);
 * what it can reduce is its own check. */
#include "core/lines/tensor.h"

#include <stdio.h>
#include <string.h>

#include "core/lines/backend.h"
#include "base/status.h"

/* ------------------------------------------------------------------ tensors */

/* Where user space ends, portably: no tensor's bytes lie at or above it. 64-bit Linux puts
 * user space below 2^47 (x86-64, 4-level paging), 2^48 (aarch64, 48-bit VA), 2^52 (aarch64,
 * 52-bit VA) or 2^56 (x86-64 with 5-level paging, for a process that asks): 2^56 admits all
 * of them, device pointers of unified addressing included (they are user addresses), and
 * refuses offsets such as 2^62. A 32-bit process is bounded by the overflow check. */
#if UINTPTR_MAX > 0xffffffffu
#define DLPG__USER_SPACE_END (1ull << 56)
#else
#define DLPG__USER_SPACE_END ((unsigned long long)UINTPTR_MAX + 1ull)
#endif

/* "(4, 4)" into buf; long lists are cut with "...". */
static void dlpg__fmt_dims(char *buf, size_t cap, const int64_t *v, int n) {
  size_t len = 0;
  len += (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < n && len < cap; i++) {
    if (i == 8 && n > 9) {
      len += (size_t)snprintf(buf + len, cap - len, "...");
      break;
    }
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)v[i]);
  }
  if (len < cap) snprintf(buf + len, cap - len, ")");
}

/* "inputs[2]" or "tensor": an argument's name in messages. */
static const char *dlpg__tensor_arg_name(char *buf, size_t cap, const char *arg, int index) {
  if (index >= 0)
    snprintf(buf, cap, "%s[%d]", arg ? arg : "tensors", index);
  else
    snprintf(buf, cap, "%s", arg ? arg : "tensor");
  return buf;
}

dlpg_status_t dlpg__tensor_from_dl(const char *fn, const char *arg, int index, const DLTensor *t,
                                   dlpg__tensor_t *out) {
  char namebuf[64];
  /* The argument's name, formatted only for a message (this runs on every operation). */
#define ARG_NAME dlpg__tensor_arg_name(namebuf, sizeof namebuf, arg, index)
  if (!fn) fn = "dlpg";

  if (!t) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, ARG_NAME);

  int dt = (int)t->device.device_type;
  int backend = dlpg__backend_for_device(dt);
  if (backend < 0) {
    char served[256];
    dlpg__backend_devices(served, sizeof served);
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: %s is on device type %d (%s); dlpg serves %s",
                       fn, ARG_NAME, dt, dlpg__device_name(dt), served);
  }
  if (t->device.device_id < 0)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s has device id %d (must be >= 0)", fn,
                       ARG_NAME, t->device.device_id);

  if (t->dtype.lanes != 1)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: %s has %u lanes; dlpg supports only lanes == 1", fn, ARG_NAME,
                       (unsigned)t->dtype.lanes);
  dlpg__dtype_t dtype;
  if (!dlpg__dtype_from_dl(t->dtype.code, t->dtype.bits, &dtype)) {
    /* A complex tensor is named as the frameworks name it; other codes by their number. */
    char what[64];
    if (t->dtype.code == kDLComplex)
      snprintf(what, sizeof what, "is complex%u", (unsigned)t->dtype.bits);
    else
      snprintf(what, sizeof what, "has dtype code %u with %u bits", (unsigned)t->dtype.code,
               (unsigned)t->dtype.bits);
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: %s %s, which dlpg does not support (supported: int/uint 8-64, "
                       "float16/32/64, bfloat16, bool, float8 e4m3fn/e5m2, complex64/128)",
                       fn, ARG_NAME, what);
  }

  if (t->ndim < 0)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s has ndim %d (must be >= 0)", fn, ARG_NAME,
                       t->ndim);
  if (t->ndim > 0 && !t->shape)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s has ndim %d but shape is NULL", fn,
                       ARG_NAME, t->ndim);

  int64_t numel = 1;
  int overflow = 0;
  for (int i = 0; i < t->ndim; i++) {
    int64_t d = t->shape[i];
    if (d < 0)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s has shape[%d] = %lld (must be >= 0)",
                         fn, ARG_NAME, i, (long long)d);
    if (d == 0) numel = 0;
    else if (numel != 0 && numel > INT64_MAX / d) overflow = 1;
    else numel *= d;
  }
  if (overflow && numel != 0)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s has a shape whose element count "
                       "overflows 64 bits", fn, ARG_NAME);

  size_t esize = dlpg__dtype_size(dtype);
  if ((uint64_t)numel > (uint64_t)(SIZE_MAX / esize) ||
      (uint64_t)numel > (uint64_t)INT64_MAX / esize)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: %s has %lld elements of %zu bytes, too many to address", fn, ARG_NAME,
                       (long long)numel, esize);

  /* Contiguity: strides must equal the compact row-major ones, except on size-1 dims (and
   * a tensor with no elements, whose strides address nothing). */
  if (t->strides && t->ndim > 0 && numel > 0) {
    int64_t expect[64];
    int64_t *exp = expect;
    if (t->ndim > 64) {
      /* More dims than any framework produces; check without keeping the list. */
      int64_t s = 1;
      for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s)
          return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                             "%s: %s has stride[%d] = %lld but compact row-major needs %lld",
                             fn, ARG_NAME, i, (long long)t->strides[i], (long long)s);
        s *= t->shape[i];
      }
    } else {
      int64_t s = 1;
      int bad = 0;
      for (int i = t->ndim - 1; i >= 0; i--) {
        exp[i] = s;
        if (t->shape[i] != 1 && t->strides[i] != s) bad = 1;
        s *= t->shape[i];
      }
      if (bad) {
        char sb[256], shb[256], eb[256];
        dlpg__fmt_dims(sb, sizeof sb, t->strides, t->ndim);
        dlpg__fmt_dims(shb, sizeof shb, t->shape, t->ndim);
        dlpg__fmt_dims(eb, sizeof eb, exp, t->ndim);
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: %s has strides %s but shape %s needs compact row-major "
                           "strides %s (dlpg supports contiguous tensors only)",
                           fn, ARG_NAME, sb, shb, eb);
      }
    }
  }

  /* Found by fuzz/fuzz_dlpack (a wrap) and by a probe (data valid, byte_offset 2^62: both
   * ranks crashed): the bytes data + byte_offset .. + nbytes must lie below the end of user
   * space, checked before anything touches them (arithmetic only, no probe of the
   * mappings). An address inside user space that is not mapped stays the caller's bug
   * (dlpg.h). */
  size_t nbytes = (size_t)numel * esize;
  if (t->data) {
    uint64_t base = (uint64_t)(uintptr_t)t->data, end = 0;
    if (__builtin_add_overflow(base, (uint64_t)t->byte_offset, &end) ||
        __builtin_add_overflow(end, (uint64_t)nbytes, &end) || end > DLPG__USER_SPACE_END)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "%s: %s has data %p and byte_offset %llu: its %zu bytes would end "
                         "past the end of user address space (0x%llx)",
                         fn, ARG_NAME, t->data, (unsigned long long)t->byte_offset, nbytes,
                         (unsigned long long)DLPG__USER_SPACE_END);
  }
  if (!t->data && numel > 0)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s has %lld elements but data is NULL",
                       fn, ARG_NAME, (long long)numel);

  if (out) {
    memset(out, 0, sizeof *out);
    out->ptr = t->data ? (void *)((char *)t->data + t->byte_offset) : NULL;
    out->numel = numel;
    out->nbytes = nbytes;
    out->dtype = dtype;
    out->backend = backend;
    out->device_type = dt;
    out->device_id = t->device.device_id;
  }
  return DLPG_OK;
#undef ARG_NAME
}
