// Fused forward and backward of the Kronecker-factored layer on the CPU (float32): y = sum_f (A_f ⊗ B_f) x + bias.
//
// Why a kernel (issue 20): with BLAS, each of the layer's contractions is one call over all tokens, and every
// intermediate (N x p*t or N x q*r floats) and the output make a round trip through memory between calls; the
// products have sides of 8-48, where MKL runs far below its GEMM rate. Here each token's products run back to
// back while its X, intermediate and Y are in L1/L2: per token a handful of tiny matmuls, all through one
// register-blocked micro-kernel (`matmul`), each product oriented so that its output rows fill the vector lanes
// (`Plan`). The first factor starts from the bias; the factor gradients and the bias gradient are accumulated in
// small per-thread buffers.
//
// Layouts (lmstudy/krony/model.py, "Orientation"): x (N, q*t) read per token as X (q, t); A (f, p, q); B (f, r, t);
// y (N, p*r) written per token as Y (p, r). Per token and factor:
//   A first:  U = A X (p, t),        Y += U Bᵀ
//   B first:  W = X Bᵀ (q, r),       Y += A W
// and backward (dY (p, r) given):
//   A first:  dU = dY B (p, t);  dX += Aᵀ dU;  dA += dU Xᵀ;  dBᵀ += Uᵀ dY
//   B first:  dW = Aᵀ dY (q, r); dX += dW B;   dA += dY Wᵀ;  dB += dWᵀ X
// A first, forward keeps U for backward (recomputing it cost more than its round trip through memory); B first,
// backward recomputes W = X Bᵀ (cheaper than writing it and reading it back; benchmarks/README.md, 2026-11-27); the
// layer picks the order for training with that recompute counted (KroneckerLinear.fused_a_first).
// Backward, A first, runs dA += dU Xᵀ once per tile of tokens (K = tile * t instead of t): with t = 8-24 the p x q
// accumulators would otherwise make a round trip through L1/L2 every token; dX too, mostly (see dx_per_tile), and
// dBᵀ for one factor (db_per_tile).
// The vector code is written once against `Simd` (AVX-512 or AVX2 + FMA, whichever -march=native gives).
// Both directions prefetch the next token's inputs (and its outputs, for writing, where they are small) a slice at a
// time between this token's products, so that memory is read under the arithmetic.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define LMSTUDY_SIMD 1
#include <immintrin.h>
#endif

