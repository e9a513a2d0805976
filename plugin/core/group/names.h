/* The names core and the backends print, and the dtype table behind them (names.c): pure
 * functions of their argument, below everything that prints them. */
#ifndef DLPG_CORE_NAMES_H_
#define DLPG_CORE_NAMES_H_

#include <stddef.h>
#include <stdint.h>
#include "dlpg/dlpg.h"
#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

const char *dlpg__dtype_name(dlpg__dtype_t dt); /* "float32", ... */
size_t dlpg__dtype_size(dlpg__dtype_t dt);
const char *dlpg__device_name(int device_type); /* "cpu", "cuda", ... */
const char *dlpg__reduce_op_name(dlpg_reduce_op_t op); /* "sum", ...; "op(N)" invalid */
/* The dtype of DLPack's (code, bits); 0 when dlpg has none (lanes are checked apart). */
int dlpg__dtype_from_dl(uint8_t code, uint8_t bits, dlpg__dtype_t *out);

#ifdef __cplusplus
}
#endif
#endif
