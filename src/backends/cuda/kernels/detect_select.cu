// Detection selection (Engine::run_images_selected): per image, the top_k logits at or above a
// floor among queries x classes, ranked by logit descending and equal logits by the lower flat
// index, with their boxes decoded to the image's pixels. One block per image.
// Why on the device: detect() downloaded all Q x C logits and ranked them on the host: 35-49 us
// a batch-1 call at 80 classes after the forward (H100, session 20), 32 times that at batch 32,
// and 3 MB of fp32 outputs to download there; the selection is ~6 KB an image.
// Pass 1 gathers the candidates (warp-aggregated shared-memory atomics: at a threshold of 0 all
// 24,000 logits pass). When more than top_k do, a radix select over the 64-bit key (logit order
// bits, then the flat index from the bottom) finds the k-th, and a second pass gathers exactly
// those at or above it. The k candidates are then ranked by counting (keys are distinct).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

#include <algorithm>
#include <string>

namespace detforge::cuda {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ uint32_t order_bits(float f) {
  uint32_t u = __float_as_uint(f == 0.f ? 0.f : f);  // -0 ties with +0, as on the host
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending unsigned == ascending float
}
__device__ __forceinline__ uint64_t key_of(float x, int i) {
  return (static_cast<uint64_t>(order_bits(x)) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

// Warp 0 finds, in hist[256], the bin where the r-th element lies counting from the top
// (from_top) or from the bottom, and leaves it and r less the elements before that bin in
// *bin and *r. Each lane owns 8 bins.
__device__ void pick_bin(const int* hist, bool from_top, int* bin, int* r) {
  const int lane = threadIdx.x;
  if (lane >= 32) return;
  const int base = from_top ? (31 - lane) * 8 : lane * 8;  // lane 0 holds the first bins visited
  int own = 0;
  for (int j = 0; j < 8; ++j) own += hist[base + j];
  int before = own;  // inclusive scan in visiting order
  for (int o = 1; o < 32; o <<= 1) {
    int v = __shfl_up_sync(0xffffffffu, before, o);
    if (lane >= o) before += v;
  }
  before -= own;
  const int want = *r;
  __syncwarp();
  for (int j = 0; j < 8; ++j) {
    const int b = from_top ? base + 7 - j : base + j;
    const int h = hist[b];
    if (before < want && before + h >= want) {
      *bin = b;
      *r = want - before;
    }
    before += h;
  }
}

struct Shared {
  uint64_t keys[kDetectSelectMaxK];
  int hist[256];
  int count, bin, remaining;
};

constexpr int kMaxImages = 64;  // per launch: their sizes travel in the kernel's parameters

struct Args {
  const float* logits;  // [B, nq * nc], this launch's first image
  const float* boxes;   // [B, nq, 4]
  uint32_t* out;        // detect_select_words(top_k) per image
  int nq, nc, top_k;
  float logit_floor;
  int width[kMaxImages], height[kMaxImages];
};

__global__ void __launch_bounds__(kThreads) detect_select_kernel(Args a) {
  __shared__ Shared sh;
  const int img = blockIdx.x;
  const int n = a.nq * a.nc, k = a.top_k, tid = threadIdx.x, lane = tid & 31;
  const float* lg = a.logits + static_cast<int64_t>(img) * n;
  const float floor = a.logit_floor;
  if (tid == 0) sh.count = 0;
  __syncthreads();
  // Pass 1: every candidate; the first k are kept (all of them when there are at most k).
  for (int i0 = 0; i0 < n; i0 += kThreads) {
    const int i = i0 + tid;
    const float x = i < n ? lg[i] : 0.f;
    const bool pass = i < n && x >= floor;
    const unsigned m = __ballot_sync(0xffffffffu, pass);
    int base = 0;
    if (lane == 0 && m) base = atomicAdd(&sh.count, __popc(m));
    base = __shfl_sync(0xffffffffu, base, 0);
    const int pos = base + __popc(m & ((1u << lane) - 1));
    if (pass && pos < k) sh.keys[pos] = key_of(x, i);
  }
  __syncthreads();
  int cand = sh.count;
  if (cand > k) {
    // Radix select of the k-th largest key: 4 passes over the order bits from the top, then the
    // tied logits' flat indices from the bottom (the lower index ranks first).
    uint32_t hi = 0, hi_mask = 0;
    if (tid == 0) sh.remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int j = tid; j < 256; j += kThreads) sh.hist[j] = 0;
      __syncthreads();
      for (int i = tid; i < n; i += kThreads) {
        const float x = lg[i];
        if (!(x >= floor)) continue;
        const uint32_t o = order_bits(x);
        if ((o & hi_mask) == hi) atomicAdd(&sh.hist[(o >> shift) & 255], 1);
      }
      __syncthreads();
      pick_bin(sh.hist, true, &sh.bin, &sh.remaining);
      __syncthreads();
      hi |= static_cast<uint32_t>(sh.bin) << shift;
      hi_mask |= 255u << shift;
    }
    const int bits = n > 1 ? 32 - __clz(n - 1) : 1;
    uint32_t lo = 0, lo_mask = 0;
    for (int shift = ((bits - 1) / 8) * 8; shift >= 0; shift -= 8) {
      for (int j = tid; j < 256; j += kThreads) sh.hist[j] = 0;
      __syncthreads();
      for (int i = tid; i < n; i += kThreads) {
        const float x = lg[i];
        if (!(x >= floor) || order_bits(x) != hi) continue;
        if ((static_cast<uint32_t>(i) & lo_mask) == lo) atomicAdd(&sh.hist[(i >> shift) & 255], 1);
      }
      __syncthreads();
      pick_bin(sh.hist, false, &sh.bin, &sh.remaining);
      __syncthreads();
      lo |= static_cast<uint32_t>(sh.bin) << shift;
      lo_mask |= 255u << shift;
    }
    // The k-th key is (hi, index lo): gather exactly the k keys at or above it.
    const uint64_t kth = (static_cast<uint64_t>(hi) << 32) | static_cast<uint32_t>(~lo);
    if (tid == 0) sh.count = 0;
    __syncthreads();
    for (int i0 = 0; i0 < n; i0 += kThreads) {
      const int i = i0 + tid;
      const float x = i < n ? lg[i] : 0.f;
      const uint64_t key = i < n && x >= floor ? key_of(x, i) : 0;
      const bool take = i < n && x >= floor && key >= kth;
      const unsigned m = __ballot_sync(0xffffffffu, take);
      int base = 0;
      if (lane == 0 && m) base = atomicAdd(&sh.count, __popc(m));
      base = __shfl_sync(0xffffffffu, base, 0);
      if (take) sh.keys[base + __popc(m & ((1u << lane) - 1))] = key;
    }
    __syncthreads();
    cand = k;
  }
  // Rank by counting the larger keys (all distinct), and write each entry at its rank.
  uint32_t* out = a.out + static_cast<int64_t>(img) * detect_select_words(k);
  if (tid == 0) out[0] = static_cast<uint32_t>(cand);
  const float* bx = a.boxes + static_cast<int64_t>(img) * a.nq * 4;
  const float sw = static_cast<float>(a.width[img]), shh = static_cast<float>(a.height[img]);
  for (int t = tid; t < cand; t += kThreads) {
    const uint64_t key = sh.keys[t];
    int rank = 0;
    for (int u = 0; u < cand; ++u) rank += sh.keys[u] > key;
    const int i = static_cast<int>(~static_cast<uint32_t>(key));
    const int q = i / a.nc;
    out[1 + rank] = static_cast<uint32_t>(i);
    out[1 + k + rank] = __float_as_uint(lg[i]);
    const float cx = bx[4 * q], cy = bx[4 * q + 1], hw = __fmul_rn(0.5f, bx[4 * q + 2]),
                hh = __fmul_rn(0.5f, bx[4 * q + 3]);
    // Rounded step by step (no contraction into an FMA): the bits of the host formula.
    uint32_t* b = out + 1 + 2 * k + 4 * rank;
    b[0] = __float_as_uint(__fmul_rn(__fsub_rn(cx, hw), sw));
    b[1] = __float_as_uint(__fmul_rn(__fsub_rn(cy, hh), shh));
    b[2] = __float_as_uint(__fmul_rn(__fadd_rn(cx, hw), sw));
    b[3] = __float_as_uint(__fmul_rn(__fadd_rn(cy, hh), shh));
  }
}

}  // namespace

