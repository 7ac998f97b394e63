// baton._numpy_memory: NumPy's data-memory handler (NEP 49) over the
// registered pool (../common/registered_pool.h), for
// baton.use_registered_memory(): arrays of at least min_bytes that NumPy
// allocates in the calling thread's context live in batonMemAlloc memory
// registered on every live baton communicator, so collectives on them read
// the peers' arrays in place; smaller ones take malloc, as NumPy's own
// handler does.
//
// Built without NumPy's headers (a wheel's build has NumPy at run time
// only): the handler's layout is NEP 49's version 1, and
// PyDataMem_SetHandler is entry 304 of NumPy's C-API table, which NumPy
// keeps fixed (its ABI) since 1.22 (feature version 0xf, entry 211).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../common/registered_pool.h"

namespace {

using baton_python::RegisteredPool;

// NEP 49, version 1 (numpy/ndarraytypes.h).
struct DataMemAllocator {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr, size_t size);
};
struct DataMemHandler {
  char name[127];
  uint8_t version;
  DataMemAllocator allocator;
};

constexpr int kFeatureVersionEntry = 211;  // PyArray_GetNDArrayCFeatureVersion
constexpr int kSetHandlerEntry = 304;      // PyDataMem_SetHandler
constexpr unsigned kFeatureVersion122 = 0xf;

RegisteredPool& Pool() {
  return RegisteredPool::Get();
}

void* Malloc(void* /*ctx*/, size_t size) {
  if (void* p = Pool().Allocate(size)) return p;
  return malloc(size);
}

void* Calloc(void* /*ctx*/, size_t nelem, size_t elsize) {
  if (elsize != 0 && nelem > SIZE_MAX / elsize) return nullptr;
  const size_t bytes = nelem * elsize;
  if (void* p = Pool().Allocate(bytes)) {
    memset(p, 0, bytes);  // a reused block holds what its last array left
    return p;
  }
  return calloc(nelem, elsize);
}

void* Realloc(void* /*ctx*/, void* ptr, size_t new_size) {
  if (ptr == nullptr) return Malloc(nullptr, new_size);
  const size_t block = Pool().BlockBytes(ptr);
  if (block == 0) return realloc(ptr, new_size);  // ordinary memory stays ordinary
  // A block keeps an array that still fits and is not smaller than the pool
  // takes (Free knows a pool's array by its size).
  if (new_size <= block && new_size >= Pool().SmallestTaken()) return ptr;
  void* moved = Malloc(nullptr, new_size);
  if (moved == nullptr) return nullptr;
  memcpy(moved, ptr, std::min(block, new_size));
  Pool().Free(ptr);
  return moved;
}

void Free(void* /*ctx*/, void* ptr, size_t size) {
  // NumPy passes the size it asked for: arrays smaller than any the pool took
  // skip its lock.
  if (!Pool().Free(ptr, size)) free(ptr);
}

DataMemHandler handler = {"baton_registered", 1, {nullptr, Malloc, Calloc, Realloc, Free}};

void WarnToStderr(const std::string& message) {
  // The handler may run without the GIL: no Python warning from here.
  fprintf(stderr, "baton.use_registered_memory: %s\n", message.c_str());
}

// NumPy's C-API table, or nullptr with a Python error set.
void** NumpyApi() {
  PyObject* module = PyImport_ImportModule("numpy._core._multiarray_umath");
  if (module == nullptr) {
    PyErr_Clear();
    module = PyImport_ImportModule("numpy.core._multiarray_umath");  // NumPy 1.x
  }
  if (module == nullptr) return nullptr;
  PyObject* capsule = PyObject_GetAttrString(module, "_ARRAY_API");
  Py_DECREF(module);
  if (capsule == nullptr) return nullptr;
  auto** api = static_cast<void**>(PyCapsule_GetPointer(capsule, nullptr));
  Py_DECREF(capsule);
  if (api == nullptr) return nullptr;
  auto feature_version = reinterpret_cast<unsigned (*)()>(api[kFeatureVersionEntry]);
  if (feature_version() < kFeatureVersion122) {
    PyErr_SetString(PyExc_RuntimeError,
                    "baton.use_registered_memory: needs NumPy 1.22 or newer (its memory handlers)");
    return nullptr;
  }
  return api;
}