namespace {

// A matrix operand read element by element (the broadcast side of the micro-kernel): any strides, so a
// transposed view costs nothing.
struct Strided {
  const float* data;
  int64_t row_stride, col_stride;
  float at(int64_t i, int64_t k) const { return data[i * row_stride + k * col_stride]; }
};

// The vector instructions the kernel is written in, for the widest set the compiler targets (-march=native):
// AVX-512 (16 floats a register, 32 registers, masks free) or AVX2 + FMA (8 floats, 16 registers; AMD Zen 2/3,
// Intel's laptop and desktop chips since Alder Lake). WIDE_ROWS: rows of the 2-vector micro-kernel, as many as the
// registers hold (accumulators, two B vectors and a broadcast).
#if defined(__AVX512F__)
struct Simd {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int LANES = 16, WIDE_ROWS = 8;
  static Mask mask(int64_t valid) {  // the first `valid` lanes (all of them from 16 on, none below 1)
    return valid >= 16 ? static_cast<Mask>(0xFFFF) : valid <= 0 ? 0 : static_cast<Mask>((1u << valid) - 1u);
  }
  static Vec load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }  // zeros where masked off
  static Vec load_whole(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Mask m, Vec v) { _mm512_mask_storeu_ps(p, m, v); }
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec broadcast(float x) { return _mm512_set1_ps(x); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static constexpr bool PAD_TAILS = false;  // masked loads cost nothing here
  static constexpr bool QUARTER_MOVES = false;  // masked stores cost nothing either
  static void put_first4(float* p, Vec v, bool add) {  // p[0..3] = (p[0..3] if add) + v's first 4 lanes
    const __m128 low = _mm512_castps512_ps128(v);
    _mm_storeu_ps(p, add ? _mm_add_ps(low, _mm_loadu_ps(p)) : low);
  }
  static void keep_in_register(Vec&) {}
  // The 16 x 16 floats in r[0..15] (one row per register) transposed in place: 64 shuffles, no memory.
  static void transpose(Vec r[16]) {
    Vec t[16];
    for (int i = 0; i < 16; i += 2) {  // interleave row pairs: 32-bit elements
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // then pairs of pairs: 64-bit elements
      r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
      r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
      r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
      r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int i = 0; i < 4; ++i) {  // then 128-bit lanes, within each half of the rows
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; ++i) {  // and across the halves
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
  }
};
#elif defined(LMSTUDY_SIMD)
struct Simd {
  using Vec = __m256;
  // AVX2 has no mask registers: a lane mask in a vector, and whether it is whole, so that full columns take plain
  // loads and stores (a masked store costs many cycles on AMD's cores).
  struct Mask {
    __m256i lanes;
    bool full;
  };
  static constexpr int LANES = 8, WIDE_ROWS = 6;
  static Mask mask(int64_t valid) {  // the first `valid` lanes (all of them from 8 on, none below 1)
    const int n = static_cast<int>(std::clamp<int64_t>(valid, 0, 8));
    return {_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), n == 8};
  }
  static Vec load(const Mask& m, const float* p) {  // zeros where masked off
    return m.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m.lanes);
  }
  static Vec load_whole(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, const Mask& m, Vec v) {
    if (m.full) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m.lanes, v);
  }
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec broadcast(float x) { return _mm256_set1_ps(x); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  // A product's last vector of columns, when partial, is read from a zero-padded copy of B with plain loads
  // (column_block): in the micro-kernel's loop a masked load made 64 x 64 x 64 in L1 1.6x slower on AMD Zen 3.
  static constexpr bool PAD_TAILS = true;
  // A 4-float tail (t or q = 12) stored by put_transposed with a 128-bit move instead of vmaskmovps: the shared
  // base's c_fc's backward 7-8% faster on Zen 3 (benchmarks/README.md). In the micro-kernel the same branch made every
  // product slower (GCC's code for the whole kernel changed), so only there.
  static constexpr bool QUARTER_MOVES = true;
  static void put_first4(float* p, Vec v, bool add) {  // p[0..3] = (p[0..3] if add) + v's first 4 lanes
    const __m128 low = _mm256_castps256_ps128(v);
    _mm_storeu_ps(p, add ? _mm_add_ps(low, _mm_loadu_ps(p)) : low);
  }
  // Keeps a B vector in a register: GCC otherwise reloads it as a memory operand of every FMA, and with one load
  // per FMA the loads, not the FMAs, set the pace (64 x 64 x 64 in L1 on Zen 3: 38 -> 67 GFLOP/s).
  static void keep_in_register(Vec& v) { asm("" : "+x"(v)); }
  // The 8 x 8 floats in r[0..7] (one row per register) transposed in place: 24 shuffles, no memory.
  static void transpose(Vec r[8]) {
    Vec t[8], s[8];
    for (int i = 0; i < 8; i += 2) {  // interleave row pairs: (r0 r1) -> a0 b0 a1 b1 | a4 b4 a5 b5, ...
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // then pairs of pairs: a0 b0 c0 d0 | a4 b4 c4 d4, ...
      s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {  // and the 128-bit halves of rows 0-3 with those of rows 4-7
      r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
      r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
  }
};
#endif

// Floats per vector register: how wide a product's output rows should be to keep the micro-kernel's lanes busy.
#ifdef LMSTUDY_SIMD
constexpr int LANES = Simd::LANES;
#else
constexpr int LANES = 8;  // the portable loop: whatever the compiler makes of it
#endif

#ifdef LMSTUDY_SIMD
// C[ROWS, cols] = START + A[ROWS, K] * B[K, cols] for up to LANES * VECS columns (START: C's layout, or nullptr for
// zeros): ROWS x VECS accumulators in registers. Named variables, not an array: GCC spilled an accumulator array
// to the stack on every k (the whole layer was 2.4x slower). K_MAJOR: A's rows are adjacent (row stride 1, a
// transposed view), so step k reads A's column k at constant offsets from one pointer and the compiler folds each
// broadcast into its FMA as one fused instruction (AVX-512); with a pointer per row and an index, the CPU splits
// such an FMA in two, which limits the 1-vector kernel (up to 6% of the layer's time: benchmarks/README.md,
// 2026-11-27).
#define LMSTUDY_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
template <int ROWS, int VECS, bool K_MAJOR>
inline void micro_kernel(int64_t cols, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
                         const float* b, int64_t ldb, float* c, int64_t ldc, const float* start) {
  static_assert(ROWS >= 1 && ROWS <= 12 && (VECS == 1 || VECS == 2), "micro-kernel size");
  using Vec = Simd::Vec;
  const Simd::Mask m0 = Simd::mask(cols), m1 = Simd::mask(VECS == 2 ? cols - Simd::LANES : 0);
#define LMSTUDY_DECLARE(r)                                                              \
  Vec c##r##0 = Simd::zero(), c##r##1 = Simd::zero();                                  \
  const float* a##r = a + (r) * a_row_stride;                                          \
  if (ROWS > (r) && start != nullptr) {                                                \
    c##r##0 = Simd::load(m0, start + (r) * ldc);                                       \
    if constexpr (VECS == 2) c##r##1 = Simd::load(m1, start + (r) * ldc + Simd::LANES); \
  }
  LMSTUDY_ROWS(LMSTUDY_DECLARE)
#undef LMSTUDY_DECLARE
  for (int64_t k = 0; k < K; ++k) {
    // PAD_TAILS: B's rows hold whole vectors (column_block)
    Vec b0 = Simd::PAD_TAILS ? Simd::load_whole(b + k * ldb) : Simd::load(m0, b + k * ldb);
    Vec b1 = VECS == 1          ? Simd::zero()
             : Simd::PAD_TAILS ? Simd::load_whole(b + k * ldb + Simd::LANES)
                               : Simd::load(m1, b + k * ldb + Simd::LANES);
    Simd::keep_in_register(b0);
    if constexpr (VECS == 2) Simd::keep_in_register(b1);
    const int64_t offset = k * a_col_stride;
    const float* a_k = a + offset;  // K_MAJOR: A's column k
#define LMSTUDY_FMA(r)                                                  \
    if constexpr (ROWS > (r)) {                                         \
      const Vec a_rk = Simd::broadcast(K_MAJOR ? a_k[r] : a##r[offset]); \
      c##r##0 = Simd::fma(a_rk, b0, c##r##0);                           \
      if constexpr (VECS == 2) c##r##1 = Simd::fma(a_rk, b1, c##r##1);  \
    }
    LMSTUDY_ROWS(LMSTUDY_FMA)
#undef LMSTUDY_FMA
  }
#define LMSTUDY_STORE(r)                                                           \
  if constexpr (ROWS > (r)) {                                                      \
    Simd::store(c + (r) * ldc, m0, c##r##0);                                       \
    if constexpr (VECS == 2) Simd::store(c + (r) * ldc + Simd::LANES, m1, c##r##1); \
  }
  LMSTUDY_ROWS(LMSTUDY_STORE)
#undef LMSTUDY_STORE
}

// All rows of one block of columns, ROWS at a time, then the remainder.
template <int ROWS, int VECS, bool K_MAJOR>
void column_block(int64_t rows, int64_t width, int64_t K, const Strided& a, const float* b, int64_t ldb, float* c,
                  int64_t ldc, const float* start, bool b_slack) {
  if constexpr (Simd::PAD_TAILS) {
    // B's rows copied once, zero-padded to whole vectors (surplus lanes never stored); not when B has slack: then a
    // row's last vector reads into the next row or the slack, lanes that are never stored either.
    if (width % Simd::LANES != 0 && !b_slack) {
      thread_local std::vector<float> padded;
      const int64_t b_cols = (width + Simd::LANES - 1) / Simd::LANES * Simd::LANES;
      padded.assign(K * b_cols, 0.0f);
      for (int64_t k = 0; k < K; ++k) std::copy_n(b + k * ldb, width, padded.data() + k * b_cols);
      b = padded.data();
      ldb = b_cols;
    }
  }
  const int64_t rs = a.row_stride, cs = a.col_stride;
  int64_t i = 0;
  for (; i + ROWS <= rows; i += ROWS)
    micro_kernel<ROWS, VECS, K_MAJOR>(width, K, a.data + i * rs, rs, cs, b, ldb, c + i * ldc, ldc,
                                      start ? start + i * ldc : nullptr);
  const float* ai = a.data + i * rs;
  float* ci = c + i * ldc;
  const float* si = start ? start + i * ldc : nullptr;
  switch (rows - i) {  // fewer than ROWS rows left
#define LMSTUDY_REST(n)                                                                                    \
    case n:                                                                                                \
      if constexpr (n < ROWS) micro_kernel<n, VECS, K_MAJOR>(width, K, ai, rs, cs, b, ldb, ci, ldc, si); \
      break;
    LMSTUDY_REST(11) LMSTUDY_REST(10) LMSTUDY_REST(9) LMSTUDY_REST(8) LMSTUDY_REST(7) LMSTUDY_REST(6)
    LMSTUDY_REST(5) LMSTUDY_REST(4) LMSTUDY_REST(3) LMSTUDY_REST(2) LMSTUDY_REST(1)
#undef LMSTUDY_REST
    default: break;
  }
}

// Blocks of two vectors' columns with WIDE_ROWS rows (AVX-512: 32 columns x 8 rows, AVX2: 16 x 6), a last block of
// at most one vector's columns with 12 rows.
template <bool K_MAJOR>
void column_blocks(int64_t rows, int64_t cols, int64_t K, const Strided& a, const float* b, int64_t ldb, float* c,
                   int64_t ldc, const float* start, bool b_slack) {
  constexpr int64_t WIDE = 2 * Simd::LANES;
  int64_t j0 = 0;
  for (; j0 + Simd::LANES < cols; j0 += WIDE)
    column_block<Simd::WIDE_ROWS, 2, K_MAJOR>(rows, std::min<int64_t>(WIDE, cols - j0), K, a, b + j0, ldb, c + j0,
                                              ldc, start ? start + j0 : nullptr, b_slack);
  if (j0 < cols)
    column_block<12, 1, K_MAJOR>(rows, cols - j0, K, a, b + j0, ldb, c + j0, ldc, start ? start + j0 : nullptr,
                                 b_slack);
}
#endif

// C (rows x cols, row-major, leading dimension ldc) = START + A (rows x K, any strides) * B (K x cols, row-major, ldb),
// where START is a matrix with C's layout (C itself to accumulate, the bias to start from it) or nullptr for zeros:
// a fresh product needs no zeroing pass and Y no bias-copy pass. `b_slack`: B is one of the kernel's own buffers, with
// at least a vector of floats after its last row (with_slack), so that its rows can be read in whole vectors.
void matmul(int64_t rows, int64_t cols, int64_t K, const Strided& a, const float* b, int64_t ldb, float* c,
            int64_t ldc, const float* start, bool b_slack = false) {
#ifdef LMSTUDY_SIMD
  if (a.row_stride == 1) column_blocks<true>(rows, cols, K, a, b, ldb, c, ldc, start, b_slack);
  else column_blocks<false>(rows, cols, K, a, b, ldb, c, ldc, start, b_slack);
#else
  // Portable path (correct everywhere; the compiler vectorises the inner loop as it can).
  for (int64_t i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < cols; ++j) ci[j] = start ? start[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const float a_ik = a.at(i, k);
      const float* bk = b + k * ldb;
      for (int64_t j = 0; j < cols; ++j) ci[j] += a_ik * bk[j];
    }
  }
#endif
}

void matmul_acc(int64_t rows, int64_t cols, int64_t K, const Strided& a, const float* b, int64_t ldb, float* c,
                int64_t ldc, bool b_slack = false) {  // C += A B
  matmul(rows, cols, K, a, b, ldb, c, ldc, c, b_slack);
}

void matmul_new(int64_t rows, int64_t cols, int64_t K, const Strided& a, const float* b, int64_t ldb, float* c,
                int64_t ldc, bool b_slack = false) {  // C = A B
  matmul(rows, cols, K, a, b, ldb, c, ldc, nullptr, b_slack);
}

// A buffer of the kernel's own, with a vector of floats after its `size` (zeros): a matmul may read the rows of
// such a B in whole vectors (b_slack) instead of copying them into a zero-padded buffer.
std::vector<float> with_slack(int64_t size) { return std::vector<float>(size + LANES); }

Strided plain(const float* data, int64_t cols) { return {data, cols, 1}; }       // row-major (rows, cols)
Strided transposed(const float* data, int64_t cols) { return {data, 1, cols}; }  // (cols, rows) seen transposed

// dst (cols, rows) = srcᵀ, or += srcᵀ with `add`. With SIMD, LANES x LANES blocks transposed in registers (faster
// than a scalar loop; gathering src's columns was slower than the scalar loop).
void put_transposed(const float* src, int64_t rows, int64_t cols, float* dst, bool add) {
#ifdef LMSTUDY_SIMD
  constexpr int64_t L = Simd::LANES;
  Simd::Vec block[L];
  for (int64_t i0 = 0; i0 < rows; i0 += L) {
    const int64_t block_rows = std::min<int64_t>(L, rows - i0);
    const Simd::Mask row_mask = Simd::mask(block_rows);
    for (int64_t j0 = 0; j0 < cols; j0 += L) {
      const int64_t block_cols = std::min<int64_t>(L, cols - j0);
      const Simd::Mask col_mask = Simd::mask(block_cols);
      for (int64_t i = 0; i < L; ++i)
        block[i] = i < block_rows ? Simd::load(col_mask, src + (i0 + i) * cols + j0) : Simd::zero();
      Simd::transpose(block);
      for (int64_t j = 0; j < block_cols; ++j) {
        float* out = dst + (j0 + j) * rows + i0;
        if (Simd::QUARTER_MOVES && block_rows == 4) Simd::put_first4(out, block[j], add);
        else Simd::store(out, row_mask, add ? Simd::add(block[j], Simd::load(row_mask, out)) : block[j]);
      }
    }
  }
#else
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i) dst[j * rows + i] = (add ? dst[j * rows + i] : 0.0f) + src[i * cols + j];
#endif
}

void transpose_into(const float* src, int64_t rows, int64_t cols, float* dst) {  // dst (cols, rows) = srcᵀ
  put_transposed(src, rows, cols, dst, false);
}

// Every factor of m (f, rows, cols) transposed: (f, cols, rows). Here rather than `m.transpose(1, 2).contiguous()`,
// whose trip through torch's dispatcher cost about 12 microseconds a call, as much as a small layer's 1-token step.
torch::Tensor factor_transposes(const torch::Tensor& m) {
  const int64_t f = m.size(0), rows = m.size(1), cols = m.size(2);
  auto out = torch::empty({f, cols, rows}, m.options());
  const float* src = m.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  for (int64_t k = 0; k < f; ++k) transpose_into(src + k * rows * cols, rows, cols, dst + k * rows * cols);
  return out;
}

// dst (rows, cols, contiguous) = src (rows, cols, leading dimension ld_src), or += with `add`.
void put_block(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst, bool add) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* from = src + i * ld_src;
    float* to = dst + i * cols;
#ifdef LMSTUDY_SIMD
    for (int64_t j = 0; j < cols; j += Simd::LANES) {
      const Simd::Mask m = Simd::mask(cols - j);
      const Simd::Vec v = Simd::load(m, from + j);
      Simd::store(to + j, m, add ? Simd::add(v, Simd::load(m, to + j)) : v);
    }
#else
    for (int64_t j = 0; j < cols; ++j) to[j] = (add ? to[j] : 0.0f) + from[j];
#endif
  }
}

// sum (width) += the `count` rows of `rows` (count, width, contiguous). A plain loop, which GCC vectorises: with
// Simd's masked loads and stores per vector GPT-2 small's backward (3,072 floats a token) was slower.
void add_rows(float* sum, const float* rows, int64_t count, int64_t width) {
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < width; ++j) sum[j] += rows[i * width + j];
}

