/* Fused fp32 CPU kernels for ERNIE training: (masked) softmax + dropout, GELU + dropout, and
 * residual add + dropout + layer norm, forward and backward.
 *
 * Paddle's CPU step spends about a fifth of its time in these elementwise and row-wise kernels
 * (scalar loops, one pass per op, a stored dropout mask per dropout). Here each fused op is one
 * or two passes over memory, vectorised by the compiler, on `threads` OpenMP threads.
 *
 * Dropout masks are not stored: element i of a call with key (k0, k1) is kept when the top 16
 * bits of hash32(hash32(i ^ k0) + k1) reach `threshold` (= round(p * 65536)), so the backward
 * pass regenerates the forward's mask from the key alone, and the mask does not depend on the
 * number of threads. exp and erf are polynomial approximations (below) so that the loops
 * vectorise without libmvec; both are within a few 1e-7 of libm.
 *
 * Built by ernie_ft/kernels.py at first use (cc -O3 -march=native -fopenmp) and called through
 * ctypes on the buffers of contiguous Paddle tensors.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Chris Wellons' "lowbias32" integer hash. */
static inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* The dropout factor of element i: 0 or `scale`. Without dropout callers pass threshold 0 and
 * scale 1 (every element kept): a branch inside the loops would stop the vectoriser. */
static inline float keep(int64_t i, uint32_t k0, uint32_t k1, uint32_t threshold, float scale) {
  uint32_t h = hash32(hash32((uint32_t)i ^ k0) + (k1 ^ (uint32_t)(i >> 32)));
  return (h >> 16) >= threshold ? scale : 0.0f;
}

/* exp(x) for x <= 0 (every use here: softmax after subtracting the row maximum, exp(-x^2)), as
 * in Cephes' expf: 2^n * p(r) with r = x - n ln 2, |r| <= ln 2 / 2. Below -87.7 the exponent
 * bits are 0 and so is the result, as the masked scores (-1e4) need. Written without floorf,
 * fminf and data-dependent selects, which keep gcc from vectorising the loops. */
static inline float fast_exp(float x) {
  x = x < -88.0f ? -88.0f : x;
  x = x > 0.0f ? 0.0f : x;
  const int32_t k = (int32_t)(x * 1.44269504088896341f + 128.5f) - 128; /* round(x / ln 2) */
  const float n = (float)k;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = (uint32_t)(k + 127) << 23;
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n); /* 2^k */
  return p * two_n;
}

/* erf(x) by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7). */
static inline float fast_erf(float x) {
  float a = fabsf(x);
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  float y = 1.0f - p * t * fast_exp(-a * a);
  return copysignf(y, x);
}

#define SQRT_HALF 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f

/* y = x * mask (dropout, and its own gradient). */
void ef_dropout(const float *x, float *y, int64_t n, uint32_t k0, uint32_t k1, uint32_t threshold,
                float scale, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * keep(i, k0, k1, threshold, scale);
}

/* probs = softmax(x + key_mask) over rows of `cols`; out = probs * mask (skipped when threshold == 0).
 * key_mask is NULL or one row of `cols` additive values per `rows_per_mask` rows: attention's key-padding mask,
 * [batch, keys], over scores [batch, heads, queries, keys], added here rather than by a broadcasting op. */
void ef_softmax_dropout_fwd(const float *x, const float *key_mask, int64_t rows_per_mask, float *probs, float *out,
                            int64_t rows, int64_t cols, uint32_t k0, uint32_t k1, uint32_t threshold, float scale,
                            int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    float *pr = probs + r * cols;
    if (key_mask) { /* the masked scores go to probs, then are overwritten in place by their exponentials */
      const float *mr = key_mask + (r / rows_per_mask) * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) pr[c] = xr[c] + mr[c];
      xr = pr;
    }
    float m = -INFINITY, s = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) {
      float e = fast_exp(xr[c] - m);
      pr[c] = e;
      s += e;
    }
    const float inv = 1.0f / s;
    if (threshold) {
      float *o = out + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        pr[c] *= inv;
        o[c] = pr[c] * keep(r * cols + c, k0, k1, threshold, scale);
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) pr[c] *= inv;
    }
  }
}

/* dx = probs * (g - sum(g * probs)) with g = dout * mask. */
void ef_softmax_dropout_bwd(const float *probs, const float *dout, float *dx, int64_t rows, int64_t cols,
                            uint32_t k0, uint32_t k1, uint32_t threshold, float scale, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float *pr = probs + r * cols, *dr = dout + r * cols;
    float *d = dx + r * cols;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < cols; ++c) {
      float g = dr[c] * keep(r * cols + c, k0, k1, threshold, scale);
      d[c] = g;
      dot += g * pr[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = pr[c] * (d[c] - dot);
  }
}

