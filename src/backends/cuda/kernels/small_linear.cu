// Linears with a tiny K or a tiny N, y = act(x W^T + b (+ res)), fp32 accumulation. At batch 1
// fp16 the decoder's query_pos_head.layers.0 (300 x K=4 -> N=512) and the bbox heads' last layer
// (300 x 256 -> 4; the encoder's 8400 x 256 -> 4) each took ~3-3.6 us in cuBLASLt's cutlass
// wmma kernels (8.6 us for the encoder's; H200 CUPTI, bench/results/h200/latest.json
// op_profile), most of it tile setup for a GEMM that is almost no work: a GEMM tile is wasted on
// a K of 4, and an N of 4 leaves all but 4 of a tile's columns empty. One launch of a plain
// kernel costs ~1.2-1.5 us in the captured graph.
#include <algorithm>
#include <string>
#include <type_traits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

constexpr int kThreads = 256;
// Rows per thread: 4 once that still leaves this many blocks (the H200 has 132 SMs), so that a
// large row count (batch 32) loads each weight chunk once per 4 rows and not per row; smaller
// row counts keep one row per thread, for the most loads in flight.
constexpr int64_t kMinBlocks = 128;

// Inputs through ldg_pack (common.cuh): every input is written by an earlier kernel and only read
// here (the PDL wait orders the two).

// Small K: a thread computes 8 consecutive outputs (one column group g of N / 8) for R rows.
// W's rows g*8 .. g*8+7 are 8*K contiguous elements (16*K or 32*K bytes, so 16-byte aligned),
// loaded once per thread as packs and kept in registers for its R rows; bias likewise. x is read
// as K scalars per row (the N / 8 threads of a row read the same bytes: L1 broadcasts).
// Threads in a warp take consecutive column groups of the same row: stores are coalesced.
template <class T, int K, int R>
__global__ void __launch_bounds__(kThreads)
    small_linear_smallk_k(const T* __restrict__ x, const Pack<T>* __restrict__ w, const Pack<T>* __restrict__ bias,
                          const Pack<T>* __restrict__ res, Pack<T>* __restrict__ y, int64_t rows, int groups,
                          int64_t tasks, graph::Act act) {
  pdl_wait_and_release();
  constexpr int P = Pack<T>::N;   // elements per pack: 8 (fp16) or 4 (fp32)
  constexpr int OP = 8 / P;       // packs per 8 outputs
  constexpr int WP = 8 * K / P;   // packs of W per column group (8 * K elements)
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < tasks; t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t rb = t / groups;
    const int g = static_cast<int>(t - rb * groups);
    Pack<T> wp[WP];
#pragma unroll
    for (int i = 0; i < WP; ++i) wp[i] = ldg_pack(w + (int64_t)g * WP + i);
    float b[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = 0.f;
    if (bias) {
#pragma unroll
      for (int i = 0; i < OP; ++i) {
        const Pack<T> bp = ldg_pack(bias + (int64_t)g * OP + i);
#pragma unroll
        for (int e = 0; e < P; ++e) b[i * P + e] = ld(bp.v, e);
      }
    }
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      const int64_t r = rb * R + rr;
      if (r >= rows) break;
      float xv[K];
#pragma unroll
      for (int k = 0; k < K; ++k) xv[k] = ld(x, r * K + k);
      float acc[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float a = 0.f;
#pragma unroll
        for (int k = 0; k < K; ++k) a = fmaf(xv[k], ld(wp[(j * K + k) / P].v, (j * K + k) % P), a);
        acc[j] = a + b[j];
      }
      const int64_t o = (r * groups + g) * OP;  // pack index of output (r, 8g)
#pragma unroll
      for (int i = 0; i < OP; ++i) {
        Pack<T> rp;
        if (res) rp = ldg_pack(res + o + i);
        Pack<T> out;
#pragma unroll
        for (int e = 0; e < P; ++e) {
          float v = acc[i * P + e];
          if (res) v += ld(rp.v, e);
          st(out.v, e, act_f(act, v));
        }
        y[o + i] = out;
      }
    }
  }
}