// Prefetches the next token's input rows and output rows (up to three streams each) in `slices` parts, one `slice()`
// between two of this token's products: memory is read while the micro-kernel computes, instead of stalling the
// token that reads it, and an output's lines are fetched for writing before its stores arrive.
// (All of it at the token's start, or two tokens ahead, was no faster: it stalls the same way.)
class NextTokenPrefetch {
 public:
  using Streams = std::initializer_list<std::pair<const float*, int64_t>>;
  void start(int slices, Streams reads, Streams writes = {}) {
    count_ = 0;
    add(slices, reads, false);
    add(slices, writes, true);
    slices_ = slices;
    slice_ = 0;
  }
  void slice() {
    if (slice_ >= slices_) return;
    ++slice_;
    for (int s = 0; s < count_; ++s) {
      Stream& stream = streams_[s];
      const int64_t until = std::min(stream.lines, stream.done + stream.step);
      for (int64_t line = stream.done; line < until; ++line) {  // a local counter: GCC stored a member every line
        if (stream.write) __builtin_prefetch(stream.data + line * 64, 1, 3);
        else __builtin_prefetch(stream.data + line * 64, 0, 3);
      }
      stream.done = until;
    }
  }

 private:
  struct Stream {
    const char* data;
    int64_t lines, step, done;  // step: lines per slice
    bool write;
  };
  // An output is prefetched only up to WRITE_MAX_FLOATS a token (4 KB): the shared base's Y (3 KB a token) was written
  // 17% faster with it, GPT-2 small's (12 KB) slower (bursts of 96 prefetches per slice; benchmarks/README.md).
  static constexpr int64_t WRITE_MAX_FLOATS = 1024;
  void add(int slices, Streams streams, bool write) {
    for (const auto& [data, floats] : streams) {
      const int64_t lines = (floats + 15) / 16, step = (lines + slices - 1) / slices;  // no division per slice
      if (floats > 0 && (!write || floats <= WRITE_MAX_FLOATS))
        streams_[count_++] = {reinterpret_cast<const char*>(data), lines, step, 0, write};
    }
  }
  Stream streams_[6];
  int count_ = 0, slices_ = 1, slice_ = 0;
};