/* out = gelu(x) * mask, gelu(x) = x * Phi(x) (the exact, erf form). */
void ef_gelu_dropout_fwd(const float *x, float *out, int64_t n, uint32_t k0, uint32_t k1, uint32_t threshold,
                         float scale, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float g = 0.5f * x[i] * (1.0f + fast_erf(x[i] * SQRT_HALF));
    out[i] = g * keep(i, k0, k1, threshold, scale);
  }
}

/* dx = dout * mask * (Phi(x) + x * phi(x)). */
void ef_gelu_dropout_bwd(const float *x, const float *dout, float *dx, int64_t n, uint32_t k0, uint32_t k1,
                         uint32_t threshold, float scale, int threads) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float cdf = 0.5f * (1.0f + fast_erf(v * SQRT_HALF));
    float pdf = fast_exp(-0.5f * v * v) * INV_SQRT_2PI;
    float g = dout[i] * keep(i, k0, k1, threshold, scale);
    dx[i] = g * (cdf + v * pdf);
  }
}

/* sum = residual + x * mask (or x alone when residual is NULL; then sum may alias x), and
 * y = layer_norm(sum) * w + b over rows of `cols`; keeps mean and 1/std per row for backward. */
void ef_add_dropout_layernorm_fwd(const float *residual, const float *x, const float *w, const float *b,
                                  float *sum, float *y, float *mean, float *rstd, int64_t rows, int64_t cols,
                                  float eps, uint32_t k0, uint32_t k1, uint32_t threshold, float scale,
                                  int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols;
    float *sr = sum + r * cols, *yr = y + r * cols;
    float total = 0.0f;
    if (residual) {
      const float *rr = residual + r * cols;
#pragma omp simd reduction(+ : total)
      for (int64_t c = 0; c < cols; ++c) {
        float v = rr[c] + xr[c] * keep(r * cols + c, k0, k1, threshold, scale);
        sr[c] = v;
        total += v;
      }
    } else {
#pragma omp simd reduction(+ : total)
      for (int64_t c = 0; c < cols; ++c) total += xr[c];
      sr = (float *)xr;
    }
    const float mu = total / (float)cols;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < cols; ++c) var += (sr[c] - mu) * (sr[c] - mu);
    const float inv = 1.0f / sqrtf(var / (float)cols + eps);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = (sr[c] - mu) * inv * w[c] + b[c];
    mean[r] = mu;
    rstd[r] = inv;
  }
}

/* Gradient of layer_norm: dsum from dy, and dw, db summed over rows. `partial` is zeroed scratch
 * of threads * 2 * cols floats for per-thread sums, added in thread order, so the result does
 * not depend on scheduling. */
void ef_layernorm_bwd(const float *sum, const float *w, const float *mean, const float *rstd, const float *dy,
                      float *dsum, float *dw, float *db, float *partial, int64_t rows, int64_t cols, int threads) {
#pragma omp parallel num_threads(threads)
  {
    int t = 0, nt = 1;
#ifdef _OPENMP
    t = omp_get_thread_num();
    nt = omp_get_num_threads();
#endif
    float *pw = partial + (size_t)t * 2 * cols, *pb = pw + cols;
    const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;
    for (int64_t r = begin; r < end; ++r) {
      const float *sr = sum + r * cols, *dr = dy + r * cols;
      float *d = dsum + r * cols;
      const float mu = mean[r], inv = rstd[r];
      float mean_g = 0.0f, mean_gx = 0.0f;
#pragma omp simd reduction(+ : mean_g, mean_gx)
      for (int64_t c = 0; c < cols; ++c) {
        float xhat = (sr[c] - mu) * inv;
        float g = dr[c] * w[c];
        mean_g += g;
        mean_gx += g * xhat;
        pw[c] += dr[c] * xhat;
        pb[c] += dr[c];
      }
      mean_g /= (float)cols;
      mean_gx /= (float)cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        float xhat = (sr[c] - mu) * inv;
        d[c] = (dr[c] * w[c] - mean_g - xhat * mean_gx) * inv;
      }
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    float sw = 0.0f, sb = 0.0f;
    for (int t = 0; t < threads; ++t) {
      sw += partial[(size_t)t * 2 * cols + c];
      sb += partial[(size_t)t * 2 * cols + cols + c];
    }
    dw[c] = sw;
    db[c] = sb;
  }
}
