// Concat, one launch per input: x[outer, inner] lands in y[outer, ld] at column `off`. The batch
// is folded into `outer` (batch outermost), so row concat (axis 0) and channel concat (axis 2)
// are the same copy.
//
// v4: 16-byte copies when inner, ld, off (in elements) and both pointers are multiples of 16
// bytes; the 2-byte scalar copy (kept for the rest) took 1.22 ms of the 13.3 ms fp16 batch-32
// forward on the H200 (CUPTI).
// v5: concat() copies up to kMaxConcatParts inputs in one launch (a thread per output element or
// pack finds its part among the parameters): at batch 1 the five concats of the r18vd forward
// were 12 concat_part launches of a 187-kernel, 1.0 ms forward (H200 CUPTI), each one mostly
// launch latency.
// v6: a part may be a nearest x2 upsampling of its source (ConcatPart::up): the CCFM's two
// upsample -> concat pairs become one launch each. The upsample kernels were 2.5 and 3.1 us on
// the encoder's critical path at batch 1 (H200 CUPTI timeline, fp16).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {
template <class T>
__global__ void concat_part_k(const T* x, T* y, int64_t outer, int64_t inner, int64_t ldy, int64_t off) {
  pdl_wait_and_release();
  const int64_t n = outer * inner;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = i / inner, j = i % inner;
    y[o * ldy + off + j] = x[i];
  }
}
// The same copy in 16-byte units (inner, ldy, off counted in packs). 32-bit index math when the
// sizes allow: the int64 divide is the costly part of a copy kernel.
template <class I>
__global__ void concat_part_vec_k(const uint4* x, uint4* y, I outer, I inner, I ldy, I off) {
  pdl_wait_and_release();
  const I n = outer * inner;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const I o = i / inner, j = i - o * inner;
    y[o * ldy + off + j] = x[i];
  }
}
// The parts of one concat, as kernel parameters, in the kernel's units (elements or packs).
// up[q]: part q is its source upsampled x2 (nearest); the output rows are then pixels of an
// [H, W] grid per image and the source's of an [H/2, W/2] one.
template <class I>
struct PartsArg {
  const void* src[kMaxConcatParts];
  I inner[kMaxConcatParts], off[kMaxConcatParts];
  bool up[kMaxConcatParts];
  int n;
  I H, W;
};

// The source row of output row o for an upsampled part.
template <class I>
__device__ __forceinline__ I up_row(I o, I H, I W) {
  const I b = o / (H * W), r = o - b * (H * W), y = r / W, x = r - y * W;
  return (b * (H / 2) + y / 2) * (W / 2) + x / 2;
}

// y[o, j] for every output element (or 16-byte pack, V = uint4) of y[outer, ld]: the part whose
// columns [off, off + inner) hold j supplies it; columns no part covers are left alone. V is a
// raw storage type (the copy is bit-exact). The part loop is unrolled so the parameters are
// read by constant index.
template <class V, class I>
__global__ void concat_k(PartsArg<I> a, V* y, I outer, I ld) {
  pdl_wait_and_release();
  const I n = outer * ld;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const I o = i / ld, j = i - o * ld;
    const V* src = nullptr;
    I inner = 0, off = 0;
    bool up = false;
#pragma unroll
    for (int q = 0; q < kMaxConcatParts; ++q)
      if (q < a.n && j >= a.off[q] && j < a.off[q] + a.inner[q]) {
        src = static_cast<const V*>(a.src[q]);
        inner = a.inner[q];
        off = a.off[q];
        up = a.up[q];
      }
    if (src) y[i] = src[(up ? up_row(o, a.H, a.W) : o) * inner + (j - off)];
  }
}

// div: elements per kernel unit (1, or the pack size).
template <class V, class I>
void launch_concat(const ConcatPart* parts, int n, void* y, int64_t outer, int64_t ld, int64_t div, int H, int W,
                   cudaStream_t s) {
  PartsArg<I> a{};
  a.n = n;
  a.H = static_cast<I>(H);
  a.W = static_cast<I>(W);
  for (int q = 0; q < n; ++q) {
    a.src[q] = parts[q].src;
    a.inner[q] = static_cast<I>(parts[q].inner / div);
    a.off[q] = static_cast<I>(parts[q].offset / div);
    a.up[q] = parts[q].up;
  }
  const int64_t total = outer * (ld / div);
  launch(concat_k<V, I>, blocks_for(total, 256), 256, 0, s, a, static_cast<V*>(y), static_cast<I>(outer),
         static_cast<I>(ld / div));
}