void check_inputs(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b) {
  for (const auto* t : {&x, &a, &b}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == torch::kFloat32 && t->is_contiguous(),
                "the fused Kronecker kernel takes contiguous float32 CPU tensors");
  }
  TORCH_CHECK(x.dim() == 2 && a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "bad shapes");
  TORCH_CHECK(x.size(1) == a.size(2) * b.size(2), "x's width must be q * t");
}

// Share of the micro-kernel's lanes that a product `cols` wide keeps busy: a product whose output side is narrow
// (with 16 lanes: 8, 12, 24) is cheaper computed transposed when the other side fills the lanes better.
double lane_use(int64_t cols) { return static_cast<double>(cols) / (LANES * ((cols + LANES - 1) / LANES)); }

// How the per-token products are oriented for one call (fixed by the shapes, like the layer's order).
struct Plan {
  bool mid_t;  // A first: Uᵀ = Xᵀ Aᵀ (t, p) instead of U (p, t); B first: dWᵀ = dYᵀ A (r, q) instead of dW
  bool dx_t;   // compute dXᵀ (t, q) and add it transposed, instead of dX (q, t)
};

Plan make_plan(bool a_first, int64_t p, int64_t q, int64_t r, int64_t t) {
  if (a_first) return {lane_use(p) > lane_use(t), lane_use(q) > lane_use(t)};
  const bool dw_t = lane_use(q) >= lane_use(r) && lane_use(q) > lane_use(t);  // dXᵀ = Bᵀ dWᵀ needs dWᵀ
  return {dw_t, dw_t};
}

