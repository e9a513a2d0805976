// The reduce step that Gloo's algorithms (ops_coll.cc) and the small path (ops_small.cc)
// share: the reduce function for an operation (validation judged the pair), and the AVG
// division. Both sit above this file, so neither reaches into the other for it.
#include <string>

#include "gloo/ops_internal.h"
#include "gloo/reduce_fns.h"

namespace dlpg_gloo {

ReduceFn op_reduce_fn(const dlpg__op_t &op) {
  ReduceFn fn = reduce_fn(op.in[0].dtype, op.rop);
  if (!fn)
    throw StatusError(DLPG_ERR_INTERNAL,
                      std::string("no Gloo reduce function for ") +
                          dlpg__dtype_name(op.in[0].dtype) + " with " +
                          dlpg__reduce_op_name(op.rop) + ", which validation's check accepted");
  return fn;
}

void average(const dlpg__tensor_t &t, void *ptr, size_t numel, int size) {
  if (!divide_elements(t.dtype, ptr, numel, size))
    throw StatusError(DLPG_ERR_INTERNAL, std::string("Gloo cannot average ") +
                                             dlpg__dtype_name(t.dtype) +
                                             ", which validation's check accepted");
}

}  // namespace dlpg_gloo
