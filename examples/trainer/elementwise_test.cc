// Host checks of what the CPU and CUDA back ends share (meson test trainer_elementwise):
//  - the CPU backend, now built on elementwise.h, gives bit for bit what its own loops gave
//    before (frozen copies of them below), on random inputs with zeros, negative zeros,
//    subnormals, infinities and NaNs mixed in;
//  - the fp16 conversions equal the previous ones (buckets.cc) for every half and for 2^24
//    floats, and GCC's _Float16 where the compiler has it;
//  - ToColumnMajor, the argument mapping the CUDA backend hands cuBLAS, gives through CBLAS's
//    column-major sgemm what CBLAS's row-major sgemm gives, for all four transpose combinations.
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend.h"
#include "elementwise.h"
#include "gemm_mapping.h"
#include "util.h"

namespace {

using trainer::Rng;

int failures = 0;
int checks = 0;

void Check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    if (failures <= 20) std::printf("FAIL: %s\n", what.c_str());
  }
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool SameBits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// ---- The CPU backend's loops before elementwise.h (cpu_backend.cc, buckets.cc), frozen ----
namespace before {

void AddBias(float* y, const float* bias, int rows, int cols, bool relu) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      float v = row[c] + bias[c];
      row[c] = relu && v < 0.0f ? 0.0f : v;
    }
  }
}

void ReluBackward(float* delta, const float* activation, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (activation[i] <= 0.0f) delta[i] = 0.0f;
  }
}

trainer::BatchStats SoftmaxCrossEntropy(const float* logits, const uint8_t* labels, int rows,
                                        int classes, float* dlogits) {
  trainer::BatchStats stats;
  stats.samples = rows;
  for (int r = 0; r < rows; ++r) {
    const float* z = logits + static_cast<size_t>(r) * classes;
    int best = 0;
    float zmax = z[0];
    for (int c = 1; c < classes; ++c) {
      if (z[c] > zmax) {
        zmax = z[c];
        best = c;
      }
    }
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
    double log_sum = std::log(sum);
    stats.loss_sum += log_sum - static_cast<double>(z[labels[r]] - zmax);
    stats.correct += best == labels[r] ? 1 : 0;
    if (dlogits != nullptr) {
      float* d = dlogits + static_cast<size_t>(r) * classes;
      for (int c = 0; c < classes; ++c) {
        double p = std::exp(static_cast<double>(z[c] - zmax) - log_sum);
        d[c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) / rows);
      }
    }
  }
  return stats;
}

void SgdStep(float* w, float* v, const float* g, size_t n, float lr, float momentum,
             float weight_decay) {
  for (size_t i = 0; i < n; ++i) {
    v[i] = momentum * v[i] + (g[i] + weight_decay * w[i]);
    w[i] -= lr * v[i];
  }
}

void EmaUpdate(float* avg, const float* w, size_t n, float decay) {
  for (size_t i = 0; i < n; ++i) avg[i] = decay * avg[i] + (1.0f - decay) * w[i];
}

void Scale(float* x, size_t n, float s) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void Add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (x < 0x38800000u) {
    float t;
    std::memcpy(&t, &x, sizeof t);
    t += 0.5f;
    uint32_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    return static_cast<uint16_t>(sign | (bits - 0x3f000000u));
  }
  uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;
  return static_cast<uint16_t>(sign | (x >> 13));
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) {
    bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
  } else if (em < 0x400u) {
    float v = static_cast<float>(em) * 0x1p-24f;
    std::memcpy(&bits, &v, sizeof bits);
    bits |= sign;
  } else {
    bits = sign | ((em << 13) + 0x38000000u);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace before

// Mostly normal values of the given spread, with the awkward ones mixed in.
std::vector<float> RandomFloats(Rng& rng, size_t n, double spread, bool specials = true) {
  const float kSpecial[] = {0.0f,
                            -0.0f,
                            1e-40f,
                            -1e-40f,
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            65504.0f,
                            1e30f};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (specials && rng.Below(16) == 0) {
      v[i] = kSpecial[rng.Below(sizeof kSpecial / sizeof kSpecial[0])];
    } else {
      v[i] = static_cast<float>(spread * rng.Normal());
    }
  }
  return v;
}

