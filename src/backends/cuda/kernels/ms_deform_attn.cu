// Multi-scale deformable attention (RT-DETR v2, method "default"): per (batch, query, head) one
// warp. Lane j < levels*points holds one attention logit for the fp32 softmax; then lanes take
// channels and sum the bilinear samples (grid_sample, zeros padding, align_corners=False) in
// level-major, point-minor order, as transformers does. Head dim 32/64 with 16-byte aligned
// value/out takes the vector path (ms_deform_attn_vec_k, below); other shapes this kernel.
// Offsets and logits are read one element at a time, row bq at off + bq * rs.off (DeformLd):
// they may be column slices of one merged projection at any element offset. Value token t of
// image b is at value + (b * Lv + t) * rs.value (a column slice of the merged value projection).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

template <class T>
__global__ void ms_deform_attn_k(const T* value, const T* off, const T* logits, const T* ref, const T* pscale, T* out,
                                 int B, int Lv, int Q, int C, DeformShape sh, DeformLd rs) {
  pdl_wait_and_release();
  const int lane = threadIdx.x % 32;
  const int64_t wid = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int H = sh.heads, LP = sh.levels * sh.points;
  if (wid >= (int64_t)B * Q * H) return;
  const int h = wid % H;
  const int64_t bq = wid / H;  // b*Q + q
  const int b = static_cast<int>(bq / Q);
  const int d = C / H;
  // softmax over the LP logits of this head
  const T* lg = logits + bq * rs.logits + h * LP;
  float my = lane < LP ? ld(lg, lane) : -INFINITY;
  float mx = warp_max(my);
  float e = lane < LP ? expf(my - mx) : 0.f;
  float w = e / warp_sum(e);
  const T* rf = ref + bq * 4;
  const float rx = ld(rf, 0), ry = ld(rf, 1), rw = ld(rf, 2), rh = ld(rf, 3);
  const T* of = off + bq * rs.off + h * LP * 2;
  const T* vb = value + (int64_t)b * Lv * rs.value + h * d;
  const int d_pad = (d + 31) / 32 * 32;  // whole warp stays in the loop for the shuffles
  for (int c = lane; c < d_pad; c += 32) {
    float acc = 0.f;
    for (int l = 0; l < sh.levels; ++l) {
      const int Hl = sh.H[l], Wl = sh.W[l];
      const T* vl = vb + (int64_t)sh.start[l] * rs.value;
      for (int p = 0; p < sh.points; ++p) {
        const int j = l * sh.points + p;
        const float aw = __shfl_sync(0xffffffffu, w, j);
        const float k = ld(pscale, j) * sh.offset_scale;
        const float lx = rx + ld(of, 2 * j) * k * rw;
        const float ly = ry + ld(of, 2 * j + 1) * k * rh;
        const float ix = lx * Wl - 0.5f, iy = ly * Hl - 0.5f;
        const float fx0 = floorf(ix), fy0 = floorf(iy);
        const int x0 = static_cast<int>(fx0), y0 = static_cast<int>(fy0);
        const float fx = ix - fx0, fy = iy - fy0;
        if (c >= d) continue;
        float s = 0.f;
        if (y0 >= 0 && y0 < Hl) {
          if (x0 >= 0 && x0 < Wl) s += (1.f - fx) * (1.f - fy) * ld(vl, ((int64_t)y0 * Wl + x0) * rs.value + c);
          if (x0 + 1 >= 0 && x0 + 1 < Wl) s += fx * (1.f - fy) * ld(vl, ((int64_t)y0 * Wl + x0 + 1) * rs.value + c);
        }
        if (y0 + 1 >= 0 && y0 + 1 < Hl) {
          if (x0 >= 0 && x0 < Wl) s += (1.f - fx) * fy * ld(vl, ((int64_t)(y0 + 1) * Wl + x0) * rs.value + c);
          if (x0 + 1 >= 0 && x0 + 1 < Wl) s += fx * fy * ld(vl, ((int64_t)(y0 + 1) * Wl + x0 + 1) * rs.value + c);
        }
        acc += aw * s;
      }
    }
    if (c < d) st(out, bq * C + h * d + c, acc);
  }
}

