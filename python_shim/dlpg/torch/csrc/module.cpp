// The Python module dlpg.torch._C_dlpg: load_library(path) and create(...), which returns a
// ProcessGroupDlpg typed (for pybind11) as a subclass of torch's own c10d Backend, so
// torch.distributed wraps it in a ProcessGroup as it does its built-in backends.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "backend.h"

namespace py = pybind11;
using dlpg_torch::ProcessGroupDlpg;

namespace {

// dlpg.torch.Options' nccl_config (validated there; libdlpg checks the ranges again), as
// the group options' nccl_* fields, which libdlpg applies to every NCCL communicator of the
// group. The strings live in `keep` until the group is made (libdlpg copies them).
void nccl_options(const py::dict& nccl, dlpg_group_options_t& o, std::string keep[2]) {
  auto num = [&](const char* k, int& field) {
    if (nccl.contains(k)) field = nccl[k].cast<int>();
  };
  num("cga_cluster_size", o.nccl_cga_cluster_size);
  num("min_ctas", o.nccl_min_ctas);
  num("max_ctas", o.nccl_max_ctas);
  num("traffic_class", o.nccl_traffic_class);
  if (nccl.contains("net_name")) o.nccl_net_name = (keep[0] = nccl["net_name"].cast<std::string>()).c_str();
  if (nccl.contains("comm_name")) o.nccl_comm_name = (keep[1] = nccl["comm_name"].cast<std::string>()).c_str();
}

// The group on dlpg store s (the caller keeps its own reference).
c10::intrusive_ptr<ProcessGroupDlpg> make(dlpg_store_t* s, int rank, int size, double timeout_s,
                                          const std::string& name, const py::dict& nccl) {
  const dlpg_api_t& a = dlpg_torch::api();
  dlpg_group_options_t opts = DLPG_GROUP_OPTIONS_INIT;
  opts.timeout_s = timeout_s;
  opts.name = name.c_str();
  std::string keep[2];
  nccl_options(nccl, opts, keep);
  dlpg_group_t* g = nullptr;
  dlpg_status_t st;
  {
    py::gil_scoped_release nogil;  // store callbacks may need other threads
    st = a.group_create(s, rank, size, &opts, &g);
  }
  dlpg_torch::check(st, "dlpg_group_create");
  auto core = std::make_shared<dlpg_torch::Core>(g, rank, size);
  auto pg = c10::make_intrusive<ProcessGroupDlpg>(std::move(core), rank, size);
  pg->set_timeout_s(timeout_s);
  return pg;
}

// make() on a dlpg store, keeping torch's store of the group for monitored_barrier.
c10::intrusive_ptr<ProcessGroupDlpg> make_with(dlpg_store_t* s, int rank, int size,
                                               double timeout_s, const std::string& name,
                                               c10::intrusive_ptr<c10d::Store> torch_store,
                                               const py::dict& nccl) {
  auto pg = make(s, rank, size, timeout_s, name, nccl);
  pg->set_store(std::move(torch_store));
  return pg;
}

// On torch's (prefixed) store, through the store adapter.
c10::intrusive_ptr<ProcessGroupDlpg> create(const c10::intrusive_ptr<c10d::Store>& store,
                                            int rank, int size, double timeout_s,
                                            const std::string& name, const py::dict& nccl) {
  dlpg_store_t* s = dlpg_torch::store_from_torch(store, timeout_s);
  try {
    auto pg = make_with(s, rank, size, timeout_s, name, store, nccl);
    dlpg_torch::api().store_close(s);  // the group holds its own reference
    return pg;
  } catch (...) {
    dlpg_torch::api().store_close(s);
    throw;
  }
}

// On a dlpg store the caller opened (dlpg.Store.handle of the same libdlpg), so that ranks
// of other frameworks on that store find the group under its plain name (init_method
// "dlpg://", dlpg/torch/rendezvous.py).
// torch_store: torch's store of the group (over the same dlpg store), for monitored_barrier.
c10::intrusive_ptr<ProcessGroupDlpg> create_on_store(
    uintptr_t store, int rank, int size, double timeout_s, const std::string& name,
    const c10::intrusive_ptr<c10d::Store>& torch_store, const py::dict& nccl) {
  TORCH_CHECK(store != 0, "dlpg: create_on_store: the dlpg store is closed");
  return make_with(reinterpret_cast<dlpg_store_t*>(store), rank, size, timeout_s, name,
                   torch_store, nccl);
}

// The adapter on its own, for tests of how it treats torch's store: the dlpg_store_t* as an
// integer, owned by the caller (dlpg.Store(_handle=...) closes it).
uintptr_t wrap_store(const c10::intrusive_ptr<c10d::Store>& store, double timeout_s) {
  return reinterpret_cast<uintptr_t>(dlpg_torch::store_from_torch(store, timeout_s));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The dlpg torch.distributed backend in C++ (see dlpg.torch)";
  // torch's c10d types must be registered with pybind11 before this class names its base.
  py::module::import("torch.distributed");
  py::class_<ProcessGroupDlpg, c10d::Backend, c10::intrusive_ptr<ProcessGroupDlpg>>(
      m, "ProcessGroupDlpg")
      .def("abort", &ProcessGroupDlpg::abort, py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &ProcessGroupDlpg::shutdown, py::call_guard<py::gil_scoped_release>())
      // The name ProcessGroupGloo and ProcessGroupNCCL give setTimeout in Python (torch's
      // _set_pg_timeout reaches only those two classes).
      .def("_set_default_timeout", &ProcessGroupDlpg::setTimeout, py::arg("timeout"))
      .def("getBackendName", &ProcessGroupDlpg::getBackendName)
      // dist.split_group deep-copies parent_backend.options as the child's pg_options.
      // torch 2.11's Backend binding has no such property and c10d's Options cannot be
      // deep-copied (pickled), so None: the child then inherits this group's settings,
      // which is what dist.split_group means by default (split's opts are optional).
      .def_property_readonly("options", [](ProcessGroupDlpg&) { return py::none(); })
      // new_group calls this on its non-members where the default group has a bound device
      // (ProcessGroupNCCL's no-color split). Its members make their group through the
      // creator, not by a split of this one, so there is nothing to take part in here.
      .def("perform_nocolor_split", [](ProcessGroupDlpg&, py::object) {})
      .def("_get_backend_name", &ProcessGroupDlpg::getBackendName);
  m.def("load_library", &dlpg_torch::load_library, py::arg("path"));
  m.def("create_subset", &ProcessGroupDlpg::subset, py::arg("parent"), py::arg("ranks"),
        py::arg("timeout_s"), py::arg("name"), py::arg("torch_store"),
        py::call_guard<py::gil_scoped_release>());
  m.def("admit_now", &ProcessGroupDlpg::admit_now, py::arg("group"));
  m.def("create", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout_s"), py::arg("name"), py::arg("nccl") = py::dict());
  m.def("create_on_store", &create_on_store, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout_s"), py::arg("name"), py::arg("torch_store"),
        py::arg("nccl") = py::dict());
  m.def("_wrap_store", &wrap_store, py::arg("store"), py::arg("timeout_s"));
}