// One token's intermediate for one factor, as forward computes it: Uᵀ = Xᵀ Aᵀ (t, p) or U = A X (p, t) for A first,
// W = X Bᵀ (q, r) for B first. `a_t` is Aᵀ (q, p) and `b_t` Bᵀ (t, r), both with contiguous rows.
void intermediate(bool a_first, const Plan& plan, int64_t p, int64_t q, int64_t r, int64_t t, const float* xn,
                  const float* a, const float* a_t, const float* b_t, float* mid) {
  if (a_first && plan.mid_t) matmul_new(t, p, q, transposed(xn, t), a_t, p, mid, p);  // Uᵀ = Xᵀ Aᵀ (t, p)
  else if (a_first) matmul_new(p, t, q, plain(a, q), xn, t, mid, t);                  // U = A X (p, t)
  else matmul_new(q, r, t, plain(xn, t), b_t, r, mid, r);                             // W = X Bᵀ (q, r)
}

}  // namespace

// y (N, p*r) = sum_f (A_f ⊗ B_f) x_n + bias for every token. With `keep` and A first, also returns every token's
// intermediates (N, f, p*t: U or Uᵀ as the plan computes them) for backward; else an empty tensor (B first,
// backward recomputes W).
std::vector<torch::Tensor> kron_forward(torch::Tensor x, torch::Tensor a, torch::Tensor b, torch::Tensor bias,
                                        bool a_first, bool keep) {
  check_inputs(x, a, b);
  const int64_t n = x.size(0), f = a.size(0), p = a.size(1), q = a.size(2), r = b.size(1), t = b.size(2);
  const Plan plan = make_plan(a_first, p, q, r, t);
  const int64_t mid_size = a_first ? p * t : q * r;
  keep = keep && a_first;
  auto y = torch::empty({n, p * r}, x.options());
  auto mids = torch::empty({keep ? n : 0, f, mid_size}, x.options());
  float* mids_data = mids.data_ptr<float>();
  // (f, q, p): Aᵀ with contiguous rows, for Uᵀ = Xᵀ Aᵀ only (each torch call costs microseconds)
  auto a_t = a_first && plan.mid_t ? factor_transposes(a) : a;
  auto b_t = factor_transposes(b);  // (f, t, r): Bᵀ with contiguous rows, the micro-kernel's B side
  const float *xs = x.data_ptr<float>(), *as = a.data_ptr<float>(), *ats = a_t.data_ptr<float>();
  const float *bts = b_t.data_ptr<float>(), *bias_data = bias.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch = with_slack(keep ? 0 : mid_size);  // U (p, t) or Uᵀ (t, p); W (q, r)
    NextTokenPrefetch next;
    for (int64_t token = begin; token < end; ++token) {
      const float* xn = xs + token * q * t;
      float* yn = ys + token * p * r;
      const bool more = token + 1 < end;
      next.start(2 * f, {{xn + q * t, more ? q * t : 0}},  // reads, then writes: Y and the kept U
                 {{yn + p * r, more ? p * r : 0},
                  {mids_data + (token + 1) * f * mid_size, keep && more ? f * mid_size : 0}});
      for (int64_t k = 0; k < f; ++k) {
        const float *ak = as + k * p * q, *btk = bts + k * t * r;
        const float* y_start = k == 0 ? bias_data : yn;  // the first factor starts from the bias
        float* mid = keep ? mids_data + (token * f + k) * mid_size : scratch.data();
        next.slice();
        intermediate(a_first, plan, p, q, r, t, xn, ak, ats + k * q * p, btk, mid);
        next.slice();
        if (a_first) matmul(p, r, t, plan.mid_t ? transposed(mid, p) : plain(mid, t), btk, r, yn, r, y_start);  // Y += U Bᵀ
        else matmul(p, r, q, plain(ak, q), mid, r, yn, r, y_start, !keep);                                  // Y += A W
      }
    }
  });
  return {y, mids};
}