// v2 (vector path): RT-DETR's decoder shape (8 heads x 3 levels x 4 points, head dim 32, 300
// queries over 8400 value rows) took 14.7-15.4 us per call in v1 above on the H200 (CUPTI, fp16
// batch 1; x3 per forward of 0.99 ms): every lane walks the 12 points serially, each a location
// computation and 4 dependent 2-byte loads. Still one warp per (query, head), but the lanes split
// into NG = 32 / LPG groups of LPG = d / V lanes (V = 16 bytes of storage: 8 halves or 4 floats):
// lane = group * LPG + i, lane i of a group owns channels [i*V, i*V + V). Lane j < levels*points
// computes point j once (softmax weight times the 4 bilinear weights, zeroed outside the map, and
// the 4 corner rows); group g takes points g, g+NG, ... (two at a time, so 8 x 16-byte loads per
// lane are in flight) and gets them by shuffle. The NG partial sums meet by __shfl_xor_sync and
// group 0 stores V channels per lane with one 16-byte store. The point order differs from the
// level-major order of v1 (fp32 accumulation either way). H200, fp16, 100 launches in a CUDA
// graph: batch 1, d 32: 4.7 us (v1 14.8 us); d 64: 5.9 us (v1 26.2 us); batch 32: 89 us (v1 274).
template <class T>
__device__ __forceinline__ void acc_pack(float* acc, float w, const uint4& raw);
template <>
__device__ __forceinline__ void acc_pack<__half>(float* acc, float w, const uint4& raw) {
  const __half2* hv = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f = __half22float2(hv[e]);
    acc[2 * e] += w * f.x;
    acc[2 * e + 1] += w * f.y;
  }
}
template <>
__device__ __forceinline__ void acc_pack<float>(float* acc, float w, const uint4& raw) {
  acc[0] += w * __uint_as_float(raw.x);
  acc[1] += w * __uint_as_float(raw.y);
  acc[2] += w * __uint_as_float(raw.z);
  acc[3] += w * __uint_as_float(raw.w);
}

template <class T>
__global__ void ms_deform_attn_vec_k(const T* value, const T* off, const T* logits, const T* ref, const T* pscale,
                                     T* out, int B, int Lv, int Q, int C, DeformShape sh, DeformLd rs) {
  pdl_wait_and_release();
  constexpr int V = 16 / sizeof(T);
  const int lane = threadIdx.x % 32;
  const int64_t wid = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int H = sh.heads, LP = sh.levels * sh.points;
  if (wid >= (int64_t)B * Q * H) return;  // whole warps only
  const int h = wid % H;
  const int64_t bq = wid / H;
  const int b = static_cast<int>(bq / Q);
  const int d = C / H, LPG = d / V, NG = 32 / LPG;
  // Lane j < LP: logit, offsets and scale of point j (all loads independent, one element each:
  // no alignment beyond the element's own, so any column slice of a merged projection works).
  const bool pt = lane < LP;
  const T* lg = logits + bq * rs.logits + h * LP;
  const T* of = off + bq * rs.off + h * LP * 2;
  const T* rf = ref + bq * 4;
  const float my = pt ? ld(lg, lane) : -INFINITY;
  const float ox = pt ? ld(of, 2 * lane) : 0.f, oy = pt ? ld(of, 2 * lane + 1) : 0.f;
  const float ps = pt ? ld(pscale, lane) : 0.f;
  const float rx = ld(rf, 0), ry = ld(rf, 1), rw = ld(rf, 2), rh = ld(rf, 3);
  const float mx = warp_max(my);
  const float e = pt ? expf(my - mx) : 0.f;
  const float aw = e / warp_sum(e);
  // Level of point j by compile-time indexing (no local-memory copy of the parameter struct).
  const int lvl = pt ? lane / sh.points : 0;
  int Hl = 1, Wl = 1, st0 = 0;
#pragma unroll
  for (int l = 0; l < 8; ++l)
    if (l == lvl) {
      Hl = sh.H[l];
      Wl = sh.W[l];
      st0 = sh.start[l];
    }
  // Same location arithmetic as v1 (bit-identical sampling positions).
  const float kk = ps * sh.offset_scale;
  const float lx = rx + ox * kk * rw, ly = ry + oy * kk * rh;
  const float ix = lx * Wl - 0.5f, iy = ly * Hl - 0.5f;
  const float fx0 = floorf(ix), fy0 = floorf(iy);
  const int x0 = static_cast<int>(fx0), y0 = static_cast<int>(fy0);
  const float fx = ix - fx0, fy = iy - fy0;
  const bool vx0 = x0 >= 0 && x0 < Wl, vx1 = x0 + 1 >= 0 && x0 + 1 < Wl;
  const bool vy0 = y0 >= 0 && y0 < Hl, vy1 = y0 + 1 >= 0 && y0 + 1 < Hl;
  // Corner c = dy*2 + dx: weight (0 outside the map) and value row (-1 outside).
  float cw[4];
  int cr[4];
  cw[0] = pt && vy0 && vx0 ? aw * ((1.f - fx) * (1.f - fy)) : 0.f;
  cw[1] = pt && vy0 && vx1 ? aw * (fx * (1.f - fy)) : 0.f;
  cw[2] = pt && vy1 && vx0 ? aw * ((1.f - fx) * fy) : 0.f;
  cw[3] = pt && vy1 && vx1 ? aw * (fx * fy) : 0.f;
  cr[0] = pt && vy0 && vx0 ? st0 + y0 * Wl + x0 : -1;
  cr[1] = pt && vy0 && vx1 ? st0 + y0 * Wl + x0 + 1 : -1;
  cr[2] = pt && vy1 && vx0 ? st0 + (y0 + 1) * Wl + x0 : -1;
  cr[3] = pt && vy1 && vx1 ? st0 + (y0 + 1) * Wl + x0 + 1 : -1;

  const int grp = lane / LPG, li = lane % LPG;
  const T* vb = value + (int64_t)b * Lv * rs.value + h * d + li * V;
  float acc[V];
#pragma unroll
  for (int c = 0; c < V; ++c) acc[c] = 0.f;
  const int iters = (LP + NG - 1) / NG;  // uniform over the warp: the shuffles need every lane
  for (int it = 0; it < iters; it += 2) {
    float w[2][4];
    uint4 raw[2][4];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int j = grp + (it + u) * NG;
      const int src = j < LP ? j : 0;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float wc = __shfl_sync(0xffffffffu, cw[c], src);
        const int rc = __shfl_sync(0xffffffffu, cr[c], src);
        const bool use = j < LP && rc >= 0;
        w[u][c] = use ? wc : 0.f;
        raw[u][c] = use ? __ldg(reinterpret_cast<const uint4*>(vb + (int64_t)rc * rs.value)) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc_pack<T>(acc, w[u][c], raw[u][c]);
  }
  for (int o = LPG; o < 32; o <<= 1)
#pragma unroll
    for (int c = 0; c < V; ++c) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  if (grp == 0) {
    Pack<T> pk;
#pragma unroll
    for (int c = 0; c < V; ++c) pk.v[c] = static_cast<T>(acc[c]);
    *reinterpret_cast<Pack<T>*>(out + bq * C + h * d + li * V) = pk;
  }
}

