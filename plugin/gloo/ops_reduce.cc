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

const dlpg__op_t &reduce_view(const dlpg__op_t &op, dlpg__op_t &view, std::vector<char> &scratch) {
  const bool reduces = op.kind == DLPG__OP_ALLREDUCE || op.kind == DLPG__OP_REDUCE ||
                       op.kind == DLPG__OP_REDUCE_SCATTER || op.kind == DLPG__OP_REDUCE_SCATTER_V;
  if (op.ntensors < 1) return op;
  // Every collective takes a complex tensor as its parts: Gloo's algorithms know element
  // types up to 8 bytes, and a part is one.
  const bool complex = dlpg__dtype_is_complex(op.in[0].dtype) != 0;
  const bool premul = reduces && op.rop == DLPG_PREMUL_SUM;
  if (!complex && !premul) return op;
  view = op;
  for (int i = 0; i < op.ntensors; i++)
    if (complex) {
      // Every rank maps alike, so the headers peers compare still agree.
      view.in[i].dtype = view.out[i].dtype = dlpg__dtype_real_part(op.in[i].dtype);
      view.in[i].numel *= 2;
      view.out[i].numel *= 2;
    }
  if (premul) {
    const dlpg__tensor_t &in = view.in[0];
    scratch.resize(in.nbytes);
    if (in.nbytes && !premul_elements(in.dtype, scratch.data(), in.ptr,
                                      static_cast<size_t>(in.numel), op.scalar))
      throw StatusError(DLPG_ERR_INTERNAL, std::string("Gloo cannot apply premul_sum to ") +
                                               dlpg__dtype_name(op.in[0].dtype) +
                                               ", which validation's check accepted");
    view.in[0].ptr = scratch.data();
    view.in_place = 0;  // the output still receives the sum (copy_in_to_out)
    view.rop = DLPG_SUM;
  }
  return view;
}

}  // namespace dlpg_gloo