template <class V>
void launch_concat_any(const ConcatPart* parts, int n, void* y, int64_t outer, int64_t ld, int64_t div, int H,
                       int W, cudaStream_t s) {
  // 2^28: the most threads blocks_for launches (the grid-stride overshoot).
  if (outer * (ld / div) + (int64_t{1} << 28) < INT32_MAX)
    launch_concat<V, int>(parts, n, y, outer, ld, div, H, W, s);
  else
    launch_concat<V, int64_t>(parts, n, y, outer, ld, div, H, W, s);
}
}  // namespace

void concat(const ConcatPart* parts, int n_parts, void* y, int64_t outer, int64_t ld, bool half, cudaStream_t s,
            int H, int W) {
  if (n_parts < 0 || outer < 0 || ld < 0) throw Error("concat: negative size");
  bool any_up = false;
  for (int q = 0; q < n_parts; ++q) any_up = any_up || (parts[q].up && parts[q].inner > 0);
  if (any_up && (H <= 0 || W <= 0 || H % 2 || W % 2 || outer % ((int64_t)H * W)))
    throw Error("concat: an upsampled part needs an even H x W pixel grid that divides the " + std::to_string(outer) +
                " rows (got " + std::to_string(H) + " x " + std::to_string(W) + ")");
  for (int q = 0; q < n_parts; ++q) {
    const ConcatPart& p = parts[q];
    if (p.inner < 0 || p.offset < 0 || p.offset + p.inner > ld)
      throw Error("concat: part " + std::to_string(q) + " (columns " + std::to_string(p.offset) + " + " +
                  std::to_string(p.inner) + ") outside the " + std::to_string(ld) + " output columns");
    for (int r = 0; r < q; ++r)
      if (p.inner > 0 && parts[r].inner > 0 && p.offset < parts[r].offset + parts[r].inner &&
          parts[r].offset < p.offset + p.inner)
        throw Error("concat: parts " + std::to_string(r) + " and " + std::to_string(q) + " overlap");
  }
  ConcatPart used[kMaxConcatParts];
  int n = 0;
  for (int q = 0; q < n_parts; ++q) {
    if (parts[q].inner == 0) continue;
    if (n == kMaxConcatParts) {  // more parts than one launch takes: one copy per part
      if (any_up) throw Error("concat: at most " + std::to_string(kMaxConcatParts) + " parts with an upsampled one");
      for (int r = 0; r < n_parts; ++r)
        if (parts[r].inner > 0)
          concat_part(parts[r].src, y, outer, parts[r].inner, ld, parts[r].offset, half, s);
      return;
    }
    used[n++] = parts[q];
  }
  if (n == 0 || outer == 0) return;
  const int vec = half ? 8 : 4;
  bool vector = ld % vec == 0 && aligned16(y);
  for (int q = 0; q < n; ++q)
    vector = vector && used[q].inner % vec == 0 && used[q].offset % vec == 0 && aligned16(used[q].src);
  if (vector)
    launch_concat_any<uint4>(used, n, y, outer, ld, vec, H, W, s);
  else if (half)
    launch_concat_any<uint16_t>(used, n, y, outer, ld, 1, H, W, s);
  else
    launch_concat_any<uint32_t>(used, n, y, outer, ld, 1, H, W, s);
}

void concat_part(const void* x, void* y, int64_t outer, int64_t inner, int64_t ldy, int64_t off, bool half,
                 cudaStream_t s) {
  const int vec = half ? 8 : 4;
  if (inner % vec == 0 && ldy % vec == 0 && off % vec == 0 && aligned16(x) && aligned16(y)) {
    const int64_t pi = inner / vec, pl = ldy / vec, po = off / vec, n = outer * pi;
    // 32-bit indices when every index (and the grid-stride overshoot) stays below 2^31.
    if (outer * pl + (int64_t)(1 << 20) * 256 < (int64_t)INT32_MAX)
      launch(concat_part_vec_k<int>, blocks_for(n, 256), 256, 0, s, (const uint4*)x, (uint4*)y, (int)outer, (int)pi,
             (int)pl, (int)po);
    else
      launch(concat_part_vec_k<int64_t>, blocks_for(n, 256), 256, 0, s, (const uint4*)x, (uint4*)y, outer, pi, pl, po);
    return;
  }
  DF_DISPATCH(half, T,
              launch(concat_part_k<T>, blocks_for(outer * inner, 256), 256, 0, s, (const T*)x, (T*)y, outer, inner, ldy,
                     off));
}

}  // namespace detforge::cuda
