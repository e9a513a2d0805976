/* The capability query of the ABI (dlpg_reduce_supported): what a call with such a tensor and
 * reduce op would be told at the door, without a group. The answer comes from the same places
 * an operation's validation asks: the DLPack rules of tensor.c, the registry's device masks
 * and the serving backend's own check (core/lines/backend.h), so no table is copied here and the
 * query cannot drift from what a call does. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "core/lines/backend.h"
#include "core/group/op.h"
#include "core/lines/tensor.h"

dlpg_status_t dlpg_reduce_supported(DLDevice device, DLDataType dtype, dlpg_reduce_op_t op) {
  const char *fn = "dlpg_reduce_supported";
  /* A tensor of no elements on that device with that dtype: tensor.c's rules (device served
   * at all, device id, lanes, dtype code and bits) give the status and message a call gets. */
  int64_t shape[1] = {0};
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.device = device;
  t.dtype = dtype;
  t.ndim = 1;
  t.shape = shape;
  dlpg__op_t o;
  memset(&o, 0, sizeof o);
  o.kind = DLPG__OP_ALLREDUCE;
  o.ntensors = 1;
  o.rop = op;
  DLPG_CHECK(dlpg__tensor_from_dl(fn, "tensor", -1, &t, &o.in[0]));
  o.out[0] = o.in[0];
  o.backend = o.in[0].backend;
  if ((int)op < (int)DLPG_SUM || (int)op > (int)DLPG_PREMUL_SUM)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: op is %d, not a dlpg_reduce_op_t (DLPG_SUM..DLPG_PREMUL_SUM = 0..8)",
                       fn, (int)op);
  o.struct_size = sizeof(dlpg__be_op_t);
  o.scalar = 1.0; /* premul_sum's answer does not depend on its factor */
  /* The backend's check names the dtype and the op; the prefix adds the device, so the
   * message names all three whichever backend answers. */
  char dev[48], what[160];
  if (device.device_type == kDLCPU)
    snprintf(dev, sizeof dev, "cpu");
  else
    snprintf(dev, sizeof dev, "%s:%d", dlpg__device_name(device.device_type), device.device_id);
  snprintf(what, sizeof what, "%s(%s, %s, %s)", fn, dev, dlpg__dtype_name(o.in[0].dtype),
           dlpg__reduce_op_name(op));
  /* A module that cannot load makes the device unsupported, saying what failed and why. */
  const dlpg__backend_vtbl_t *be;
  DLPG_CHECK(dlpg__backend_get(what, o.backend, &be));
  return be->check(what, &o.be);
}
