/* Validation at the door (ARCHITECTURE.md: "validate at the door, then dispatch"): every
 * rule of dlpg.h "Operations" and "Tensors" that one rank can check alone is checked here,
 * so backends receive only well-formed dlpg__op_t records. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/lines/backend.h"
#include "core/door/ops_impl.h"
#include "core/lines/tensor.h"
#include "base/status.h"

/* "cpu", "cuda:1", "cuda_managed:0" into buf. */
static const char *dlpg__dev_str(const dlpg__tensor_t *t, char *buf, size_t cap) {
  if (t->device_type == kDLCPU)
    snprintf(buf, cap, "cpu");
  else
    snprintf(buf, cap, "%s:%d", dlpg__device_name(t->device_type), t->device_id);
  return buf;
}

/* The argument's name in messages, by the kind's naming (op_kinds.h): "inputs[1]" (formatted
 * into buf), or "tensor"/"input"/"output" for the operations of one tensor (a literal). */
static const char *dlpg__arg_name(const dlpg__op_kind_info_t *k, int is_out, int i, char *buf,
                                  size_t cap) {
  if (k->args == DLPG__ARGS_TENSOR) return "tensor";
  if (k->args == DLPG__ARGS_PAIR) return is_out ? "output" : "input";
  snprintf(buf, cap, "%s[%d]", is_out ? "outputs" : "inputs", i);
  return buf;
}

/* Checks one tensor against a reference tensor (argument ref_out/ref_i): backend and dtype.
 * Names are formatted only for a message. */
static dlpg_status_t dlpg__check_like(const char *fn, const dlpg__op_kind_info_t *k, int is_out,
                                      int i, const dlpg__tensor_t *t, const dlpg__tensor_t *ref,
                                      int ref_out, int ref_i) {
  if (t->backend == ref->backend && t->dtype == ref->dtype) return DLPG_OK;
  char nmbuf[32], refbuf[32];
  const char *nm = dlpg__arg_name(k, is_out, i, nmbuf, sizeof nmbuf);
  const char *refname = dlpg__arg_name(k, ref_out, ref_i, refbuf, sizeof refbuf);
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

/* The kind's shape rule (op_kinds.h), per local device i. */
static dlpg_status_t dlpg__check_shapes(const char *fn, const dlpg__op_kind_info_t *k,
                                        const dlpg__op_t *op, int size, int i) {
  int64_t in = op->in[i].numel, out = op->out[i].numel, want = 0;
  int64_t factor = (int64_t)size * op->ntensors;
  char inn[32], outn[32];
  switch (k->shape) {
    case DLPG__SHAPE_SAME:
    case DLPG__SHAPE_ALLTOALL:
      if (out != in)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: %s has %lld elements but %s has %lld (they must match)", fn,
                           dlpg__arg_name(k, 1, i, outn, sizeof outn), (long long)out,
                           dlpg__arg_name(k, 0, i, inn, sizeof inn), (long long)in);
      if (k->shape == DLPG__SHAPE_ALLTOALL && in % size != 0)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: %s has %lld elements, not divisible into world_size %d "
                           "equal blocks", fn, dlpg__arg_name(k, 0, i, inn, sizeof inn),
                           (long long)in, size);
      return DLPG_OK;
    case DLPG__SHAPE_GATHER:
      if (__builtin_mul_overflow(in, factor, &want) || out != want)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: %s has %lld elements but needs world_size %d x ntensors %d x "
                           "%lld input elements = %lld", fn,
                           dlpg__arg_name(k, 1, i, outn, sizeof outn), (long long)out, size,
                           op->ntensors, (long long)in, (long long)want);
      return DLPG_OK;
    case DLPG__SHAPE_SCATTER:
      if (__builtin_mul_overflow(out, factor, &want) || in != want)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: %s has %lld elements but needs world_size %d x ntensors %d x "
                           "%lld output elements = %lld", fn,
                           dlpg__arg_name(k, 0, i, inn, sizeof inn), (long long)in, size,
                           op->ntensors, (long long)out, (long long)want);
      return DLPG_OK;
    case DLPG__SHAPE_COUNTS: /* dlpg__op_build_counts (ops_counts.c) */
    case DLPG__SHAPE_NONE:
      return DLPG_OK;
  }
  return DLPG_OK;
}

