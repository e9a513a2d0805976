/* DLPack rules in one place (dlpg.h, "Tensors"): a DLTensor is checked and normalised into
 * a dlpg__tensor_t at the door; backends never see a DLTensor. Which dtypes and reduce ops
 * a device can reduce is each backend's rule (its check in core/lines/backend.h), asked during
 * validation, so an unsupported pair fails at the call, never inside NCCL or Gloo. */
#ifndef DLPG_CORE_TENSOR_H_
#define DLPG_CORE_TENSOR_H_

#include <stddef.h>
#include <stdint.h>
#include "dlpg/dlpg.h"
#include "core/group/backend_abi.h"
#include "core/group/names.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The dtype enum and dlpg__tensor_t are part of the backend ABI (core/group/backend_abi.h); their
 * names are names.h's. */

/* Check one DLTensor and normalise it. fn and arg name the caller and argument for the
 * message ("dlpg_allreduce", "inputs", index 1 -> "inputs[1]"; index < 0 -> "tensor"). */
dlpg_status_t dlpg__tensor_from_dl(const char *fn, const char *arg, int index, const DLTensor *t,
                                   dlpg__tensor_t *out);


#ifdef __cplusplus
}
#endif
#endif