// Small N: G lanes (a power of two <= 32, aligned within the warp) share a row's K as 16-byte
// packs, p = lane, lane + G, ...; each lane keeps N partial sums per row and the G lanes add
// them with xor shuffles. A thread takes R rows (rows base + grp + i * groups_per_block, so the
// groups of a warp read neighbouring rows) and loads each W pack once for them. W (N * K
// elements) is read from L1/L2, not staged in shared memory: the groups of a warp read the same
// W bytes in the same instruction (one L1 request for them all), and staging would put a block
// barrier before the first FMA. The row loop is uniform per block (the shuffles need every lane
// of the warp); out-of-range rows compute zeros and store nothing.
template <class T, int N, int R>
__global__ void __launch_bounds__(kThreads)
    small_linear_smalln_k(const Pack<T>* __restrict__ x, const Pack<T>* __restrict__ w, const T* __restrict__ bias,
                          const T* __restrict__ res, T* __restrict__ y, int64_t rows, int Kp, int lg, graph::Act act) {
  pdl_wait_and_release();
  constexpr int P = Pack<T>::N;
  const int G = 1 << lg;
  const int lane = threadIdx.x & (G - 1);
  const int grp = threadIdx.x >> lg;
  const int gpb = blockDim.x >> lg;  // row groups per block
  const int64_t rows_per_block = (int64_t)gpb * R;
  for (int64_t base = blockIdx.x * rows_per_block; base < rows; base += (int64_t)gridDim.x * rows_per_block) {
    int64_t r[R];
    bool valid[R];
    float acc[R][N];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      r[i] = base + grp + (int64_t)i * gpb;
      valid[i] = r[i] < rows;
#pragma unroll
      for (int n = 0; n < N; ++n) acc[i][n] = 0.f;
    }
    // One row per thread: the (about 4) iterations' loads may all be in flight at once (2 for
    // N > 4, which spilled at 4 in fp16); with 4 rows one iteration already loads 4 + N packs.
    constexpr int kUnroll = R == 1 ? (N <= 4 ? 4 : 2) : 1;
#pragma unroll kUnroll
    for (int p = lane; p < Kp; p += G) {
      Pack<T> xp[R];
#pragma unroll
      for (int i = 0; i < R; ++i)
        if (valid[i]) xp[i] = ldg_pack(x + r[i] * Kp + p);
#pragma unroll
      for (int n = 0; n < N; ++n) {
        const Pack<T> wp = ldg_pack(w + (int64_t)n * Kp + p);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          if (!valid[i]) continue;
#pragma unroll
          for (int e = 0; e < P; ++e) acc[i][n] = fmaf(ld(xp[i].v, e), ld(wp.v, e), acc[i][n]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
      for (int n = 0; n < N; ++n)
        for (int o = G >> 1; o > 0; o >>= 1) acc[i][n] += __shfl_xor_sync(0xffffffffu, acc[i][n], o);
    // Every lane of the group holds the sums; the (row, n) outputs are spread over the lanes.
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (!valid[i]) continue;
#pragma unroll
      for (int n = 0; n < N; ++n) {
        if (((i * N + n) & (G - 1)) != lane) continue;
        float v = acc[i][n];
        if (bias) v += ld(bias, n);
        const int64_t o = r[i] * N + n;
        if (res) v += ld(res, o);
        st(y, o, act_f(act, v));
      }
    }
  }
}

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p <<= 1;
  return p;
}

template <class T, int K>
void launch_smallk(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int N,
                   Act act, cudaStream_t s) {
  const int groups = N / 8;
  const int64_t tasks4 = (rows + 3) / 4 * groups;
  auto go = [&](auto kern, int R) {
    const int64_t tasks = (rows + R - 1) / R * groups;
    launch(kern, blocks_for(tasks, kThreads), kThreads, 0, s, static_cast<const T*>(x),
           static_cast<const Pack<T>*>(w), static_cast<const Pack<T>*>(bias), static_cast<const Pack<T>*>(res),
           static_cast<Pack<T>*>(y), rows, groups, tasks, act);
  };
  if ((tasks4 + kThreads - 1) / kThreads >= kMinBlocks)
    go(small_linear_smallk_k<T, K, 4>, 4);
  else
    go(small_linear_smallk_k<T, K, 1>, 1);
}

