// baton._core: the NumPy package's call path as a CPython extension
// (docs/python.md). ctypes spent about 5 us a call converting arguments; here
// each collective takes buffer-protocol objects as they are, checks that every
// buffer holds what Baton will read or write (a short one would be overrun),
// and calls the C API with the GIL released. Life cycle calls (init, split,
// destroy, streams) stay in Python over ctypes: they are not on the hot path.
//
// Every function is positional (METH_FASTCALL): comm and stream are the
// handles as integers (0: none / synchronous), then the call's buffers and
// arguments, then datatype (None: from the buffer's format). Checks raise
// ValueError / TypeError; Baton's failures go through the package's
// _lib.check, which raises its BatonError subclasses with Baton's message.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#include <vector>

#include "_core_args.h"
#include "baton.h"

namespace {

using baton_core::Blocks;
using baton_core::Buffer;
using baton_core::CommSize;
using baton_core::Counts;
using baton_core::DatatypeOf;
using baton_core::g_contiguous;
using baton_core::IntOf;
using baton_core::kTypeSizes;
using baton_core::OpOf;
using baton_core::SameElements;
using baton_core::Sum;

// Set by _init from the package: _lib.check(result, comm, what), the
// InvalidUsageError class, and numpy.ascontiguousarray.
PyObject* g_check = nullptr;
PyObject* g_invalid_usage = nullptr;

// The positional arguments every function starts with.
struct Call {
  batonComm_t comm = nullptr;
  batonStream_t stream = nullptr;
  const char* what = "";
};

bool Start(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t want, const char* what, Call* call) {
  call->what = what;
  if (g_check == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "baton._core: use it through the baton package");
    return false;
  }
  if (nargs != want) {
    PyErr_Format(PyExc_TypeError, "_core.%s takes %zd arguments, not %zd", what, want, nargs);
    return false;
  }
  call->comm = static_cast<batonComm_t>(PyLong_AsVoidPtr(args[0]));
  if (call->comm == nullptr) {
    if (!PyErr_Occurred()) {
      PyObject* exc_args = Py_BuildValue("(is)", 5, "communicator already destroyed");
      if (exc_args != nullptr) PyErr_SetObject(g_invalid_usage, exc_args);
      Py_XDECREF(exc_args);
    }
    return false;
  }
  call->stream = static_cast<batonStream_t>(PyLong_AsVoidPtr(args[1]));
  return !PyErr_Occurred();
}

// Runs the Baton call without the GIL (it may block until every rank joins);
// None, or the package's exception for a failure.
template <typename F>
PyObject* Run(const Call& call, F&& fn) {
  batonResult_t r;
  Py_BEGIN_ALLOW_THREADS r = fn();
  Py_END_ALLOW_THREADS if (r == batonSuccess) Py_RETURN_NONE;
  PyObject* res = PyObject_CallFunction(
      g_check, "iKs", static_cast<int>(r),
      static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(call.comm)), call.what);
  Py_XDECREF(res);
  if (!PyErr_Occurred()) {
    PyErr_Format(PyExc_RuntimeError, "%s: Baton failed with result %d", call.what,
                 static_cast<int>(r));
  }
  return nullptr;  // check() raised (or failed itself)
}

// allreduce(comm, stream, send, out, op, datatype)
PyObject* AllReduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  if (!Start(args, nargs, 6, "allreduce", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[5]);
  int op = dt < 0 ? -1 : OpOf(args[4], send);
  if (PyErr_Occurred()) return nullptr;
  if (out.bytes() != send.bytes()) {
    return PyErr_Format(PyExc_ValueError, "out has %zu bytes, send %zu", out.bytes(), send.bytes());
  }
  size_t n = send.bytes() / kTypeSizes[dt];
  return Run(c, [&] {
    return batonAllReduce(send.data(), out.data(), n, static_cast<batonDataType_t>(dt),
                          static_cast<batonRedOp_t>(op), c.comm, c.stream);
  });
}

