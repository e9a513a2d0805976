/* Validation at the door (ARCHITECTURE.md: "validate at the door, then dispatch"): every
 * rule of dlpg.h "Operations" and "Tensors" that one rank can check alone is checked here,
 * so backends receive only well-formed dlpg__op_t records. */
#include <stdio.h>
#include <string.h>

#include "core/backend.h"
#include "core/ops_impl.h"
#include "core/tensor.h"
#include "base/status.h"

/* "cpu", "cuda:1", "cuda_managed:0" into buf. */
static const char *dlpg__dev_str(const dlpg__tensor_t *t, char *buf, size_t cap) {
  if (t->device_type == kDLCPU)
    snprintf(buf, cap, "cpu");
  else
    snprintf(buf, cap, "%s:%d", dlpg__device_name(t->device_type), t->device_id);
  return buf;
}

/* The argument's name in messages: "inputs[1]", or "tensor"/"input"/"output" for the
 * single-tensor operations. */
static void dlpg__arg_name(const dlpg__op_args_t *a, int is_out, int i, char *buf, size_t cap) {
  if (a->kind == DLPG__OP_SEND || a->kind == DLPG__OP_RECV)
    snprintf(buf, cap, "tensor");
  else if (a->kind == DLPG__OP_ALLTOALL)
    snprintf(buf, cap, "%s", is_out ? "output" : "input");
  else
    snprintf(buf, cap, "%s[%d]", is_out ? "outputs" : "inputs", i);
}

static int dlpg__has_outputs(dlpg__op_kind_t k) {
  return k == DLPG__OP_ALLREDUCE || k == DLPG__OP_BROADCAST || k == DLPG__OP_REDUCE ||
         k == DLPG__OP_ALLGATHER || k == DLPG__OP_REDUCE_SCATTER || k == DLPG__OP_ALLTOALL;
}

static int dlpg__is_reduction(dlpg__op_kind_t k) {
  return k == DLPG__OP_ALLREDUCE || k == DLPG__OP_REDUCE || k == DLPG__OP_REDUCE_SCATTER;
}

/* Checks one tensor against a reference tensor (argument ref_out/ref_i): backend and dtype.
 * Names are formatted only for a message. */
static dlpg_status_t dlpg__check_like(const char *fn, const dlpg__op_args_t *a, int is_out,
                                      int i, const dlpg__tensor_t *t, const dlpg__tensor_t *ref,
                                      int ref_out, int ref_i) {
  if (t->backend == ref->backend && t->dtype == ref->dtype) return DLPG_OK;
  char nm[32], refname[32];
  dlpg__arg_name(a, is_out, i, nm, sizeof nm);
  dlpg__arg_name(a, ref_out, ref_i, refname, sizeof refname);
  if (t->backend != ref->backend) {
    char served[256], d1[48], d2[48];
    dlpg__backend_devices(served, sizeof served);
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: %s is on %s but %s is on %s (one call takes the tensors of one "
                       "backend: %s)", fn, nm, dlpg__dev_str(t, d1, sizeof d1), refname,
                       dlpg__dev_str(ref, d2, sizeof d2), served);
  }
  /* Same backend, other dtype: only the dtypes differ, so only they are named. */
  return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s is %s but %s is %s (the dtypes must match)",
                     fn, nm, dlpg__dtype_name(t->dtype), refname, dlpg__dtype_name(ref->dtype));
}

/* The shape rule of each operation, per local device i. */
static dlpg_status_t dlpg__check_shapes(const char *fn, const dlpg__op_args_t *a,
                                        const dlpg__op_t *op, int i) {
  int64_t in = op->in[i].numel, out = op->out[i].numel, want = 0;
  int64_t factor = (int64_t)a->g->size * op->ntensors;
  switch (a->kind) {
    case DLPG__OP_ALLREDUCE:
    case DLPG__OP_BROADCAST:
    case DLPG__OP_REDUCE:
      if (out != in)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: outputs[%d] has %lld elements but inputs[%d] has %lld (they "
                           "must match)", fn, i, (long long)out, i, (long long)in);
      return DLPG_OK;
    case DLPG__OP_ALLGATHER:
      if (__builtin_mul_overflow(in, factor, &want) || out != want)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: outputs[%d] has %lld elements but needs world_size %d x "
                           "ntensors %d x %lld input elements = %lld", fn, i, (long long)out,
                           a->g->size, op->ntensors, (long long)in, (long long)want);
      return DLPG_OK;
    case DLPG__OP_REDUCE_SCATTER:
      if (__builtin_mul_overflow(out, factor, &want) || in != want)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: inputs[%d] has %lld elements but needs world_size %d x "
                           "ntensors %d x %lld output elements = %lld", fn, i, (long long)in,
                           a->g->size, op->ntensors, (long long)out, (long long)want);
      return DLPG_OK;
    case DLPG__OP_ALLTOALL:
      if (out != in)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: output has %lld elements but input has %lld (they must match)",
                           fn, (long long)out, (long long)in);
      if (in % a->g->size != 0)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: input has %lld elements, not divisible into world_size %d "
                           "equal blocks", fn, (long long)in, a->g->size);
      return DLPG_OK;
    default:
      return DLPG_OK;
  }
}