// f(std::integral_constant<int, n>{}) for n in 1..8 (the kernels' compile-time K or N); false
// for other n.
template <class F>
bool with_1_to_8(int n, F&& f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 5: f(std::integral_constant<int, 5>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case 7: f(std::integral_constant<int, 7>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
  }
  return false;
}

template <class T>
void dispatch_smallk(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int N,
                     int K, Act act, cudaStream_t s) {
  if (!with_1_to_8(K, [&](auto k) { launch_smallk<T, decltype(k)::value>(x, w, bias, res, y, rows, N, act, s); }))
    throw Error("small_linear: K = " + std::to_string(K) + " is not in 1..8");
}

template <class T, int N>
void launch_smalln(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int K,
                   Act act, cudaStream_t s) {
  const int Kp = K / Pack<T>::N;
  // Lanes per row: about 4 packs per lane, as the G-lane shuffle reduction costs N * log2(G)
  // shuffles per row and each lane's loads are in flight together; doubled (up to one pack per
  // lane, at most a warp) while the grid has fewer than kMinBlocks blocks, so that a small row
  // count (300 at batch 1) still spreads over the SMs.
  const int G_max = std::min(32, pow2_at_least(Kp));
  int G = std::min(G_max, pow2_at_least((Kp + 3) / 4));
  auto blocks_of = [&](int g, int R) { return (rows + (int64_t)(kThreads / g) * R - 1) / ((int64_t)(kThreads / g) * R); };
  while (G < G_max && blocks_of(G, 1) < kMinBlocks) G *= 2;
  int lg = 0;
  while ((1 << lg) < G) ++lg;
  auto go = [&](auto kern, int R) {
    launch(kern, static_cast<unsigned>(std::min<int64_t>(blocks_of(G, R), 1 << 20)), kThreads, 0, s,
           static_cast<const Pack<T>*>(x), static_cast<const Pack<T>*>(w), static_cast<const T*>(bias),
           static_cast<const T*>(res), static_cast<T*>(y), rows, Kp, lg, act);
  };
  if (blocks_of(G, 4) >= kMinBlocks)
    go(small_linear_smalln_k<T, N, 4>, 4);
  else
    go(small_linear_smalln_k<T, N, 1>, 1);
}

template <class T>
void dispatch_smalln(const void* x, const void* w, const void* bias, const void* res, void* y, int64_t rows, int N,
                     int K, Act act, cudaStream_t s) {
  if (!with_1_to_8(N, [&](auto n) { launch_smalln<T, decltype(n)::value>(x, w, bias, res, y, rows, K, act, s); }))
    throw Error("small_linear: N = " + std::to_string(N) + " is not in 1..8");
}

}  // namespace

SmallLinear small_linear_kind(int64_t rows, int N, int K, bool half, const void* x, const void* w, const void* bias,
                              const void* res, const void* y) {
  const int es = half ? 2 : 4;
  if (rows < 1 || N < 1 || K < 1 || !x || !w || !y) return SmallLinear::none;
  if (K <= kSmallLinearMaxK && N % 8 == 0 && aligned16(w) && aligned16(y) && (!bias || aligned16(bias)) &&
      (!res || aligned16(res)))
    return SmallLinear::small_k;
  if (N <= kSmallLinearMaxN && (int64_t)K * es % 16 == 0 && aligned16(x) && aligned16(w)) return SmallLinear::small_n;
  return SmallLinear::none;
}

const char* small_linear_name(SmallLinear k) {
  switch (k) {
    case SmallLinear::small_k: return "small_k";
    case SmallLinear::small_n: return "small_n";
    case SmallLinear::tile: return "tile";
    default: return "none";
  }
}

void small_linear(SmallLinear kind, const void* x, const void* w, const void* bias, const void* res, void* y,
                  int64_t rows, int N, int K, Act act, bool half, cudaStream_t s) {
  if (kind == SmallLinear::none || small_linear_kind(rows, N, K, half, x, w, bias, res, y) != kind)
    throw Error(std::string("small_linear: ") + small_linear_name(kind) + " does not support rows " +
                std::to_string(rows) + ", N " + std::to_string(N) + ", K " + std::to_string(K) +
                " with these pointers");
  if (kind == SmallLinear::small_k) {
    DF_DISPATCH(half, T, dispatch_smallk<T>(x, w, bias, res, y, rows, N, K, act, s));
  } else {
    DF_DISPATCH(half, T, dispatch_smalln<T>(x, w, bias, res, y, rows, N, K, act, s));
  }
}

}  // namespace detforge::cuda
