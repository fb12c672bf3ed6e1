// Multi-scale deformable attention (RT-DETR v2, method "default"): per (batch, query, head) one
// warp. Lane j < levels*points holds one attention logit for the fp32 softmax; then lanes take
// channels and sum the bilinear samples (grid_sample, zeros padding, align_corners=False) in
// level-major, point-minor order, as transformers does.
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {
namespace {

template <class T>
__global__ void ms_deform_attn_k(const T* value, const T* off, const T* logits, const T* ref, const T* pscale, T* out,
                                 int B, int Lv, int Q, int C, DeformShape sh) {
  const int lane = threadIdx.x % 32;
  const int64_t wid = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int H = sh.heads, LP = sh.levels * sh.points;
  if (wid >= (int64_t)B * Q * H) return;
  const int h = wid % H;
  const int64_t bq = wid / H;  // b*Q + q
  const int b = static_cast<int>(bq / Q);
  const int d = C / H;
  // softmax over the LP logits of this head
  const T* lg = logits + bq * (H * LP) + h * LP;
  float my = lane < LP ? ld(lg, lane) : -INFINITY;
  float mx = warp_max(my);
  float e = lane < LP ? expf(my - mx) : 0.f;
  float w = e / warp_sum(e);
  const T* rf = ref + bq * 4;
  const float rx = ld(rf, 0), ry = ld(rf, 1), rw = ld(rf, 2), rh = ld(rf, 3);
  const T* of = off + bq * (H * LP * 2) + h * LP * 2;
  const T* vb = value + (int64_t)b * Lv * C + h * d;
  const int d_pad = (d + 31) / 32 * 32;  // whole warp stays in the loop for the shuffles
  for (int c = lane; c < d_pad; c += 32) {
    float acc = 0.f;
    for (int l = 0; l < sh.levels; ++l) {
      const int Hl = sh.H[l], Wl = sh.W[l];
      const T* vl = vb + (int64_t)sh.start[l] * C;
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
          if (x0 >= 0 && x0 < Wl) s += (1.f - fx) * (1.f - fy) * ld(vl, ((int64_t)y0 * Wl + x0) * C + c);
          if (x0 + 1 >= 0 && x0 + 1 < Wl) s += fx * (1.f - fy) * ld(vl, ((int64_t)y0 * Wl + x0 + 1) * C + c);
        }
        if (y0 + 1 >= 0 && y0 + 1 < Hl) {
          if (x0 >= 0 && x0 < Wl) s += (1.f - fx) * fy * ld(vl, ((int64_t)(y0 + 1) * Wl + x0) * C + c);
          if (x0 + 1 >= 0 && x0 + 1 < Wl) s += fx * fy * ld(vl, ((int64_t)(y0 + 1) * Wl + x0 + 1) * C + c);
        }
        acc += aw * s;
      }
    }
    if (c < d) st(out, bq * C + h * d + c, acc);
  }
}

}  // namespace

void ms_deform_attn(const void* value, const void* off, const void* logits, const void* ref, const void* pscale,
                    void* out, int B, int Lv, int Q, int C, const DeformShape& sh, bool half, cudaStream_t s) {
  if (sh.levels * sh.points > 32 || sh.levels > 8)
    throw Error("ms_deform_attn: levels*points must be <= 32 and levels <= 8 on CUDA");
  const int64_t warps = (int64_t)B * Q * sh.heads;
  const int per_block = 4;
  unsigned blocks = static_cast<unsigned>((warps + per_block - 1) / per_block);
  DF_DISPATCH(half, T,
              ms_deform_attn_k<T><<<blocks, per_block * 32, 0, s>>>((const T*)value, (const T*)off,
                                                                    (const T*)logits, (const T*)ref,
                                                                    (const T*)pscale, (T*)out, B, Lv, Q, C, sh));
  DF_CUDA_LAUNCH();
}

}  // namespace detforge::cuda
