#include "conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace trainer {

namespace {
constexpr double kEps = 1e-5;
constexpr float kMomentum = 0.1f;
}  // namespace

void Im2col(const float* x, const ConvShape& s, float* cols) {
  const int ho = s.ho(), wo = s.wo(), win = s.window();
  float* out = cols;
  for (int n = 0; n < s.n; ++n) {
    const float* img = x + static_cast<size_t>(n) * s.h * s.w * s.c;
    for (int oy = 0; oy < ho; ++oy) {
      for (int ox = 0; ox < wo; ++ox, out += win) {
        float* o = out;
        for (int ky = 0; ky < s.k; ++ky) {
          const int iy = oy + ky - s.pad;
          for (int kx = 0; kx < s.k; ++kx, o += s.c) {
            const int ix = ox + kx - s.pad;
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) {
              std::fill(o, o + s.c, 0.0f);
            } else {
              std::memcpy(o, img + (static_cast<size_t>(iy) * s.w + ix) * s.c, sizeof(float) * s.c);
            }
          }
        }
      }
    }
  }
}

void Col2im(const float* dcols, const ConvShape& s, float* dx) {
  const int ho = s.ho(), wo = s.wo(), win = s.window();
  std::fill(dx, dx + static_cast<size_t>(s.n) * s.h * s.w * s.c, 0.0f);
  const float* in = dcols;
  for (int n = 0; n < s.n; ++n) {
    float* img = dx + static_cast<size_t>(n) * s.h * s.w * s.c;
    for (int oy = 0; oy < ho; ++oy) {
      for (int ox = 0; ox < wo; ++ox, in += win) {
        const float* g = in;
        for (int ky = 0; ky < s.k; ++ky) {
          const int iy = oy + ky - s.pad;
          for (int kx = 0; kx < s.k; ++kx, g += s.c) {
            const int ix = ox + kx - s.pad;
            if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            float* p = img + (static_cast<size_t>(iy) * s.w + ix) * s.c;
            for (int c = 0; c < s.c; ++c) p[c] += g[c];
          }
        }
      }
    }
  }
}

void MaxPool2(const float* x, int n, int h, int w, int c, float* y, int* argmax) {
  const int ho = h / 2, wo = w / 2;
  size_t o = 0;
  for (int b = 0; b < n; ++b) {
    for (int oy = 0; oy < ho; ++oy) {
      for (int ox = 0; ox < wo; ++ox) {
        for (int ch = 0; ch < c; ++ch, ++o) {
          int best = -1;
          float v = 0;
          for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
              const int i = ((b * h + 2 * oy + dy) * w + 2 * ox + dx) * c + ch;
              if (best < 0 || x[i] > v) {
                best = i;
                v = x[i];
              }
            }
          }
          y[o] = v;
          argmax[o] = best;
        }
      }
    }
  }
}

void MaxPool2Backward(const float* dy, const int* argmax, size_t out_count, size_t in_count,
                      float* dx) {
  std::fill(dx, dx + in_count, 0.0f);
  for (size_t o = 0; o < out_count; ++o) dx[argmax[o]] += dy[o];
}

void BatchNormTrain(const float* x, size_t rows, int c, const float* gamma, const float* beta,
                    float* y, float* xhat, BatchNormCache* cache, float* running_mean,
                    float* running_var, const StatSum& sum) {
  // Sum and sum of squares per channel and the count, in one call when synchronised (as
  // torch's SyncBatchNorm gathers its per-rank statistics in one collective).
  std::vector<double> stats(2 * static_cast<size_t>(c) + 1, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * c;
    for (int ch = 0; ch < c; ++ch) {
      stats[ch] += row[ch];
      stats[c + ch] += static_cast<double>(row[ch]) * row[ch];
    }
  }
  stats[2 * c] = static_cast<double>(rows);
  if (sum) sum(stats.data(), stats.size());
  const double count = stats[2 * c];
  cache->count = count;
  cache->invstd.assign(c, 0.0);
  std::vector<float> mean(c), scale(c), shift(c);
  for (int ch = 0; ch < c; ++ch) {
    const double m = stats[ch] / count;
    const double var = std::max(0.0, stats[c + ch] / count - m * m);
    cache->invstd[ch] = 1.0 / std::sqrt(var + kEps);
    mean[ch] = static_cast<float>(m);
    scale[ch] = static_cast<float>(cache->invstd[ch]);
    const double unbiased = count > 1 ? var * count / (count - 1) : var;
    running_mean[ch] = (1 - kMomentum) * running_mean[ch] + kMomentum * static_cast<float>(m);
    running_var[ch] = (1 - kMomentum) * running_var[ch] + kMomentum * static_cast<float>(unbiased);
  }
  for (size_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    float* xh = xhat + r * c;
    float* out = y + r * c;
    for (int ch = 0; ch < c; ++ch) {
      xh[ch] = (in[ch] - mean[ch]) * scale[ch];
      out[ch] = gamma[ch] * xh[ch] + beta[ch];
    }
  }
}

void BatchNormEval(const float* x, size_t rows, int c, const float* gamma, const float* beta,
                   const float* running_mean, const float* running_var, float* y) {
  std::vector<float> scale(c);
  for (int ch = 0; ch < c; ++ch) {
    scale[ch] =
        static_cast<float>(gamma[ch] / std::sqrt(static_cast<double>(running_var[ch]) + kEps));
  }
  for (size_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      y[r * c + ch] = (x[r * c + ch] - running_mean[ch]) * scale[ch] + beta[ch];
    }
  }
}

void BatchNormBackward(const float* dy, const float* xhat, const BatchNormCache& cache, size_t rows,
                       int c, const float* gamma, float* dgamma, float* dbeta, float* dx,
                       const StatSum& sum) {
  // The two reductions backward needs: sum(dy) and sum(dy * xhat) per channel.
  std::vector<double> red(2 * static_cast<size_t>(c), 0.0);
  for (size_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      red[ch] += dy[r * c + ch];
      red[c + ch] += static_cast<double>(dy[r * c + ch]) * xhat[r * c + ch];
    }
  }
  for (int ch = 0; ch < c; ++ch) {
    dbeta[ch] = static_cast<float>(red[ch]);
    dgamma[ch] = static_cast<float>(red[c + ch]);
  }
  if (sum) sum(red.data(), red.size());
  std::vector<float> k(c), mean_dy(c), mean_dyx(c);
  for (int ch = 0; ch < c; ++ch) {
    k[ch] = static_cast<float>(gamma[ch] * cache.invstd[ch]);
    mean_dy[ch] = static_cast<float>(red[ch] / cache.count);
    mean_dyx[ch] = static_cast<float>(red[c + ch] / cache.count);
  }
  for (size_t r = 0; r < rows; ++r) {
    for (int ch = 0; ch < c; ++ch) {
      const size_t i = r * c + ch;
      dx[i] = k[ch] * (dy[i] - mean_dy[ch] - xhat[i] * mean_dyx[ch]);
    }
  }
}

}  // namespace trainer
