/* libFuzzer target: DLPack validation (dlpg__tensor_from_dl, the door every tensor passes)
 * on arbitrary tensors: ndim, shape, strides, dtype, device and offset all from the input.
 * Shape and strides arrays hold ndim entries (the ABI's precondition); everything else is
 * free. An accepted tensor must be consistent: numel the product of the shape, nbytes
 * numel times the element size, ptr data plus offset (NULL for empty tensors without
 * data), its bytes inside user space. The data pointer is never read. fuzz/dlpack.dict
 * offers the offsets around the end of user space (ci/fuzz.sh passes it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lines/tensor.h"

/* The registry's device lookup (core/lines/backend.c), which validation asks first. The real one
 * reads plugin/registry/backends.c and comes with the module loader; this target links only
 * core/lines/tensor.c, so the same device sets are given here: CPU and pinned host memory to slot 0
 * (gloo), CUDA and managed memory to slot 1 (nccl). Which dtypes and reduce ops a backend
 * supports is its own check (core/lines/backend.h), fuzzed with the backends, not here. */
int dlpg__backend_for_device(int device_type) {
  switch (device_type) {
    case kDLCPU: case kDLCUDAHost: return 0;
    case kDLCUDA: case kDLCUDAManaged: return 1;
    default: return -1;
  }
}

void dlpg__backend_devices(char *buf, size_t cap) {
  snprintf(buf, cap, "cpu, cuda_host (gloo); cuda, cuda_managed (nccl)");
}

static uint64_t dlpg__take(const uint8_t **p, size_t *n, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes && *n; ++i, ++*p, --*n) v |= (uint64_t)**p << (8 * i);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int quiet;
  if (!quiet) {
    setenv("DLPG_DEBUG", "NONE", 1);
    quiet = 1;
  }
  const uint8_t *p = data;
  size_t n = size;
  DLTensor t;
  memset(&t, 0, sizeof t);
  int ndim = (int)(int8_t)dlpg__take(&p, &n, 1);
  int with_strides = (int)dlpg__take(&p, &n, 1) & 1;
  t.ndim = ndim;
  t.dtype.code = (uint8_t)dlpg__take(&p, &n, 1);
  t.dtype.bits = (uint8_t)dlpg__take(&p, &n, 1);
  t.dtype.lanes = (uint16_t)dlpg__take(&p, &n, 2);
  t.device.device_type = (DLDeviceType)(int32_t)dlpg__take(&p, &n, 1);
  t.device.device_id = (int32_t)(int8_t)dlpg__take(&p, &n, 1);
  t.byte_offset = dlpg__take(&p, &n, 8);
  t.data = (dlpg__take(&p, &n, 1) & 1) ? (void *)(uintptr_t)0x100000 : NULL;
  int count = ndim > 0 ? ndim : 0;
  int64_t *shape = (int64_t *)calloc((size_t)count + 1, sizeof *shape);
  int64_t *strides = (int64_t *)calloc((size_t)count + 1, sizeof *strides);
  for (int i = 0; i < count; ++i) {
    /* Mostly small dimensions, sometimes anything (overflow, negatives). */
    uint8_t kind = (uint8_t)dlpg__take(&p, &n, 1);
    shape[i] = kind & 0x80 ? (int64_t)dlpg__take(&p, &n, 8) : (int64_t)(kind & 0x0f);
    strides[i] = (int64_t)(int16_t)dlpg__take(&p, &n, 2);
  }
  t.shape = count || (ndim == 0) ? shape : NULL;
  t.strides = with_strides ? strides : NULL;
  dlpg__tensor_t out;
  if (dlpg__tensor_from_dl("fuzz", "tensor", -1, &t, &out) == DLPG_OK) {
    int64_t numel = 1;
    for (int i = 0; i < ndim; ++i)
      if (shape[i] == 0) numel = 0;
    for (int i = 0; i < ndim && numel; ++i)
      if (__builtin_mul_overflow(numel, shape[i], &numel)) abort(); /* accepted: must fit */
    if (out.numel != numel) abort();
    if (out.nbytes != (size_t)out.numel * dlpg__dtype_size(out.dtype)) abort();
    if ((uintptr_t)out.ptr != (t.data ? (uintptr_t)t.data + t.byte_offset : 0)) abort();
    /* Accepted bytes lie inside user space (below 2^56, tensor.c), without wrapping. */
    uint64_t end = 0;
    if (t.data && (__builtin_add_overflow((uint64_t)(uintptr_t)out.ptr, (uint64_t)out.nbytes, &end) ||
                   end > (1ull << 56)))
      abort();
    if (out.backend != dlpg__backend_for_device(t.device.device_type)) abort();
  }
  free(shape);
  free(strides);
  return 0;
}
