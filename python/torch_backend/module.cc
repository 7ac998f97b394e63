// The Python module _baton_torch: BatonBackend as a subclass of torch's
// c10d Backend, for baton/torch.py to register under the name "baton".
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "backend.h"
#include "shared_allocator.h"
#include "tensors.h"

namespace py = pybind11;

PYBIND11_MODULE(_baton_torch, m) {
  m.doc() = "Baton backend for torch.distributed (use `import baton.torch`)";
  py::class_<baton_torch::BatonBackend, c10d::Backend,
             c10::intrusive_ptr<baton_torch::BatonBackend>>(m, "BatonBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<baton_torch::BatonBackend>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  // baton.torch.all_reduce: the blocking allreduce without torch.distributed's
  // Python layer and dispatcher (docs/python.md, "Per-call cost").
  m.def(
      "_all_reduce",
      [](baton_torch::BatonBackend& backend, at::Tensor& tensor, const c10d::ReduceOp& op) {
        c10d::AllreduceOptions opts;
        opts.reduceOp = op;
        opts.asyncOp = false;
        std::vector<at::Tensor> tensors{tensor};
        backend.allreduce(tensors, opts)->wait();
      },
      py::arg("backend"), py::arg("tensor"), py::arg("op"),
      py::call_guard<py::gil_scoped_release>());
  // baton.torch.empty: its memory registered on the group's communicator.
  m.def(
      "_register",
      [](baton_torch::BatonBackend& backend, uintptr_t address, size_t bytes) {
        return backend.RegisterBuffer(reinterpret_cast<void*>(address), bytes);
      },
      py::arg("backend"), py::arg("address"), py::arg("bytes"));
  m.def(
      "_deregister",
      [](baton_torch::BatonBackend& backend, uintptr_t handle) {
        backend.DeregisterBuffer(handle);
      },
      py::arg("backend"), py::arg("handle"));
  // baton.torch.use_registered_memory and its companions (shared_allocator.h).
  m.def(
      "_use_registered_memory",
      [](bool enabled, size_t min_bytes, size_t cache_bytes) {
        if (enabled) {
          baton_torch::SharedCpuAllocator::Get().Enable(min_bytes, cache_bytes);
        } else {
          baton_torch::SharedCpuAllocator::Pool().Disable();
        }
      },
      py::arg("enabled"), py::arg("min_bytes"), py::arg("cache_bytes"));
  m.def(
      "_release_cached_memory",
      [] { return baton_torch::SharedCpuAllocator::Pool().ReleaseCached(); },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_in_registered_memory",
      [](uintptr_t address) {
        return baton_torch::SharedCpuAllocator::Pool().Contains(reinterpret_cast<void*>(address));
      },
      py::arg("address"));
  m.def("_registered_memory_stats", [] {
    const auto s = baton_torch::SharedCpuAllocator::Pool().GetStats();
    py::dict d;
    d["enabled"] = s.enabled;
    for (const auto& [name, value] : s.Figures()) d[name] = value;
    return d;
  });
  m.attr("cuda_tensors") = baton_torch::kCudaTensors;
  m.def("_shutdown_all", &baton_torch::BatonBackend::ShutdownAll,
        py::call_guard<py::gil_scoped_release>(),
        "Runs the queued work and stops every baton backend's worker (at exit).");
  m.def("_set_inline_blocking", &baton_torch::StreamRunner::SetInlineBlocking, py::arg("on"),
        "Whether blocking calls on an idle backend run on the caller's thread (default True); "
        "False sends them through the host stream, for benchmarks and tests of that path.");
}
