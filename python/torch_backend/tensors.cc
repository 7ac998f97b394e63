#include "tensors.h"

#include <algorithm>
#include <functional>

namespace baton_torch {

batonDataType_t DataType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar:
      return batonInt8;
    case at::kByte:
      return batonUint8;
    case at::kBool:
      return batonUint8;
    case at::kInt:
      return batonInt32;
    case at::kUInt32:
      return batonUint32;
    case at::kLong:
      return batonInt64;
    case at::kUInt64:
      return batonUint64;
    case at::kHalf:
      return batonFloat16;
    case at::kFloat:
      return batonFloat32;
    case at::kDouble:
      return batonFloat64;
    case at::kBFloat16:
      return batonBfloat16;
    case at::kFloat8_e4m3fn:
      return batonFloat8e4m3;
    case at::kFloat8_e5m2:
      return batonFloat8e5m2;
    default:
      TORCH_CHECK(false, "baton backend: no Baton datatype for ", t.scalar_type());
  }
}

void CheckTensor(const at::Tensor& t, const char* what, bool cuda_ok) {
  TORCH_CHECK(t.defined(), "baton backend: ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu() || (cuda_ok && kCudaTensors && t.device().is_cuda()),
              "baton backend: ", what, ": ",
              kCudaTensors ? "CUDA tensors only in allreduce, broadcast, reduce, "
                             "all_gather_into_tensor and reduce_scatter_tensor; otherwise CPU"
                           : "only CPU tensors (this backend was built without CUDA)",
              " (got ", t.device(), ")");
  TORCH_CHECK(t.layout() == at::kStrided, "baton backend: ", what, ": only dense tensors");
  TORCH_CHECK(t.is_contiguous(), "baton backend: ", what, ": the tensor must be contiguous");
  DataType(t);
}

at::Tensor& Single(std::vector<at::Tensor>& tensors, const char* what, bool cuda_ok) {
  TORCH_CHECK(tensors.size() == 1, "baton backend: ", what, " takes one tensor per rank, got ",
              tensors.size());
  CheckTensor(tensors[0], what, cuda_ok);
  return tensors[0];
}

void CheckSameKind(const at::Tensor& a, const at::Tensor& b, const char* what) {
  CheckTensor(b, what, a.is_cuda());
  TORCH_CHECK(a.device() == b.device(), "baton backend: ", what, ": tensors on ", a.device(),
              " and ", b.device());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "baton backend: ", what,
              ": tensors of different dtypes (", a.scalar_type(), ", ", b.scalar_type(), ")");
}

std::vector<size_t> Numels(const std::vector<at::Tensor>& tensors) {
  std::vector<size_t> n;
  n.reserve(tensors.size());
  for (const auto& t : tensors) n.push_back(static_cast<size_t>(t.numel()));
  return n;
}

std::vector<size_t> Offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

bool AllEqual(const std::vector<size_t>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}

at::Tensor EmptyFlat(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  return at::empty({total}, tensors.at(0).options());
}

void FlattenInto(const std::vector<at::Tensor>& tensors, at::Tensor& flat) {
  int64_t at_element = 0;
  for (const auto& t : tensors) {
    flat.narrow(0, at_element, t.numel()).copy_(t.reshape({-1}));
    at_element += t.numel();
  }
}

void Unflatten(const at::Tensor& flat, std::vector<at::Tensor>& outputs) {
  int64_t at_element = 0;
  for (auto& out : outputs) {
    out.copy_(flat.narrow(0, at_element, out.numel()).view(out.sizes()));
    at_element += out.numel();
  }
}

std::vector<at::Tensor> RootList(std::vector<std::vector<at::Tensor>>& lists,
                                 const at::Tensor& like, int root, int rank, int size,
                                 const char* what) {
  TORCH_CHECK(root >= 0 && root < size, "baton backend: ", what, ": root ", root,
              " is not a rank of ", size);
  if (rank != root) return {};
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size,
              "baton backend: ", what, " needs one list of ", size, " tensors at the root");
  for (const auto& t : lists[0]) {
    CheckSameKind(like, t, what);
    TORCH_CHECK(t.numel() == like.numel(), "baton backend: ", what,
                ": every tensor of the root's list must have as many elements as this rank's");
  }
  return lists[0];
}

}  // namespace baton_torch
