// The trainer's matrices are row-major; cuBLAS (like reference BLAS) is column-major. This is the
// argument mapping between the two, kept apart from cuda_backend.cc so that a host test can check
// it against CBLAS (trainer_elementwise_test) without a GPU.
#pragma once

namespace trainer {

// The arguments of one column-major sgemm: C = op(A) op(B), op(A) m x k, op(B) k x n, C m x n.
struct ColumnMajorGemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0;
  int n = 0;
  int k = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  int ldc = 0;
};

// Row-major C[m x n] = op(A) op(B) (op(A) m x k, op(B) k x n, every matrix densely stored) as a
// column-major call. A row-major X[r x c] read column-major is X^T [c x r] with the same leading
// dimension c, so row-major C is column-major C^T = op(B)^T op(A)^T: B's data becomes the first
// operand and A's the second, each keeps its own transpose flag (B's column-major view is B^T,
// and op(B)^T is that view transposed exactly when op transposes), m and n swap, and every
// leading dimension is the stored row length.
constexpr ColumnMajorGemm ToColumnMajor(bool trans_a, bool trans_b, int m, int n, int k,
                                        const float* a, const float* b) {
  ColumnMajorGemm g;
  g.trans_a = trans_b;
  g.trans_b = trans_a;
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = b;
  g.lda = trans_b ? k : n;  // B is stored k x n (or n x k when transposed), row-major
  g.b = a;
  g.ldb = trans_a ? m : k;  // A is stored m x k (or k x m when transposed), row-major
  g.ldc = n;
  return g;
}

}  // namespace trainer