void detect_select(const float* logits, const float* boxes, int nq, int nc, int top_k, float logit_floor,
                   const int* widths, const int* heights, int batch, uint32_t* out, cudaStream_t s) {
  if (top_k < 1 || top_k > kDetectSelectMaxK || batch < 0 || nq < 1 || nc < 1 ||
      static_cast<int64_t>(nq) * nc >= (int64_t{1} << 31))
    throw Error("detect_select: unsupported top_k " + std::to_string(top_k) + ", queries " + std::to_string(nq) +
                " or classes " + std::to_string(nc));
  const int64_t n = static_cast<int64_t>(nq) * nc;
  for (int b0 = 0; b0 < batch; b0 += kMaxImages) {
    const int nb = std::min(kMaxImages, batch - b0);
    Args a{logits + b0 * n, boxes + b0 * int64_t{4} * nq, out + b0 * int64_t{detect_select_words(top_k)}, nq, nc,
           top_k, logit_floor, {}, {}};
    for (int i = 0; i < nb; ++i) {
      a.width[i] = widths[b0 + i];
      a.height[i] = heights[b0 + i];
    }
    detect_select_kernel<<<nb, kThreads, 0, s>>>(a);
    DF_CUDA(cudaGetLastError());
  }
}

}  // namespace detforge::cuda