// broadcast(comm, stream, buf, root, datatype)
PyObject* Broadcast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer buf;
  int root = 0;
  if (!Start(args, nargs, 5, "broadcast", &c) || !buf.Output(args[2], "buf") ||
      !IntOf(args[3], &root, "root")) {
    return nullptr;
  }
  int dt = DatatypeOf(buf, args[4]);
  if (dt < 0) return nullptr;
  return Run(c, [&] {
    return batonBroadcast(buf.data(), buf.data(), buf.bytes() / kTypeSizes[dt],
                          static_cast<batonDataType_t>(dt), root, c.comm, c.stream);
  });
}

// reduce(comm, stream, send, out or None, op, root, datatype)
PyObject* Reduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  int root = 0;
  if (!Start(args, nargs, 7, "reduce", &c) || !send.Input(args[2]) ||
      !out.OptionalOutput(args[3], "out") || !IntOf(args[5], &root, "root")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[6]);
  int op = dt < 0 ? -1 : OpOf(args[4], send);
  if (PyErr_Occurred() || (out.held() && !out.Holds(send.bytes(), "out"))) return nullptr;
  return Run(c, [&] {
    return batonReduce(send.data(), out.data(), send.bytes() / kTypeSizes[dt],
                       static_cast<batonDataType_t>(dt), static_cast<batonRedOp_t>(op), root,
                       c.comm, c.stream);
  });
}

