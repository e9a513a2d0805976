/* The NCCL path's support rule, read from the table of rules.h: the backend's check
 * (backend.c) applies it at the call, with the NCCL version the module runs on and the
 * device's compute capability. */
#include "nccl/rules.h"

#include "base/status.h"
#include "nccl/host.h"

/* An entry's support; its NCCL name is types.c's. */
#define DLPG__RULE_YES(nccl) DLPG__NCCL_YES
#define DLPG__RULE_FP8(nccl) DLPG__NCCL_FP8
#define DLPG__RULE_FLOAT(nccl) DLPG__NCCL_FLOAT
#define DLPG__RULE_CPLX(nccl) DLPG__NCCL_CPLX
#define DLPG__RULE_NONE DLPG__NCCL_NONE

static const unsigned char dlpg__nccl_dtype_support[DLPG__DT_COUNT] = {
#define DLPG__RULE_DTYPE(dt, entry) [DLPG__DT_##dt] = DLPG__RULE_##entry,
    DLPG__NCCL_DTYPE_MAP(DLPG__RULE_DTYPE)
#undef DLPG__RULE_DTYPE
};

static const unsigned char dlpg__nccl_op_support[DLPG_PREMUL_SUM + 1] = {
#define DLPG__RULE_OP(op, entry, bool_entry) [DLPG_##op] = DLPG__RULE_##entry,
    DLPG__NCCL_REDOP_MAP(DLPG__RULE_OP)
#undef DLPG__RULE_OP
};

/* Every dtype and reduce op has its entry, an unsupported one included. */
#define DLPG__RULE_COUNT1(...) +1
_Static_assert(0 DLPG__NCCL_DTYPE_MAP(DLPG__RULE_COUNT1) == DLPG__DT_COUNT,
               "DLPG__NCCL_DTYPE_MAP: one entry per dtype");
_Static_assert(0 DLPG__NCCL_REDOP_MAP(DLPG__RULE_COUNT1) == DLPG_PREMUL_SUM + 1,
               "DLPG__NCCL_REDOP_MAP: one entry per reduce op");
#undef DLPG__RULE_COUNT1

int dlpg__nccl_is_fp8(dlpg__dtype_t dt) {
  return (int)dt >= 0 && dt < DLPG__DT_COUNT && dlpg__nccl_dtype_support[dt] == DLPG__NCCL_FP8;
}

dlpg_status_t dlpg__nccl_reduce_rule(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op,
                                     int nccl_version, int dev, int cc_major) {
  /* A dtype or op appended to the ABI after this module was built is a value past its
   * tables: refuse it before indexing them (backend_abi.h, dlpg__dtype_t). */
  if ((unsigned)dt >= DLPG__DT_COUNT)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: dtype value %d is unknown to this NCCL module (built before it was "
                       "added); rebuild libdlpg_nccl.so with the library", fn, (int)dt);
  if ((unsigned)op > (unsigned)DLPG_PREMUL_SUM)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %d is unknown to this NCCL module (built before it was "
                       "added); rebuild libdlpg_nccl.so with the library", fn, (int)op);
  const char *opn = dlpg__reduce_op_name(op), *dtn = dlpg__dtype_name(dt);
  int ops = dlpg__nccl_op_support[op], dts = dlpg__nccl_dtype_support[dt];
  if (dts == DLPG__NCCL_CPLX) {
    if (op == DLPG_SUM || op == DLPG_AVG || op == DLPG_PREMUL_SUM) return DLPG_OK;
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s is not defined on complex tensors (%s); complex "
                       "dtypes reduce with sum, avg and premul_sum (NCCL)", fn, opn, dtn);
  }
  if (ops == DLPG__NCCL_NONE)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s on %s: bitwise reductions are not supported by NCCL; "
                       "use CPU tensors (Gloo)", fn, opn, dtn);
  if (dts == DLPG__NCCL_NONE)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: NCCL cannot reduce %s tensors (reduce op %s); use CPU tensors "
                       "(Gloo) or a wider dtype", fn, dtn, opn);
  if (ops == DLPG__NCCL_FLOAT && !dlpg__dtype_is_float(dt))
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s needs a floating or complex dtype, got %s (NCCL)", fn,
                       opn, dtn);
  if (dts == DLPG__NCCL_FP8 && nccl_version < DLPG__NCCL_FP8_VERSION)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: NCCL %d.%d.%d cannot reduce %s tensors (fp8 reductions need NCCL "
                       "2.24 or newer); use a wider dtype", fn, nccl_version / 10000,
                       nccl_version / 100 % 100, nccl_version % 100, dtn);
  if (dts == DLPG__NCCL_FP8 && cc_major < 9)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: NCCL reduces %s only on sm_90 or newer; cuda:%d is sm_%d", fn, dtn,
                       dev, cc_major * 10);
  return DLPG_OK;
}

dlpg_status_t dlpg__nccl_p2p_rule(const char *fn, dlpg__op_kind_t kind, int peer) {
  if (kind == DLPG__OP_RECV && peer == DLPG_ANY_SOURCE)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: peer is DLPG_ANY_SOURCE, but NCCL has no any-source receive (ncclRecv "
                       "names its peer); name the sender, or receive into a CPU tensor", fn);
  return DLPG_OK;
}