/* The serving backend's table must list the kind (backend_abi.h, kinds): a module built
 * from an older table is refused here, naming both, instead of failing inside its issue. */
static dlpg_status_t dlpg__check_served(const char *fn, const dlpg__backend_vtbl_t *be,
                                        dlpg__op_kind_t kind, int device_type) {
  if (dlpg__vtbl_serves(be, kind)) return DLPG_OK;
  char served[256];
  dlpg__op_kinds_names(dlpg__vtbl_kinds(be), served, sizeof served);
  /* A kind added after ABI v1's first table is one a backend may simply not have yet. */
  if (!(DLPG__KINDS_V1 & DLPG__KIND_BIT(kind))) {
    const char *dev = device_type == kDLCPU    ? "CPU"
                      : device_type == kDLCUDA ? "CUDA"
                                               : dlpg__device_name(device_type);
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: not yet on %s tensors (the %s backend does not serve %s; it serves "
                       "%s)", fn, dev, be->name, dlpg__op_name(kind), served);
  }
  return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: the %s backend does not serve %s (it serves %s)",
                     fn, be->name, dlpg__op_name(kind), served);
}

dlpg_status_t dlpg__op_build(const dlpg__op_args_t *a, dlpg__op_t *op) {
  const dlpg__op_kind_info_t *k = dlpg__op_kind_info(a->kind);
  if (!k)
    return dlpg__error(DLPG_ERR_INTERNAL, "dlpg: operation kind %d is not in the kinds table",
                       (int)a->kind);
  const char *fn = a->fn ? a->fn : k->name;
  struct dlpg_group *g = a->g;
  DLPG_ARG_CHECK(g != NULL, "%s: g is NULL", fn);
  if (atomic_load(&g->aborted)) return dlpg__op_aborted(fn, g);

  memset(op, 0, sizeof *op);
  op->kind = a->kind;
  dlpg__op_set_group(op, g);
  op->rop = a->rop;
  if (a->fn) {
    /* An _ex form: the reduce op and its arguments come from the descriptor, read only as
     * far as the caller's struct_size covers it. */
    DLPG_ARG_CHECK(a->desc != NULL, "%s: op (the dlpg_reduce_desc_t) is NULL", fn);
    size_t need = offsetof(dlpg_reduce_desc_t, scalar) + sizeof(double);
    DLPG_ARG_CHECK(a->desc->struct_size >= need,
                   "%s: op->struct_size is %zu, but a dlpg_reduce_desc_t needs at least %zu "
                   "(set it to sizeof(dlpg_reduce_desc_t))", fn, a->desc->struct_size, need);
    op->rop = a->desc->op;
    op->scalar = a->desc->op == DLPG_PREMUL_SUM ? a->desc->scalar : 0.0;
  } else if (k->reduces && a->rop == DLPG_PREMUL_SUM) {
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: reduce op premul_sum needs its scalar: call %s_ex with a "
                       "dlpg_reduce_desc_t {.op = DLPG_PREMUL_SUM, .scalar = ...}", fn, fn);
  }
  op->root = a->root;
  op->peer = a->peer;
  op->tag = a->tag;
  if (k->args == DLPG__ARGS_NONE) {
    /* No tensors (a barrier): runs on the backend serving host memory. */
    const dlpg__backend_vtbl_t *be;
    op->backend = dlpg__backend_for_device(kDLCPU);
    if (op->backend < 0)
      return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: no backend serves cpu", fn);
    DLPG_CHECK(dlpg__backend_get(fn, op->backend, &be));
    return dlpg__check_served(fn, be, a->kind, kDLCPU);
  }

  /* GATHER's output and SCATTER's input are the root's alone (outputs ROOT): elsewhere they
   * are ignored (NULL allowed) and the rank's other tensor stands in for them, so device,
   * dtype and backend come from a tensor the rank does hold; the stand-in is emptied below. */
  int root_only = k->outputs == DLPG__OUTPUTS_ROOT;
  if (root_only)
    DLPG_ARG_CHECK(a->root >= 0 && a->root < g->size,
                   "%s: root is %d but world_size is %d (root must be in [0, %d))", fn, a->root,
                   g->size, g->size);
  int off_root = root_only && a->root != g->rank;
  int no_out = off_root && k->shape == DLPG__SHAPE_GATHER;  /* output ignored */
  int no_in = off_root && k->shape == DLPG__SHAPE_SCATTER;  /* input ignored */
  DLTensor *const *inputs = a->inputs, *const *outputs = no_out ? NULL : a->outputs;
  if (no_in) {
    DLPG_ARG_CHECK(a->outputs && a->outputs[0], "%s: output is NULL", fn);
    inputs = a->outputs;
  }

  int n = a->ntensors;
  DLPG_ARG_CHECK(n >= 1 && n <= DLPG__MAX_LOCAL_DEVICES,
                 "%s: ntensors is %d (must be in [1, %d])", fn, n, DLPG__MAX_LOCAL_DEVICES);
  op->ntensors = n;
  /* The operations of one tensor name it alone ("tensor", "input"); the others name the
   * arrays (inputs[i]/outputs[i]). */
  int single = k->args != DLPG__ARGS_LIST;
  /* Literal names: nothing is formatted unless a message needs it. */
  const char *in0 = k->args == DLPG__ARGS_LIST ? "inputs[0]" : dlpg__arg_name(k, 0, 0, NULL, 0);
  if (single)
    DLPG_ARG_CHECK(inputs && inputs[0], "%s: %s is NULL%s", fn, in0,
                   root_only ? " (the root's input is required)" : "");
  else
    DLPG_ARG_CHECK(inputs != NULL, "%s: inputs is NULL", fn);

  if (k->outputs == DLPG__OUTPUTS_REQUIRED || (root_only && !no_out)) {
    if (single)
      DLPG_ARG_CHECK(outputs && outputs[0], "%s: output is NULL%s", fn,
                     root_only && !no_in && k->shape == DLPG__SHAPE_GATHER
                         ? " (the root's output is required)" : "");
    else
      DLPG_ARG_CHECK(outputs != NULL,
                     "%s: outputs is NULL (this operation cannot run in place)", fn);
  }
  int has_out = k->outputs != DLPG__OUTPUTS_NONE && outputs != NULL;
  op->in_place = k->outputs != DLPG__OUTPUTS_NONE && !root_only && !has_out;

  const char *in_name = k->args == DLPG__ARGS_LIST ? "inputs" : in0;
  const char *out_name = single ? "output" : "outputs";
  for (int i = 0; i < n; i++) {
    DLPG_CHECK(dlpg__tensor_from_dl(fn, no_in ? out_name : in_name, single ? -1 : i,
                                    inputs[i], &op->in[i]));
    if (i > 0) DLPG_CHECK(dlpg__check_like(fn, k, 0, i, &op->in[i], &op->in[0], 0, 0));
    if (has_out) {
      DLPG_CHECK(dlpg__tensor_from_dl(fn, out_name, single ? -1 : i, outputs[i], &op->out[i]));
      DLPG_CHECK(dlpg__check_like(fn, k, 1, i, &op->out[i], &op->in[i], 0, i));
    } else {
      op->out[i] = op->in[i];
    }
  }
  /* The stand-in of a tensor only the root uses keeps device and dtype, holds nothing. */
  dlpg__tensor_t *absent = no_out ? &op->out[0] : no_in ? &op->in[0] : NULL;
  if (absent) absent->ptr = NULL, absent->numel = 0, absent->nbytes = 0;

  const dlpg__tensor_t *t0 = &op->in[0];
  char d1[48];
  /* The backend serving the device: loaded here at its first use (a module), so a device
   * whose module cannot load fails at the call with what failed and why. */
  const dlpg__backend_vtbl_t *be;
  if (dlpg__backend_get(fn, t0->backend, &be) != DLPG_OK) {
    char why[DLPG__ERROR_MAX];
    snprintf(why, sizeof why, "%s", dlpg__last_error());
    const char *m = strncmp(why, fn, strlen(fn)) == 0 ? why + strlen(fn) + 2 : why;
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: %s is on %s, but %s", fn, in0,
                       dlpg__dev_str(t0, d1, sizeof d1), m);
  }
  /* The line serving this kind (a line may leave sends and receives to the next one), and
   * the group's choice for it once made (backend_choice.c; until then the worker makes it
   * at the operation's turn, and the first line's rules, which its alternatives share,
   * answer here). */
  int slot = dlpg__backend_for_kind(t0->backend, a->kind);
  /* Sends and receives: decided per pair by the line's backend, or forced for all. */
  if (k->p2p) slot = dlpg__backend_p2p_line(slot);
  int serving = k->p2p ? slot : dlpg__backend_chosen(g, slot);
  if (serving != t0->backend) DLPG_CHECK(dlpg__backend_get(fn, serving, &be));
  /* No line of the device lists the kind (dlpg__backend_for_kind found none): refused here,
   * naming the backend, rather than by whatever its issue would do with a kind it lacks. */
  DLPG_CHECK(dlpg__check_served(fn, be, a->kind, t0->device_type));
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
    if (has_out && !off_root) DLPG_CHECK(dlpg__check_shapes(fn, k, op, g->size, i));
  }

  if (k->root)
    DLPG_ARG_CHECK(a->root >= 0 && a->root < g->size,
                   "%s: root is %d but world_size is %d (root must be in [0, %d))", fn, a->root,
                   g->size, g->size);
  if (k->p2p) {
    int any = a->kind == DLPG__OP_RECV && a->peer == DLPG_ANY_SOURCE;
    DLPG_ARG_CHECK(any || (a->peer >= 0 && a->peer < g->size),
                   "%s: peer is %d but world_size is %d (peer must be in [0, %d)%s)", fn, a->peer,
                   g->size, g->size, a->kind == DLPG__OP_RECV ? " or DLPG_ANY_SOURCE" : "");
    DLPG_ARG_CHECK(!any || g->size > 1,
                   "%s: peer is DLPG_ANY_SOURCE but the group has one rank, so no rank can send",
                   fn);
    DLPG_ARG_CHECK(a->tag >= 0, "%s: tag is %d (must be >= 0)", fn, a->tag);
  }
  /* A reduce op outside the enum is a bad argument whatever the backend; a valid one the
   * backend cannot apply to this dtype is its check's to refuse, once per operation, here
   * (a backend's issue path need not judge the pair again). */
  if (k->reduces && ((int)op->rop < (int)DLPG_SUM || (int)op->rop > (int)DLPG_PREMUL_SUM))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: op is %d, not a dlpg_reduce_op_t (DLPG_SUM..DLPG_PREMUL_SUM = 0..8)",
                       fn, (int)op->rop);
  if (k->shape == DLPG__SHAPE_COUNTS) DLPG_CHECK(dlpg__op_build_counts(a, fn, op));
  /* The backend's own rules (dtype, reduce op, device capability). */
  DLPG_CHECK(be->check(fn, &op->be));
  /* A transfer with this rank itself can only be matched later by this same thread: only a
   * batch pairs the two (as NCCL's group calls do). */
  if (k->p2p && a->peer == g->rank && dlpg__batch_depth() == 0) {
    int send = a->kind == DLPG__OP_SEND;
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: peer is %d, this rank itself: a %s to self must be issued inside a "
                       "dlpg_group_start/end batch together with its matching %s", fn, g->rank,
                       send ? "send" : "receive", send ? "receive" : "send");
  }

  if (a->streams)
    for (int i = 0; i < n; i++) op->streams[i] = a->streams[i];
  return DLPG_OK;
}