// allgather(comm, stream, send, out, datatype)
PyObject* AllGather(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  if (!Start(args, nargs, 5, "allgather", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[4]);
  if (dt < 0 || !out.Holds(CommSize(c.comm) * send.bytes(), "out")) return nullptr;
  return Run(c, [&] {
    return batonAllGather(send.data(), out.data(), send.bytes() / kTypeSizes[dt],
                          static_cast<batonDataType_t>(dt), c.comm, c.stream);
  });
}

// allgatherv(comm, stream, send, out, counts, datatype)
PyObject* AllGatherV(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  std::vector<size_t> counts, displs;
  if (!Start(args, nargs, 6, "allgatherv", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out") ||
      !Counts(args[4], CommSize(c.comm), "allgatherv", &counts, &displs)) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[5]);
  if (dt < 0 || !out.Holds(Sum(counts) * kTypeSizes[dt], "out")) return nullptr;
  return Run(c, [&] {
    return batonAllGatherV(send.data(), send.bytes() / kTypeSizes[dt], out.data(), counts.data(),
                           displs.data(), static_cast<batonDataType_t>(dt), c.comm, c.stream);
  });
}

// reduce_scatter(comm, stream, send, out, op, datatype)
PyObject* ReduceScatter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  if (!Start(args, nargs, 6, "reduce_scatter", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[5]);
  int op = dt < 0 ? -1 : OpOf(args[4], send);
  if (PyErr_Occurred()) return nullptr;
  size_t n = 0;
  if (!Blocks(send.bytes() / kTypeSizes[dt], c.comm, c.what, &n) ||
      !out.Holds(n * kTypeSizes[dt], "out")) {
    return nullptr;
  }
  return Run(c, [&] {
    return batonReduceScatter(send.data(), out.data(), n, static_cast<batonDataType_t>(dt),
                              static_cast<batonRedOp_t>(op), c.comm, c.stream);
  });
}

// reduce_scatterv(comm, stream, send, out, counts, op, datatype)
PyObject* ReduceScatterV(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  std::vector<size_t> counts;
  int rank = 0;
  if (!Start(args, nargs, 7, "reduce_scatterv", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out") ||
      !Counts(args[4], CommSize(c.comm), "reduce_scatterv", &counts, nullptr)) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[6]);
  int op = dt < 0 ? -1 : OpOf(args[5], send);
  if (PyErr_Occurred()) return nullptr;
  if (batonCommUserRank(c.comm, &rank) != batonSuccess) {
    return Run(c, [&] { return batonCommUserRank(c.comm, &rank); });  // raises its error
  }
  size_t size = kTypeSizes[dt];
  if (!send.Holds(Sum(counts) * size, "send") || !out.Holds(counts[rank] * size, "out")) {
    return nullptr;
  }
  return Run(c, [&] {
    return batonReduceScatterV(send.data(), out.data(), counts.data(),
                               static_cast<batonDataType_t>(dt), static_cast<batonRedOp_t>(op),
                               c.comm, c.stream);
  });
}

// alltoall(comm, stream, send, out, datatype)
PyObject* AlltoAll(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  if (!Start(args, nargs, 5, "alltoall", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[4]);
  size_t n = 0;
  if (dt < 0 || !Blocks(send.bytes() / kTypeSizes[dt], c.comm, c.what, &n) ||
      !out.Holds(send.bytes(), "out")) {
    return nullptr;
  }
  return Run(c, [&] {
    return batonAlltoAll(send.data(), out.data(), n, static_cast<batonDataType_t>(dt), c.comm,
                         c.stream);
  });
}

// alltoallv(comm, stream, send, out, sendcounts, recvcounts, datatype)
PyObject* AlltoAllV(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  std::vector<size_t> sc, sd, rc, rd;
  if (!Start(args, nargs, 7, "alltoallv", &c) || !send.Input(args[2]) ||
      !out.Output(args[3], "out") ||
      !Counts(args[4], CommSize(c.comm), "alltoallv sendcounts", &sc, &sd) ||
      !Counts(args[5], CommSize(c.comm), "alltoallv recvcounts", &rc, &rd)) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[6]);
  if (dt < 0 || !send.Holds(Sum(sc) * kTypeSizes[dt], "send") ||
      !out.Holds(Sum(rc) * kTypeSizes[dt], "out")) {
    return nullptr;
  }
  return Run(c, [&] {
    return batonAlltoAllV(send.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                          static_cast<batonDataType_t>(dt), c.comm, c.stream);
  });
}

// gather(comm, stream, send, out or None, root, datatype)
PyObject* Gather(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  int root = 0;
  if (!Start(args, nargs, 6, "gather", &c) || !send.Input(args[2]) ||
      !out.OptionalOutput(args[3], "out") || !IntOf(args[4], &root, "root")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(send, args[5]);
  if (dt < 0 || (out.held() && !out.Holds(CommSize(c.comm) * send.bytes(), "out"))) {
    return nullptr;
  }
  return Run(c, [&] {
    return batonGather(send.data(), out.data(), send.bytes() / kTypeSizes[dt],
                       static_cast<batonDataType_t>(dt), root, c.comm, c.stream);
  });
}

// scatter(comm, stream, send or None, out, root, datatype)
PyObject* Scatter(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer send, out;
  int root = 0;
  if (!Start(args, nargs, 6, "scatter", &c) || !send.OptionalInput(args[2]) ||
      !out.Output(args[3], "out") || !IntOf(args[4], &root, "root")) {
    return nullptr;
  }
  if (!SameElements(send, out)) return nullptr;
  int dt = DatatypeOf(out, args[5]);
  if (dt < 0 || (send.held() && !send.Holds(CommSize(c.comm) * out.bytes(), "send"))) {
    return nullptr;
  }
  return Run(c, [&] {
    return batonScatter(send.data(), out.data(), out.bytes() / kTypeSizes[dt],
                        static_cast<batonDataType_t>(dt), root, c.comm, c.stream);
  });
}

// send(comm, stream, buf, peer, datatype) and recv(comm, stream, buf, peer, datatype)
PyObject* PointToPoint(PyObject* const* args, Py_ssize_t nargs, bool is_send) {
  Call c;
  Buffer buf;
  int peer = 0;
  if (!Start(args, nargs, 5, is_send ? "send" : "recv", &c) ||
      !(is_send ? buf.Input(args[2]) : buf.Output(args[2], "buf")) ||
      !IntOf(args[3], &peer, "peer")) {
    return nullptr;
  }
  int dt = DatatypeOf(buf, args[4]);
  if (dt < 0) return nullptr;
  size_t n = buf.bytes() / kTypeSizes[dt];
  auto type = static_cast<batonDataType_t>(dt);
  return Run(c, [&] {
    return is_send ? batonSend(buf.data(), n, type, peer, c.comm, c.stream)
                   : batonRecv(buf.data(), n, type, peer, c.comm, c.stream);
  });
}
PyObject* Send(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return PointToPoint(args, nargs, true);
}
PyObject* Recv(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return PointToPoint(args, nargs, false);
}

// recv_any(comm, 0, buf, datatype) -> the rank it came from (synchronous:
// the source is known only when the receive has completed).
PyObject* RecvAny(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  Buffer buf;
  if (!Start(args, nargs, 4, "recv_any", &c) || !buf.Output(args[2], "buf")) return nullptr;
  int dt = DatatypeOf(buf, args[3]);
  if (dt < 0) return nullptr;
  size_t n = buf.bytes() / kTypeSizes[dt];
  auto type = static_cast<batonDataType_t>(dt);
  int source = -1;
  PyObject* done =
      Run(c, [&] { return batonRecvAny(buf.data(), n, type, &source, c.comm, nullptr); });
  if (done == nullptr) return nullptr;
  Py_DECREF(done);
  return PyLong_FromLong(source);
}

// barrier(comm, stream)
PyObject* Barrier(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Call c;
  if (!Start(args, nargs, 2, "barrier", &c)) return nullptr;
  return Run(c, [&] { return batonBarrier(c.comm, c.stream); });
}

// _init(check, InvalidUsageError, numpy.ascontiguousarray)
PyObject* Init(PyObject*, PyObject* args) {
  PyObject *check, *invalid_usage, *contiguous;
  if (!PyArg_ParseTuple(args, "OOO", &check, &invalid_usage, &contiguous)) return nullptr;
  Py_XSETREF(g_check, Py_NewRef(check));
  Py_XSETREF(g_invalid_usage, Py_NewRef(invalid_usage));
  Py_XSETREF(g_contiguous, Py_NewRef(contiguous));
  Py_RETURN_NONE;
}

// The path of the libbaton this module loaded, for ctypes to open the same one.
PyObject* LibraryPath(PyObject*, PyObject*) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&batonGetVersion), &info) == 0 || info.dli_fname == nullptr) {
    return PyErr_Format(PyExc_ImportError, "baton._core: cannot locate libbaton");
  }
  return PyUnicode_DecodeFSDefault(info.dli_fname);
}

