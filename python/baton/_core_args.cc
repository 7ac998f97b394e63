#include "_core_args.h"

#include <strings.h>

#include <climits>
#include <cstring>

namespace baton_core {

PyObject* g_contiguous = nullptr;

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

}  // namespace baton_core
