/* Whether the CUDA devices of an operation exist here, judged at validation, before any
 * communicator is made: a host without a usable driver (or without that device) is told as
 * such, naming the tensor and its device, rather than through the first CUDA call that
 * happens to fail later. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nccl/nccl_internal.h"

/* cudaGetDeviceCount's answer, asked once: the driver does not come or go while a process
 * runs. */
static pthread_once_t dlpg__devices_once = PTHREAD_ONCE_INIT;
static cudaError_t dlpg__devices_err;
static int dlpg__devices_n;

static void dlpg__devices_load(void) {
  dlpg__devices_err = cudaGetDeviceCount(&dlpg__devices_n);
  if (dlpg__devices_err != cudaSuccess) dlpg__devices_n = 0;
}

/* How messages name an operation's tensor i, by the kinds table's args column: the
 * "LIST" kinds name inputs[i], "PAIR" input, "TENSOR" tensor. */
static const char *const dlpg__args_style[DLPG__OP_COUNT] = {
#define DLPG__ARGS_STYLE_(NAME, name, reduces, outputs, root, p2p, args, shape) \
  [DLPG__OP_##NAME] = #args,
    DLPG__OP_KIND_MAP(DLPG__ARGS_STYLE_)
#undef DLPG__ARGS_STYLE_
};

static void dlpg__arg_name(const dlpg__be_op_t *op, int i, char *buf, size_t cap) {
  const char *style = (int)op->kind >= 0 && op->kind < DLPG__OP_COUNT
                          ? dlpg__args_style[op->kind] : "LIST";
  if (strcmp(style, "TENSOR") == 0) snprintf(buf, cap, "tensor");
  else if (strcmp(style, "PAIR") == 0) snprintf(buf, cap, "input");
  else snprintf(buf, cap, "inputs[%d]", i);
}

dlpg_status_t dlpg__nccl_devices_rule(const char *fn, const dlpg__be_op_t *op) {
  pthread_once(&dlpg__devices_once, dlpg__devices_load);
  for (int i = 0; i < op->ntensors; i++) {
    int dev = op->in[i].device_id;
    if (dlpg__devices_err == cudaSuccess && dev < dlpg__devices_n) continue;
    char arg[32];
    dlpg__arg_name(op, i, arg, sizeof arg);
    if (dlpg__devices_err == cudaErrorInsufficientDriver || dlpg__devices_err == cudaErrorNoDevice ||
        (dlpg__devices_err == cudaSuccess && dlpg__devices_n == 0))
      return dlpg__error(DLPG_ERR_SYSTEM, "%s: %s is on cuda:%d but this host has no usable CUDA "
                         "driver or GPU (cudaGetDeviceCount: %s)", fn, arg, dev,
                         dlpg__devices_err == cudaSuccess ? "0 devices"
                                                          : cudaGetErrorString(dlpg__devices_err));
    if (dlpg__devices_err != cudaSuccess)
      return dlpg__error(DLPG_ERR_SYSTEM, "%s: %s is on cuda:%d but CUDA cannot count this host's "
                         "devices (cudaGetDeviceCount: %s (%s))", fn, arg, dev,
                         cudaGetErrorString(dlpg__devices_err),
                         cudaGetErrorName(dlpg__devices_err));
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: %s is on cuda:%d but this process sees %d CUDA "
                       "device%s (cuda:0 to cuda:%d; CUDA_VISIBLE_DEVICES may hide others)", fn,
                       arg, dev, dlpg__devices_n, dlpg__devices_n == 1 ? "" : "s",
                       dlpg__devices_n - 1);
  }
  return DLPG_OK;
}