dlpg_status_t dlpg__op_build(const dlpg__op_args_t *a, dlpg__op_t *op) {
  const char *fn = dlpg__op_name(a->kind);
  struct dlpg_group *g = a->g;
  DLPG_ARG_CHECK(g != NULL, "%s: g is NULL", fn);
  if (atomic_load(&g->aborted)) return dlpg__op_aborted(fn, g);

  memset(op, 0, sizeof *op);
  op->kind = a->kind;
  dlpg__op_set_group(op, g);
  op->rop = a->rop;
  op->root = a->root;
  op->peer = a->peer;
  op->tag = a->tag;
  if (a->kind == DLPG__OP_BARRIER) {
    /* No tensors: runs on the backend serving host memory. */
    const dlpg__backend_vtbl_t *be;
    op->backend = dlpg__backend_for_device(kDLCPU);
    if (op->backend < 0)
      return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: no backend serves cpu", fn);
    return dlpg__backend_get(fn, op->backend, &be);
  }

  int n = a->ntensors;
  DLPG_ARG_CHECK(n >= 1 && n <= DLPG__MAX_LOCAL_DEVICES,
                 "%s: ntensors is %d (must be in [1, %d])", fn, n, DLPG__MAX_LOCAL_DEVICES);
  op->ntensors = n;
  int single = a->kind == DLPG__OP_SEND || a->kind == DLPG__OP_RECV ||
               a->kind == DLPG__OP_ALLTOALL;
  if (a->kind == DLPG__OP_SEND || a->kind == DLPG__OP_RECV)
    DLPG_ARG_CHECK(a->inputs && a->inputs[0], "%s: tensor is NULL", fn);
  else if (a->kind == DLPG__OP_ALLTOALL)
    DLPG_ARG_CHECK(a->inputs && a->inputs[0], "%s: input is NULL", fn);
  else
    DLPG_ARG_CHECK(a->inputs != NULL, "%s: inputs is NULL", fn);

  int need_out = a->kind == DLPG__OP_ALLGATHER || a->kind == DLPG__OP_REDUCE_SCATTER ||
                 a->kind == DLPG__OP_ALLTOALL;
  if (need_out) {
    if (a->kind == DLPG__OP_ALLTOALL)
      DLPG_ARG_CHECK(a->outputs && a->outputs[0], "%s: output is NULL", fn);
    else
      DLPG_ARG_CHECK(a->outputs != NULL,
                     "%s: outputs is NULL (this operation cannot run in place)", fn);
  }
  int has_out = dlpg__has_outputs(a->kind) && a->outputs != NULL;
  op->in_place = dlpg__has_outputs(a->kind) && !has_out;

  /* Names of the single-tensor operations' arguments; the others are inputs[i]/outputs[i]. */
  const char *in_name = a->kind == DLPG__OP_ALLTOALL ? "input" : single ? "tensor" : "inputs";
  const char *out_name = single ? "output" : "outputs";
  for (int i = 0; i < n; i++) {
    DLPG_CHECK(dlpg__tensor_from_dl(fn, in_name, single ? -1 : i, a->inputs[i], &op->in[i]));
    if (i > 0) DLPG_CHECK(dlpg__check_like(fn, a, 0, i, &op->in[i], &op->in[0], 0, 0));
    if (has_out) {
      DLPG_CHECK(dlpg__tensor_from_dl(fn, out_name, single ? -1 : i, a->outputs[i], &op->out[i]));
      DLPG_CHECK(dlpg__check_like(fn, a, 1, i, &op->out[i], &op->in[i], 0, i));
    } else {
      op->out[i] = op->in[i];
    }
  }

  const dlpg__tensor_t *t0 = &op->in[0];
  char d1[48];
  /* The backend serving the device: loaded here at its first use (a module), so a device
   * whose module cannot load fails at the call with what failed and why. */
  const dlpg__backend_vtbl_t *be;
  if (dlpg__backend_get(fn, t0->backend, &be) != DLPG_OK) {
    char why[DLPG__ERROR_MAX];
    snprintf(why, sizeof why, "%s", dlpg__last_error());
    const char *m = strncmp(why, fn, strlen(fn)) == 0 ? why + strlen(fn) + 2 : why;
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: %s is on %s, but %s", fn,
                       single ? (a->kind == DLPG__OP_ALLTOALL ? "input" : "tensor") : "inputs[0]",
                       dlpg__dev_str(t0, d1, sizeof d1), m);
  }
  /* The line serving this kind (a line may leave sends and receives to the next one), and
   * the group's choice for it once made (backend_choice.c; until then the worker makes it
   * at the operation's turn, and the first line's rules, which its alternatives share,
   * answer here). */
  int slot = dlpg__backend_for_kind(t0->backend, a->kind);
  /* Sends and receives: decided per pair by the line's backend, or forced for all. */
  int p2p = a->kind == DLPG__OP_SEND || a->kind == DLPG__OP_RECV;
  if (p2p) slot = dlpg__backend_p2p_line(slot);
  int serving = p2p ? slot : dlpg__backend_chosen(g, slot);
  if (serving != t0->backend) DLPG_CHECK(dlpg__backend_get(fn, serving, &be));
  if (n > be->max_tensors) {
    char most[32];
    if (be->max_tensors == 1) snprintf(most, sizeof most, "exactly one tensor");
    else snprintf(most, sizeof most, "at most %d tensors", be->max_tensors);
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: ntensors is %d but inputs[0] is on %s; %s operations take %s per "
                       "call", fn, n, dlpg__dev_str(t0, d1, sizeof d1),
                       t0->device_type == kDLCPU ? "CPU" : dlpg__device_name(t0->device_type),
                       most);
  }
  for (int i = 0; i < n; i++) {
    char d2[48];
    if (has_out && op->out[i].device_id != op->in[i].device_id)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "%s: outputs[%d] is on %s but inputs[%d] is on %s (each output must "
                         "be on its input's device)", fn, i,
                         dlpg__dev_str(&op->out[i], d1, sizeof d1), i,
                         dlpg__dev_str(&op->in[i], d2, sizeof d2));
    for (int j = 0; j < i; j++)
      if (op->in[j].device_id == op->in[i].device_id)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: inputs[%d] and inputs[%d] are both on %s (two tensors on one "
                           "device in one call)", fn, j, i,
                           dlpg__dev_str(&op->in[i], d1, sizeof d1));
  }
  op->backend = slot;

  for (int i = 0; i < n; i++) {
    if (i > 0 && op->in[i].numel != op->in[0].numel)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "%s: inputs[%d] has %lld elements but inputs[0] has %lld (tensors of "
                         "one call must match)", fn, i, (long long)op->in[i].numel,
                         (long long)op->in[0].numel);
    if (has_out) DLPG_CHECK(dlpg__check_shapes(fn, a, op, i));
  }

  if (a->kind == DLPG__OP_BROADCAST || a->kind == DLPG__OP_REDUCE)
    DLPG_ARG_CHECK(a->root >= 0 && a->root < g->size,
                   "%s: root is %d but world_size is %d (root must be in [0, %d))", fn, a->root,
                   g->size, g->size);
  if (a->kind == DLPG__OP_SEND || a->kind == DLPG__OP_RECV) {
    DLPG_ARG_CHECK(a->peer >= 0 && a->peer < g->size,
                   "%s: peer is %d but world_size is %d (peer must be in [0, %d))", fn, a->peer,
                   g->size, g->size);
    /* peer == rank (to self) is allowed inside a batch only: dispatch checks that. */
    DLPG_ARG_CHECK(a->tag >= 0, "%s: tag is %d (must be >= 0)", fn, a->tag);
  }
  if (dlpg__is_reduction(a->kind) && ((int)a->rop < (int)DLPG_SUM || (int)a->rop > (int)DLPG_BXOR))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: op is %d, not a dlpg_reduce_op_t (DLPG_SUM..DLPG_BXOR = 0..7)", fn,
                       (int)a->rop);
  /* The backend's own rules (dtype, reduce op, device capability). */
  DLPG_CHECK(be->check(fn, &op->be));

  if (a->streams)
    for (int i = 0; i < n; i++) op->streams[i] = a->streams[i];
  return DLPG_OK;
}