// Gradients of kron_forward: dx (N, q*t), da (f, p, q), db (f, r, t), dbias (p*r). `mids`: forward's (A first), or
// empty to recompute them.
std::vector<torch::Tensor> kron_backward(torch::Tensor dy, torch::Tensor x, torch::Tensor a, torch::Tensor b,
                                         torch::Tensor mids, bool a_first) {
  check_inputs(x, a, b);
  const bool kept = mids.size(0) != 0;
  TORCH_CHECK(!kept || (mids.is_contiguous() && mids.size(0) == x.size(0)), "mids must be forward's intermediates");
  const float* mids_data = mids.data_ptr<float>();
  dy = dy.contiguous();
  const int64_t n = x.size(0), f = a.size(0), p = a.size(1), q = a.size(2), r = b.size(1), t = b.size(2);
  const Plan plan = make_plan(a_first, p, q, r, t);
  const int64_t mid_size = a_first ? p * t : q * r;
  auto dx = torch::empty_like(x);  // the first factor writes it, the others add
  // Aᵀ and Bᵀ with contiguous rows, only to recompute the intermediates (each torch call costs microseconds)
  const torch::Tensor a_t = kept ? a : factor_transposes(a), b_t = kept ? b : factor_transposes(b);
  const float *xs = x.data_ptr<float>(), *as = a.data_ptr<float>(), *bs = b.data_ptr<float>();
  const float *ats = a_t.data_ptr<float>(), *bts = b_t.data_ptr<float>(), *dys = dy.data_ptr<float>();
  float* dxs = dx.data_ptr<float>();
  // One accumulator set per chunk of tokens (at most one chunk per thread), summed at the end.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n));
  const int64_t chunk_size = (n + chunks - 1) / chunks;
  // per chunk: dA (f, p, q), dB (f, r, t) (A first accumulates dBᵀ (f, t, r)), dbias (p*r); with one chunk they are
  // the gradients themselves, with no chunk index to select and no sum (each torch call costs microseconds)
  auto accumulators = [&](std::vector<int64_t> shape) {
    if (chunks > 1) shape.insert(shape.begin(), chunks);
    return torch::zeros(shape, a.options());
  };
  auto grad_a = accumulators({f, p, q}), grad_b = accumulators({f, a_first ? t : r, a_first ? r : t});
  auto grad_bias = accumulators({p * r});
  // A first: dA += dU Xᵀ runs once per tile of tokens, over the tile's dU side by side (p, tile * t) and Xᵀ stacked
  // (tile * t, q); a tile is about TILE_STEPS steps long (64 was faster than 32 and than 128).
  constexpr int64_t TILE_STEPS = 64;
  const int64_t tile = a_first ? (TILE_STEPS + t - 1) / t : 1, tile_k = tile * t;
  // A first, dX too is computed per tile (its rows or columns tile * t, not t): A is read once per tile, and dX's
  // rows fill the micro-kernel's two-vector blocks. Not when dX is per token already (q, t) with t a multiple of two
  // vectors: there the tile only adds a copy (AVX-512: the shared base's c_proj, t = 32, 7% slower; AVX2: GPT-2
  // small's schemes with t = 16, 2-3% slower).
  const bool dx_per_tile = a_first && (plan.dx_t || t % (2 * LANES) != 0);
  // A first with one factor and U kept (p, t) per token: dBᵀ += Uᵀ dY once per tile too, K = tile * p: the tile's U
  // rows and dY rows are adjacent in memory (U (N, p, t), dY (N, p, r)), so the accumulators make one round trip per
  // tile instead of one per token.
  const bool db_per_tile = a_first && f == 1 && kept && !plan.mid_t;
  at::parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    // dmid: A first, the tile's dU (f, p, tile_k); B first, dWᵀ or dW. mid_t: A first, Xᵀ of the tile (tile_k, q); B
    // first, Wᵀ (r, q). Both with slack: products read them as B in whole vectors.
    std::vector<float> dmid = with_slack(a_first ? f * p * tile_k : mid_size);
    std::vector<float> mid_t = with_slack(a_first ? tile_k * q : q * r);
    std::vector<float> dx_t(q * t), scratch(mid_size);                  // scratch: a recomputed U / Uᵀ / W
    std::vector<float> dx_tile(dx_per_tile ? tile_k * q : 0);           // the tile's dXᵀ or dX
    NextTokenPrefetch next;
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      float *ga = grad_a.data_ptr<float>() + chunk * f * p * q, *gb = grad_b.data_ptr<float>() + chunk * f * r * t;
      float* gbias = grad_bias.data_ptr<float>() + chunk * p * r;
      const int64_t begin = chunk * chunk_size, end = std::min(n, (chunk + 1) * chunk_size);
      for (int64_t token = begin; token < end; ++token) {
        const float* xn = xs + token * q * t;
        const float* dyn = dys + token * p * r;
        float* dxn = dxs + token * q * t;
        const bool last = token + 1 == end;
        next.start(4 * f, {{dyn + p * r, last ? 0 : p * r}, {xn + q * t, last ? 0 : q * t},
                           {mids_data + (token + 1) * f * mid_size, kept && !last ? f * mid_size : 0}},
                   {{dxn + q * t, last ? 0 : q * t}});
        const int64_t slot = (token - begin) % tile;  // A first: the token's place in its tile
        if (a_first) transpose_into(xn, q, t, mid_t.data() + slot * t * q);  // Xᵀ (t, q), the tile's rows slot*t..
        for (int64_t k = 0; k < f; ++k) {
          const float *ak = as + k * p * q, *bk = bs + k * r * t;
          float *gak = ga + k * p * q, *gbk = gb + k * r * t;
          const float* dx_start = k == 0 ? nullptr : dxn;
          const float* mid = kept ? mids_data + (token * f + k) * mid_size : scratch.data();  // U / Uᵀ / W
          if (!kept) intermediate(a_first, plan, p, q, r, t, xn, ak, ats + k * q * p, bts + k * t * r, scratch.data());
          next.slice();
          if (a_first) {
            const Strided u_t = plan.mid_t ? plain(mid, p) : transposed(mid, t);       // Uᵀ (t, p)
            float* du = dmid.data() + k * p * tile_k + slot * t;                       // dU (p, t), row stride tile_k
            matmul_new(p, t, r, plain(dyn, r), bk, t, du, tile_k);                     // dU = dY B (p, t)
            if (!dx_per_tile) matmul(q, t, p, transposed(ak, q), du, tile_k, dxn, t, dx_start, true);  // dX += Aᵀ dU
            next.slice();
            if (!db_per_tile) matmul_acc(t, r, p, u_t, dyn, r, gbk, r);               // dBᵀ += Uᵀ dY (t, r)
            next.slice();
            if (slot == tile - 1 || last) {  // the tile's dA and dX, its tokens' dU side by side
              const int64_t count = slot + 1, steps = count * t, first = token - slot;
              const float* du_tile = dmid.data() + k * p * tile_k;                    // (p, tile_k)
              matmul_acc(p, q, steps, plain(du_tile, tile_k), mid_t.data(), q, gak, q, true);  // dA += [dU..] [Xᵀ; ..]
              if (db_per_tile)  // dBᵀ += [U; U; ..]ᵀ [dY; dY; ..] (t, r), K = count * p
                matmul_acc(t, r, count * p, transposed(mids_data + first * p * t, t), dys + first * p * r, r, gbk, r);
              next.slice();
              if (plan.dx_t) {  // [dXᵀ; dXᵀ; ..] = [dU dU ..]ᵀ A (steps, q): A read once per tile
                matmul_new(steps, q, p, {du_tile, 1, tile_k}, ak, q, dx_tile.data(), q);
                for (int64_t i = 0; i < count; ++i)
                  put_transposed(dx_tile.data() + i * t * q, t, q, dxs + (first + i) * q * t, k > 0);
              } else if (dx_per_tile) {  // [dX dX ..] = Aᵀ [dU dU ..] (q, steps): rows of steps, not of t
                matmul_new(q, steps, p, transposed(ak, q), du_tile, tile_k, dx_tile.data(), tile_k, true);
                for (int64_t i = 0; i < count; ++i)
                  put_block(dx_tile.data() + i * t, q, t, tile_k, dxs + (first + i) * q * t, k > 0);
              }
            } else {
              next.slice();
            }
          } else {
            float* dw = dmid.data();
            Strided dw_t;                                                             // dWᵀ (r, q)
            if (plan.mid_t) {
              matmul_new(r, q, p, transposed(dyn, r), ak, q, dw, q);                  // dWᵀ = dYᵀ A (r, q)
              dw_t = plain(dw, q);
              next.slice();
              matmul_new(t, q, r, transposed(bk, t), dw, q, dx_t.data(), q, true);    // dXᵀ = Bᵀ dWᵀ (t, q)
              put_transposed(dx_t.data(), t, q, dxn, k > 0);
            } else {
              matmul_new(q, r, p, transposed(ak, q), dyn, r, dw, r);                  // dW = Aᵀ dY (q, r)
              dw_t = transposed(dw, r);
              next.slice();
              matmul(q, t, r, plain(dw, r), bk, t, dxn, t, dx_start);                 // dX += dW B
            }
            transpose_into(mid, q, r, mid_t.data());                                  // Wᵀ (r, q)
            next.slice();
            matmul_acc(p, q, r, plain(dyn, r), mid_t.data(), q, gak, q, true);        // dA += dY Wᵀ
            next.slice();
            matmul_acc(r, t, q, dw_t, xn, t, gbk, t);                                 // dB += dWᵀ X
          }
        }
        // dbias += the tile's dY rows (B first: the token's), read from cache by now (dU / dW read them)
        if (slot == tile - 1 || last) add_rows(gbias, dys + (token - slot) * p * r, slot + 1, p * r);
      }
    }
  });
  auto da = chunks == 1 ? grad_a : grad_a.sum(0), db = chunks == 1 ? grad_b : grad_b.sum(0);
  auto dbias = chunks == 1 ? grad_bias : grad_bias.sum(0);
  if (a_first) db = factor_transposes(db);  // dBᵀ (f, t, r) -> dB (f, r, t)
  return {dx, da, db, dbias};
}