// The calling context's handler: ours, or NumPy's default (NULL).
PyObject* SetHandler(bool ours) {
  void** api = NumpyApi();
  if (api == nullptr) return nullptr;
  auto set_handler = reinterpret_cast<PyObject* (*)(PyObject*)>(api[kSetHandlerEntry]);
  PyObject* capsule = nullptr;
  if (ours) {
    capsule = PyCapsule_New(&handler, "mem_handler", nullptr);
    if (capsule == nullptr) return nullptr;
  }
  PyObject* previous = set_handler(capsule);
  Py_XDECREF(capsule);
  return previous;  // a new reference, or nullptr with the error set
}

PyObject* Use(PyObject* /*self*/, PyObject* args) {
  int enabled = 0;
  unsigned long long min_bytes = 0;
  unsigned long long cache_bytes = 0;
  if (!PyArg_ParseTuple(args, "pKK", &enabled, &min_bytes, &cache_bytes)) return nullptr;
  // On: the handler first, so that a NumPy without handlers leaves the pool
  // off. Off: arrays the pool holds keep the handler that made them (NumPy
  // records it per array), so their frees still come here.
  if (!enabled) Pool().Disable();
  PyObject* previous = SetHandler(enabled != 0);
  if (previous == nullptr) return nullptr;
  Py_DECREF(previous);
  if (enabled) Pool().Enable(min_bytes, cache_bytes);
  Py_RETURN_NONE;
}

PyObject* Stats(PyObject* /*self*/, PyObject* /*args*/) {
  const RegisteredPool::Stats s = Pool().GetStats();
  PyObject* d = PyDict_New();
  if (d == nullptr) return nullptr;
  if (PyDict_SetItemString(d, "enabled", s.enabled ? Py_True : Py_False) != 0) {
    Py_DECREF(d);
    return nullptr;
  }
  for (const auto& [name, value] : s.Figures()) {
    PyObject* v = PyLong_FromUnsignedLongLong(value);
    if (v == nullptr || PyDict_SetItemString(d, name, v) != 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(v);
  }
  return d;
}

PyObject* ReleaseCached(PyObject* /*self*/, PyObject* /*args*/) {
  PyThreadState* saved = PyEval_SaveThread();  // frees and deregisters without the GIL
  const size_t released = Pool().ReleaseCached();
  PyEval_RestoreThread(saved);
  return PyLong_FromSize_t(released);
}

PyObject* Contains(PyObject* /*self*/, PyObject* arg) {
  void* address = PyLong_AsVoidPtr(arg);
  if (address == nullptr && PyErr_Occurred()) return nullptr;
  return PyBool_FromLong(Pool().Contains(address));
}

// comm: batonComm_t as an integer (Comm._h).
PyObject* AttachOrDetach(PyObject* arg, bool attach) {
  void* comm = PyLong_AsVoidPtr(arg);
  if (comm == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "comm is 0");
    return nullptr;
  }
  if (attach) {
    Pool().Attach(static_cast<batonComm_t>(comm));
  } else {
    Pool().Detach(static_cast<batonComm_t>(comm));
  }
  Py_RETURN_NONE;
}

PyObject* Attach(PyObject* /*self*/, PyObject* arg) {
  return AttachOrDetach(arg, true);
}

PyObject* Detach(PyObject* /*self*/, PyObject* arg) {
  return AttachOrDetach(arg, false);
}

PyMethodDef kMethods[] = {
    {"use", Use, METH_VARARGS, "use(enabled, min_bytes, cache_bytes)"},
    {"stats", Stats, METH_NOARGS, "the pool's figures"},
    {"release_cached", ReleaseCached, METH_NOARGS, "frees the cached blocks; their bytes"},
    {"contains", Contains, METH_O, "whether the address lies in a block"},
    {"attach", Attach, METH_O, "registers every block on comm from now on"},
    {"detach", Detach, METH_O, "deregisters every block from comm"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_numpy_memory",
                       "NumPy arrays in registered memory (baton.use_registered_memory)",
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__numpy_memory() {
  Pool().SetWarn(&WarnToStderr);
  return PyModule_Create(&kModule);
}
