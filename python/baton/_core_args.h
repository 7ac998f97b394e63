// baton._core's argument checks: buffers, datatypes, ops, ranks and counts
// from Python objects, each a Python exception when wrong (_core.cc).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <array>
#include <vector>

#include "baton.h"

namespace baton_core {

inline constexpr std::array<size_t, batonNumTypes> kTypeSizes = {1, 1, 4, 4, 8, 8,
                                                                 2, 4, 8, 2, 1, 1};
inline constexpr std::array<const char*, batonNumTypes> kTypeNames = {
    "int8",    "uint8",   "int32",   "uint32",   "int64",       "uint64",
    "float16", "float32", "float64", "bfloat16", "float8_e4m3", "float8_e5m2"};

// numpy.ascontiguousarray, set by _init: what Buffer::Input copies with.
extern PyObject* g_contiguous;

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
int TypeOfFormat(const char* format, size_t itemsize);

// The datatype of buf, or the one named (a name or a code, whose element size
// must be buf's); -1 with the exception set.
int DatatypeOf(const Buffer& buf, PyObject* datatype);

// A C int from a Python int, or a ValueError naming `what` (2**32 must not
// become 0: a root or op that wraps is a silently wrong call).
bool IntOf(PyObject* obj, int* out, const char* what);

// Whether buf holds bools (format '?').
bool IsBool(const Buffer& buf);

// The op for `buf`'s elements; -1 with the exception set. Bools travel as
// bytes, so sum is "any" and prod "all" (as the torch backend and NCCL's
// have them), not a byte count that wraps at 256 ranks.
int OpOf(PyObject* op, const Buffer& buf);

// Baton moves bytes and does not convert: an out of another dtype than
// send's would get send's bits (1077936128 for 3.0f in an int32 out).
bool SameElements(const Buffer& send, const Buffer& out);

// The communicator's size, 0 when Baton cannot say.
int CommSize(batonComm_t comm);

// nranks non-negative counts from a sequence; displacements back to back.
bool Counts(PyObject* obj, int nranks, const char* what, std::vector<size_t>* counts,
            std::vector<size_t>* displs);

// The block each rank gets when `elements` split into equal ones per rank.
bool Blocks(size_t elements, batonComm_t comm, const char* what, size_t* block);

// The sum of counts.
size_t Sum(const std::vector<size_t>& v);

}  // namespace baton_core