// The CPU backend (through its Backend interface, as the trainer calls it) against the loops
// it had before, bit for bit.
void CheckCpuBackendUnchanged() {
  std::unique_ptr<trainer::Backend> cpu = trainer::MakeCpuBackend(1);
  Rng rng(2024);
  for (int trial = 0; trial < 20; ++trial) {
    const int rows = 1 + static_cast<int>(rng.Below(70));
    const int cols = 1 + static_cast<int>(rng.Below(300));
    const size_t n = static_cast<size_t>(rows) * cols;
    const std::string at = " (trial " + std::to_string(trial) + ", " + std::to_string(rows) + "x" +
                           std::to_string(cols) + ")";

    for (bool relu : {false, true}) {
      std::vector<float> y = RandomFloats(rng, n, 2.0);
      std::vector<float> bias = RandomFloats(rng, static_cast<size_t>(cols), 1.0);
      std::vector<float> want = y;
      before::AddBias(want.data(), bias.data(), rows, cols, relu);
      cpu->AddBias(y.data(), bias.data(), rows, cols, relu);
      Check(SameBits(y, want), "AddBias" + std::string(relu ? " + relu" : "") + at);
    }
    {
      std::vector<float> delta = RandomFloats(rng, n, 1.0);
      std::vector<float> act = RandomFloats(rng, n, 1.0);
      std::vector<float> want = delta;
      before::ReluBackward(want.data(), act.data(), n);
      cpu->ReluBackward(delta.data(), act.data(), n);
      Check(SameBits(delta, want), "ReluBackward" + at);
    }
    {
      // Logits of every size, up to 1e3 (exp would overflow without the max subtracted).
      const int classes = 2 + static_cast<int>(rng.Below(15));
      const double spread = trial % 4 == 0 ? 1e3 : 3.0;
      std::vector<float> logits =
          RandomFloats(rng, static_cast<size_t>(rows) * classes, spread, false);
      std::vector<uint8_t> labels(static_cast<size_t>(rows));
      for (auto& l : labels) l = static_cast<uint8_t>(rng.Below(static_cast<uint64_t>(classes)));
      std::vector<float> d(logits.size(), -1.0f);
      std::vector<float> want_d(logits.size(), -1.0f);
      trainer::BatchStats want =
          before::SoftmaxCrossEntropy(logits.data(), labels.data(), rows, classes, want_d.data());
      trainer::BatchStats got =
          cpu->SoftmaxCrossEntropy(logits.data(), labels.data(), rows, classes, d.data());
      Check(SameBits(got.loss_sum, want.loss_sum) && got.correct == want.correct &&
                got.samples == want.samples,
            "SoftmaxCrossEntropy loss/correct" + at);
      Check(SameBits(d, want_d), "SoftmaxCrossEntropy gradient" + at);
      trainer::BatchStats eval =
          cpu->SoftmaxCrossEntropy(logits.data(), labels.data(), rows, classes, nullptr);
      Check(SameBits(eval.loss_sum, want.loss_sum), "SoftmaxCrossEntropy without gradient" + at);
    }
    {
      std::vector<float> w = RandomFloats(rng, n, 0.5);
      std::vector<float> v = RandomFloats(rng, n, 0.1);
      std::vector<float> g = RandomFloats(rng, n, 0.1);
      std::vector<float> w2 = w;
      std::vector<float> v2 = v;
      const float lr = 0.05f * static_cast<float>(1 + trial);
      before::SgdStep(w2.data(), v2.data(), g.data(), n, lr, 0.9f, 1e-4f);
      cpu->SgdStep(w.data(), v.data(), g.data(), n, lr, 0.9f, 1e-4f);
      Check(SameBits(w, w2) && SameBits(v, v2), "SgdStep" + at);
    }
    {
      std::vector<float> avg = RandomFloats(rng, n, 1.0);
      std::vector<float> w = RandomFloats(rng, n, 1.0);
      std::vector<float> want = avg;
      before::EmaUpdate(want.data(), w.data(), n, 0.999f);
      cpu->EmaUpdate(avg.data(), w.data(), n, 0.999f);
      Check(SameBits(avg, want), "EmaUpdate" + at);
    }
    {
      std::vector<float> x = RandomFloats(rng, n, 1.0);
      std::vector<float> y = RandomFloats(rng, n, 1.0);
      std::vector<float> want = x;
      before::Scale(want.data(), n, 1.0f / 3.0f);
      cpu->Scale(x.data(), n, 1.0f / 3.0f);
      Check(SameBits(x, want), "scale" + at);
      before::Add(want.data(), y.data(), n);
      cpu->Add(x.data(), y.data(), n);
      Check(SameBits(x, want), "add" + at);
    }
    {
      std::vector<float> x = RandomFloats(rng, n, 1e3);
      std::vector<uint16_t> half(n);
      std::vector<float> back(n);
      cpu->ToHalf(half.data(), x.data(), n);
      cpu->FromHalf(back.data(), half.data(), n);
      bool ok = true;
      for (size_t i = 0; i < n; ++i) {
        ok = ok && half[i] == before::FloatToHalf(x[i]);
        float b = before::HalfToFloat(half[i]);
        ok = ok && std::memcmp(&b, &back[i], sizeof b) == 0;
      }
      Check(ok, "ToHalf/FromHalf" + at);
    }
  }
}