// The layer's autograd function, in C++ rather than a Python torch.autograd.Function, so that backward runs with no
// Python frame: the layer's fixed cost a step (forward + backward, the same at any batch size) fell by a third,
// 0.28-0.34 to 0.18-0.23 ms at the shared base's dims (benchmarks/README.md, 2026-11-27, sixth session).
// y (..., p*r) from x (..., q*t): the leading dimensions are flattened here, so that the caller adds no view nodes to
// the graph. `keep`: gradients will be wanted (A first, forward keeps U for them).
struct KronFunction : public torch::autograd::Function<KronFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& a,
                               const torch::Tensor& b, const torch::Tensor& bias, bool a_first, bool keep) {
    std::vector<int64_t> sizes = x.sizes().vec();
    const torch::Tensor flat = x.reshape({-1, sizes.back()}).contiguous(), a_c = a.contiguous(), b_c = b.contiguous();
    auto outputs = kron_forward(flat, a_c, b_c, bias.contiguous(), a_first, keep);  // y (N, p*r), kept U
    ctx->save_for_backward({flat, a_c, b_c, outputs[1]});
    ctx->saved_data["a_first"] = a_first;
    ctx->saved_data["x_sizes"] = sizes;
    sizes.back() = outputs[0].size(1);
    return outputs[0].view(sizes);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_y) {
    const auto saved = ctx->get_saved_variables();  // x (N, q*t), A, B, U
    const torch::Tensor dy = grad_y[0].reshape({-1, grad_y[0].size(-1)});
    auto grads = kron_backward(dy, saved[0], saved[1], saved[2], saved[3], ctx->saved_data["a_first"].toBool());
    return {grads[0].view(ctx->saved_data["x_sizes"].toIntVector()), grads[1], grads[2], grads[3], torch::Tensor(),
            torch::Tensor()};
  }
};

torch::Tensor kron_apply(const torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& b,
                         const torch::Tensor& bias, bool a_first, bool keep) {
  return KronFunction::apply(x, a, b, bias, a_first, keep);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("apply", &kron_apply, "the fused Kronecker layer, differentiable (CPU, float32)");
  m.def("forward", &kron_forward, "fused Kronecker layer forward (CPU, float32)");
  m.def("backward", &kron_backward, "fused Kronecker layer backward (CPU, float32)");
}