// The vector path's conditions: head dim 32 or 64 (lanes per group a power of two), 16-byte
// aligned value/out with C and the value row stride multiples of the 16-byte pack. Offsets and
// logits take no part: the kernel loads them per element (scalar 2- or 4-byte loads), whatever
// their column and stride.
bool ms_deform_vec_ok(const void* value, const void* out, int C, int heads, bool half, int v_ld) {
  if (heads <= 0 || C % heads != 0) return false;
  const int d = C / heads, V = half ? 8 : 4;
  if (v_ld == 0) v_ld = C;
  return (d == 32 || d == 64) && C % V == 0 && v_ld % V == 0 && aligned16(value) && aligned16(out);
}

}  // namespace

bool ms_deform_attn_vec_path(const void* value, const void* out, int C, int heads, bool half, int v_ld) {
  return ms_deform_vec_ok(value, out, C, heads, half, v_ld);
}

void ms_deform_attn(const void* value, const void* off, const void* logits, const void* ref, const void* pscale,
                    void* out, int B, int Lv, int Q, int C, const DeformShape& sh, bool half, cudaStream_t s,
                    DeformLd rs) {
  if (sh.levels * sh.points > 32 || sh.levels > 8)
    throw Error("ms_deform_attn: levels*points must be <= 32 and levels <= 8 on CUDA");
  const int hlp = sh.heads * sh.levels * sh.points;
  if (rs.off == 0) rs.off = 2 * hlp;
  if (rs.logits == 0) rs.logits = hlp;
  if (rs.value == 0) rs.value = C;
  if (rs.off < 2 * hlp || rs.logits < hlp || rs.value < C)
    throw Error("ms_deform_attn: row strides " + std::to_string(rs.off) + "/" + std::to_string(rs.logits) + "/" +
                std::to_string(rs.value) + " below the widths " + std::to_string(2 * hlp) + "/" +
                std::to_string(hlp) + "/" + std::to_string(C));
  const int64_t warps = (int64_t)B * Q * sh.heads;
  const int per_block = 4;
  unsigned blocks = static_cast<unsigned>((warps + per_block - 1) / per_block);
  if (warps > 0 && ms_deform_vec_ok(value, out, C, sh.heads, half, rs.value)) {
    DF_DISPATCH(half, T,
                launch(ms_deform_attn_vec_k<T>, blocks, per_block * 32, 0, s, (const T*)value, (const T*)off,
                       (const T*)logits, (const T*)ref, (const T*)pscale, (T*)out, B, Lv, Q, C, sh, rs));
    return;
  }
  DF_DISPATCH(half, T,
              launch(ms_deform_attn_k<T>, blocks, per_block * 32, 0, s, (const T*)value, (const T*)off,
                     (const T*)logits, (const T*)ref, (const T*)pscale, (T*)out, B, Lv, Q, C, sh, rs));
}

}  // namespace detforge::cuda