void CheckHalfConversions() {
  bool ok = true;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float a = trainer::HalfToFloat(static_cast<uint16_t>(h));
    float b = before::HalfToFloat(static_cast<uint16_t>(h));
    ok = ok && std::memcmp(&a, &b, sizeof a) == 0;
    // Every half's value converts back to itself (NaNs to the quiet NaN of their sign).
    uint16_t back = trainer::FloatToHalf(a);
    bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    ok = ok && (nan ? back == ((h & 0x8000u) | 0x7e00u) : back == h);
  }
  Check(ok, "HalfToFloat equals the previous conversion for all 65536 halves, and round-trips");

  // 2^24 float bit patterns: every exponent, mantissas strided, all signs.
  ok = true;
#ifdef __FLT16_MAX__
  bool f16_ok = true;
#endif
  for (uint32_t i = 0; i < (1u << 24); ++i) {
    uint32_t bits = i * 0x100u + (i & 0xffu);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    uint16_t h = trainer::FloatToHalf(f);
    ok = ok && h == before::FloatToHalf(f);
#ifdef __FLT16_MAX__
    if (!std::isnan(f)) {
      _Float16 ref = static_cast<_Float16>(f);
      uint16_t rb;
      std::memcpy(&rb, &ref, sizeof rb);
      f16_ok = f16_ok && rb == h;
    }
#endif
  }
  Check(ok, "FloatToHalf equals the previous conversion for 2^24 floats");
#ifdef __FLT16_MAX__
  Check(f16_ok, "FloatToHalf equals GCC's _Float16 conversion (round to nearest even)");
#endif
}

// Row-major C = alpha op(A) op(B) + beta C computed two ways through CBLAS: the row-major call,
// and the column-major call with ToColumnMajor's arguments (what the CUDA backend gives
// cuBLAS). Both are also compared with a double-precision reference, so a mapping that
// happened to agree with a broken row-major path would still fail.
void CheckGemmMapping() {
  Rng rng(7);
  const int kShapes[][3] = {{1, 1, 1},   {3, 5, 7},     {7, 3, 5},
                            {17, 9, 33}, {64, 10, 256}, {2, 40, 1}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const auto& shape : kShapes) {
        const int m = shape[0];
        const int n = shape[1];
        const int k = shape[2];
        std::vector<float> a = RandomFloats(rng, static_cast<size_t>(m) * k, 1.0, false);
        std::vector<float> b = RandomFloats(rng, static_cast<size_t>(k) * n, 1.0, false);
        std::vector<float> c0 = RandomFloats(rng, static_cast<size_t>(m) * n, 1.0, false);
        const float alpha = 0.75f;
        const float beta = 0.5f;
        std::vector<float> row = c0;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, alpha, a.data(), ta ? m : k, b.data(), tb ? k : n, beta, row.data(),
                    n);
        const trainer::ColumnMajorGemm g =
            trainer::ToColumnMajor(ta, tb, m, n, k, a.data(), b.data());
        std::vector<float> col = c0;
        cblas_sgemm(CblasColMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                    g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, alpha, g.a, g.lda, g.b,
                    g.ldb, beta, col.data(), g.ldc);
        bool ok = true;
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double ref = beta * static_cast<double>(c0[static_cast<size_t>(i) * n + j]);
            double mag = std::fabs(ref);
            for (int p = 0; p < k; ++p) {
              double x = ta ? a[static_cast<size_t>(p) * m + i] : a[static_cast<size_t>(i) * k + p];
              double y = tb ? b[static_cast<size_t>(j) * k + p] : b[static_cast<size_t>(p) * n + j];
              ref += alpha * x * y;
              mag += std::fabs(alpha * x * y);
            }
            const double tol = 1e-5 * (mag + 1.0);
            const size_t at = static_cast<size_t>(i) * n + j;
            ok = ok && std::fabs(col[at] - ref) <= tol && std::fabs(row[at] - ref) <= tol &&
                 std::fabs(col[at] - row[at]) <= tol;
          }
        }
        Check(ok, "ToColumnMajor trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) +
                      " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                      " k=" + std::to_string(k));
      }
    }
  }
}

}  // namespace

int main() {
  CheckCpuBackendUnchanged();
  CheckHalfConversions();
  CheckGemmMapping();
  std::printf("%d of %d checks passed\n", checks - failures, checks);
  return failures == 0 ? 0 : 1;
}