#define BATON_FAST(name, fn) \
  { name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)), METH_FASTCALL, nullptr }
PyMethodDef kMethods[] = {BATON_FAST("allreduce", AllReduce),
                          BATON_FAST("broadcast", Broadcast),
                          BATON_FAST("reduce", Reduce),
                          BATON_FAST("allgather", AllGather),
                          BATON_FAST("allgatherv", AllGatherV),
                          BATON_FAST("reduce_scatter", ReduceScatter),
                          BATON_FAST("reduce_scatterv", ReduceScatterV),
                          BATON_FAST("alltoall", AlltoAll),
                          BATON_FAST("alltoallv", AlltoAllV),
                          BATON_FAST("gather", Gather),
                          BATON_FAST("scatter", Scatter),
                          BATON_FAST("send", Send),
                          BATON_FAST("recv", Recv),
                          BATON_FAST("recv_any", RecvAny),
                          BATON_FAST("barrier", Barrier),
                          {"_init", Init, METH_VARARGS, nullptr},
                          {"library_path", LibraryPath, METH_NOARGS, nullptr},
                          {nullptr, nullptr, 0, nullptr}};
#undef BATON_FAST

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_core",
                       "The baton package's collectives over the C API (docs/python.md).",
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__core() {
  return PyModule_Create(&kModule);
}
