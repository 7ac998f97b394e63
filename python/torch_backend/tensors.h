// The torch backend's checks and conversions of tensors (backend.cc).
#pragma once

#include <baton.h>

#include <vector>

#include <ATen/ATen.h>

namespace baton_torch {

// Whether this build routes CUDA tensors to Baton's device buffers
// (cuda_ops.cc; meson defines BATON_TORCH_CUDA there alone when torch and
// libbaton have CUDA, so the other files compile alike either way).
extern const bool kCudaTensors;

// Baton's datatype for t's dtype; torch dtypes Baton lacks throw.
batonDataType_t DataType(const at::Tensor& t);
// A defined, dense, contiguous tensor of a Baton datatype, on the CPU (or on
// a CUDA device, where cuda_ok); throws otherwise.
void CheckTensor(const at::Tensor& t, const char* what, bool cuda_ok = false);
// The one tensor of a single-device call.
at::Tensor& Single(std::vector<at::Tensor>& tensors, const char* what, bool cuda_ok = false);
// b passes CheckTensor and has a's dtype and device.
void CheckSameKind(const at::Tensor& a, const at::Tensor& b, const char* what);
std::vector<size_t> Numels(const std::vector<at::Tensor>& tensors);
// Displacements of blocks of these counts back to back.
std::vector<size_t> Offsets(const std::vector<size_t>& counts);
bool AllEqual(const std::vector<size_t>& v);
// A new flat tensor as long as the tensors together, of the first one's kind.
at::Tensor EmptyFlat(const std::vector<at::Tensor>& tensors);
// Copies the tensors' elements back to back into flat.
void FlattenInto(const std::vector<at::Tensor>& tensors, at::Tensor& flat);
// Copies consecutive pieces of flat into each of outputs.
void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& outputs);
// Gather's outputs or scatter's inputs: one list of `size` tensors like
// `like` at the root (returned), nothing elsewhere (empty).
std::vector<at::Tensor> RootList(std::vector<std::vector<at::Tensor>>& lists,
                                 const at::Tensor& like, int root, int rank, int size,
                                 const char* what);

}  // namespace baton_torch
