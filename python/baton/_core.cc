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
#include <strings.h>

#include <array>
#include <climits>
#include <cstring>
#include <vector>

#include "baton.h"

namespace {

constexpr std::array<size_t, batonNumTypes> kTypeSizes = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
constexpr std::array<const char*, batonNumTypes> kTypeNames = {
    "int8",    "uint8",   "int32",   "uint32",   "int64",       "uint64",
    "float16", "float32", "float64", "bfloat16", "float8_e4m3", "float8_e5m2"};

// Set by _init from the package: _lib.check(result, comm, what), the
// InvalidUsageError class, and numpy.ascontiguousarray.
PyObject* g_check = nullptr;
PyObject* g_invalid_usage = nullptr;
PyObject* g_contiguous = nullptr;

// A Py_buffer released on scope exit, with the object it came from when a
// contiguous copy had to be made.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (held_) PyBuffer_Release(&view_);
    Py_XDECREF(copy_);
  }
  // An input: obj's bytes, or those of a C-contiguous array made from obj
  // (non-contiguous arrays, lists). The caller keeps async inputs contiguous
  // already (the package does), so a copy never outlives a queued call.
  bool Input(PyObject* obj) {
    if (PyObject_GetBuffer(obj, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
      held_ = true;
      return true;
    }
    PyErr_Clear();
    copy_ = PyObject_CallOneArg(g_contiguous, obj);
    if (copy_ == nullptr) return false;
    if (PyObject_GetBuffer(copy_, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
    held_ = true;
    return true;
  }
  bool Output(PyObject* obj, const char* what) {
    if (PyObject_GetBuffer(obj, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) == 0) {
      held_ = true;
      return true;
    }
    PyErr_Format(PyExc_ValueError, "%s must be a writable C-contiguous array or buffer", what);
    return false;
  }
  // A buffer, or none when obj is None.
  bool OptionalOutput(PyObject* obj, const char* what) {
    return obj == Py_None || Output(obj, what);
  }
  bool OptionalInput(PyObject* obj) { return obj == Py_None || Input(obj); }

  bool held() const { return held_; }
  void* data() const { return held_ ? view_.buf : nullptr; }
  size_t bytes() const { return held_ ? static_cast<size_t>(view_.len) : 0; }
  size_t itemsize() const { return static_cast<size_t>(view_.itemsize); }
  const char* format() const { return view_.format != nullptr ? view_.format : "B"; }

  // Baton reads or writes `need` bytes here: less would be overrun.
  bool Holds(size_t need, const char* what) const {
    if (bytes() >= need) return true;
    PyErr_Format(PyExc_ValueError, "%s has %zu bytes, the call needs %zu", what, bytes(), need);
    return false;
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
  PyObject* copy_ = nullptr;
};

// The datatype of a buffer format (struct module codes, native order).
int TypeOfFormat(const char* format, size_t itemsize) {
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  if (format[0] == '\0' || format[1] != '\0') return -1;
  const char code = format[0];
  const int by_size[9] = {-1, batonInt8, -1, -1, batonInt32, -1, -1, -1, batonInt64};
  if (std::strchr("bhilqn", code) != nullptr || std::strchr("BcHILQN", code) != nullptr) {
    int signed_type = itemsize <= 8 ? by_size[itemsize] : -1;
    bool is_unsigned = code == 'c' || (code >= 'A' && code <= 'Z');
    return signed_type < 0 ? -1 : signed_type + (is_unsigned ? 1 : 0);  // uint* follows int*
  }
  switch (code) {
    case 'e':
      return batonFloat16;
    case 'f':
      return batonFloat32;
    case 'd':
      return batonFloat64;
    case '?':
      return batonUint8;  // bool as bytes, as the torch backend does
    default:
      return -1;
  }
}

// The datatype of buf, or the one named (a name or a code, whose element size
// must be buf's); -1 with the exception set.
int DatatypeOf(const Buffer& buf, PyObject* datatype) {
  if (datatype == Py_None) {
    int code = TypeOfFormat(buf.format(), buf.itemsize());
    if (code < 0) {
      PyErr_Format(PyExc_TypeError,
                   "Baton has no datatype for buffer format '%s' (%zu-byte elements); int8, "
                   "uint8, int32, uint32, int64, uint64, float16, float32, float64, bool (or "
                   "datatype='bfloat16' on uint16)",
                   buf.format(), buf.itemsize());
    }
    return code;
  }
  int code = -1;
  if (PyUnicode_Check(datatype)) {
    const char* name = PyUnicode_AsUTF8(datatype);
    if (name == nullptr) return -1;
    for (int i = 0; i < batonNumTypes; ++i) {
      if (std::strcmp(name, kTypeNames[i]) == 0) code = i;
    }
  } else {
    long v = PyLong_AsLong(datatype);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v >= 0 && v < batonNumTypes) code = static_cast<int>(v);
  }
  if (code < 0) {
    PyErr_Format(PyExc_ValueError,
                 "unknown datatype %R; one of bfloat16, float16, float32, "
                 "float64, float8_e4m3, float8_e5m2, int32, int64, int8, uint32, uint64, uint8",
                 datatype);
    return -1;
  }
  if (buf.itemsize() != kTypeSizes[code]) {
    PyErr_Format(PyExc_ValueError,
                 "datatype %R needs %zu-byte elements, the array has format '%s' (%zu bytes)",
                 datatype, kTypeSizes[code], buf.format(), buf.itemsize());
    return -1;
  }
  return code;
}

// A C int from a Python int, or a ValueError naming `what` (2**32 must not
// become 0: a root or op that wraps is a silently wrong call).
bool IntOf(PyObject* obj, int* out, const char* what) {
  long v = PyLong_AsLong(obj);
  if (v == -1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return false;
    PyErr_Clear();
  } else if (v >= INT_MIN && v <= INT_MAX) {
    *out = static_cast<int>(v);
    return true;
  }
  PyErr_Format(PyExc_ValueError, "%s %R is out of range", what, obj);
  return false;
}

bool IsBool(const Buffer& buf) {
  const char* f = buf.format();
  if (*f == '@' || *f == '=' || *f == '<') ++f;
  return std::strcmp(f, "?") == 0;
}

// The op for `buf`'s elements; -1 with the exception set. Bools travel as
// bytes, so sum is "any" and prod "all" (as the torch backend and NCCL's
// have them), not a byte count that wraps at 256 ranks.
int OpOf(PyObject* op, const Buffer& buf) {
  static constexpr std::array<const char*, 5> kOps = {"sum", "prod", "max", "min", "avg"};
  int code = -1;
  if (PyUnicode_Check(op)) {
    const char* name = PyUnicode_AsUTF8(op);
    if (name == nullptr) return -1;
    for (size_t i = 0; i < kOps.size(); ++i) {
      if (strcasecmp(name, kOps[i]) == 0) code = static_cast<int>(i);
    }
    if (code < 0) {
      PyErr_Format(PyExc_ValueError, "unknown op %R; one of avg, max, min, prod, sum", op);
      return -1;
    }
  } else if (!IntOf(op, &code, "op")) {  // an op from batonRedOpCreatePreMulSum
    return -1;
  }
  if (!IsBool(buf)) return code;
  if (code == batonSum) return batonMax;
  if (code == batonProd) return batonMin;
  if (code == batonMax || code == batonMin) return code;
  PyErr_Format(PyExc_ValueError, "op %R is not defined on bool arrays (sum, prod, max, min are)",
               op);
  return -1;
}

// Baton moves bytes and does not convert: an out of another dtype than
// send's would get send's bits (1077936128 for 3.0f in an int32 out).
bool SameElements(const Buffer& send, const Buffer& out) {
  if (!send.held() || !out.held()) return true;
  if (send.itemsize() == out.itemsize() && IsBool(send) == IsBool(out) &&
      TypeOfFormat(send.format(), send.itemsize()) == TypeOfFormat(out.format(), out.itemsize()))
    return true;
  PyErr_Format(PyExc_TypeError,
               "out has elements of format '%s' (%zu bytes), send '%s' (%zu bytes): Baton does "
               "not convert; give out send's dtype",
               out.format(), out.itemsize(), send.format(), send.itemsize());
  return false;
}

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

int CommSize(batonComm_t comm) {
  int n = 0;
  return batonCommCount(comm, &n) == batonSuccess ? n : 0;
}

// nranks non-negative counts from a sequence; displacements back to back.
bool Counts(PyObject* obj, int nranks, const char* what, std::vector<size_t>* counts,
            std::vector<size_t>* displs) {
  PyObject* seq = PySequence_Fast(obj, "counts must be a sequence");
  if (seq == nullptr) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  bool ok = n == nranks;
  if (!ok) {
    PyErr_Format(PyExc_ValueError, "%s needs %d counts (one per rank), got %zd", what, nranks, n);
  }
  size_t at = 0;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      ok = false;
    } else if (v < 0) {
      PyErr_Format(PyExc_ValueError, "%s: counts must not be negative", what);
      ok = false;
    } else {
      counts->push_back(static_cast<size_t>(v));
      if (displs != nullptr) displs->push_back(at);
      at += static_cast<size_t>(v);
    }
  }
  Py_DECREF(seq);
  return ok;
}

// The block each rank gets when `elements` split into equal ones per rank.
bool Blocks(size_t elements, batonComm_t comm, const char* what, size_t* block) {
  size_t nranks = static_cast<size_t>(CommSize(comm));
  if (nranks == 0 || elements % nranks != 0) {
    PyErr_Format(PyExc_ValueError, "%s: %zu elements do not split into %zu equal blocks", what,
                 elements, nranks);
    return false;
  }
  *block = elements / nranks;
  return true;
}

size_t Sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
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
