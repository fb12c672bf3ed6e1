// Multi-head attention core, softmax(scale * q k^T) v per head, for the short sequences of
// RT-DETR (400 tokens in AIFI, 300 queries in the decoder). Softmax statistics are fp32.
//
// Fast path (head dim <= 32, K and V of one head fit in shared memory): one block per (batch,
// head, 64 queries) stages K_h (rows padded to d+1 floats: lanes reading different rows hit
// different banks) and V_h in shared memory; a warp per query takes keys by lane for the scores,
// then channels by lane for the weighted sum. The first version (kept as the fallback) read K
// straight from global memory, a row per lane: 0.72 ms of a 2.09 ms fp16 batch-1 forward on the
// H200 (CUPTI), and 15.4 of 31.6 ms at batch 32.
//
// fp16 with head dim 32 (RT-DETR's 256 channels / 8 heads) takes the tensor-core kernels below
// (attention_split_k for small grids such as batch 1, attention_mma_k otherwise); fp32 keeps the exact-FMA paths (the fp32 build must stay within 1e-3 of
// transformers).
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/mma.cuh"

namespace detforge::cuda {
namespace {

constexpr int kWarps = 4;

template <class T>
__global__ void attention_k(const T* q, const T* k, const T* v, T* o, int L, int S, int C, int heads, float scale,
                            AttnLd rs) {
  pdl_wait_and_release();
  extern __shared__ float smem[];  // kWarps * S scores
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.z, h = blockIdx.y;
  const int i = blockIdx.x * kWarps + warp;
  if (i >= L) return;
  const int d = C / heads;
  float* sc = smem + warp * S;
  const T* qr = q + ((int64_t)b * L + i) * rs.q + h * d;
  const T* kb = k + (int64_t)b * S * rs.k + h * d;
  const T* vb = v + (int64_t)b * S * rs.v + h * d;
  float mx = -INFINITY;
  for (int j = lane; j < S; j += 32) {
    const T* kr = kb + (int64_t)j * rs.k;
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += ld(qr, c) * ld(kr, c);
    acc *= scale;
    sc[j] = acc;
    mx = fmaxf(mx, acc);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < S; j += 32) {
    float e = expf(sc[j] - mx);
    sc[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  const float inv = 1.f / sum;
  T* orow = o + ((int64_t)b * L + i) * C + h * d;
  for (int c = lane; c < d; c += 32) {
    float acc = 0.f;
    for (int j = 0; j < S; ++j) acc += sc[j] * ld(vb + (int64_t)j * rs.v, c);
    st(orow, c, acc * inv);
  }
}

constexpr int kFastWarps = 8, kFastQueries = 16;

// v2 of the fast path. v1 (64 queries per block, one dependent FMA chain per key) ran 0.45 ms of
// a 1.63 ms fp16 batch-1 forward on the H200: 56 blocks for 132 SMs and every score a chain of
// 32 dependent shared-memory loads. Now 16 queries per block (4x the blocks) and each lane
// scores 4 keys at once (4 independent chains sharing one broadcast load of q).
template <class T>
__global__ void attention_smem_k(const T* q, const T* k, const T* v, T* o, int L, int S, int C, int heads,
                                 float scale, AttnLd rs) {
  pdl_wait_and_release();
  extern __shared__ float sm[];
  const int d = C / heads;
  const int kst = d + 1;               // padded K row: lanes on different rows hit different banks
  float* Ks = sm;                      // S x (d+1)
  float* Vs = Ks + S * kst;            // S x d
  float* Ps = Vs + S * d;              // warps x S
  float* Qs = Ps + kFastWarps * S;     // warps x d
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = blockIdx.z, h = blockIdx.y;
  const T* kb = k + (int64_t)b * S * rs.k + h * d;
  const T* vb = v + (int64_t)b * S * rs.v + h * d;
  for (int idx = threadIdx.x; idx < S * d; idx += blockDim.x) {
    const int j = idx / d, c = idx % d;
    Ks[j * kst + c] = ld(kb, (int64_t)j * rs.k + c);
    Vs[j * d + c] = ld(vb, (int64_t)j * rs.v + c);
  }
  __syncthreads();
  float* P = Ps + warp * S;
  float* Qw = Qs + warp * d;
  const int q_end = min(L, (blockIdx.x + 1) * kFastQueries);
  for (int i = blockIdx.x * kFastQueries + warp; i < q_end; i += kFastWarps) {
    const T* qr = q + ((int64_t)b * L + i) * rs.q + h * d;
    if (lane < d) Qw[lane] = ld(qr, lane) * scale;
    __syncwarp();
    float mx = -INFINITY;
    for (int jb = 0; jb < S; jb += 128) {
      int j[4];
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int u = 0; u < 4; ++u) j[u] = min(jb + lane + 32 * u, S - 1);  // clamp: extra rows are discarded
      for (int c = 0; c < d; ++c) {
        const float qc = Qw[c];
#pragma unroll
        for (int u = 0; u < 4; ++u) acc[u] += qc * Ks[j[u] * kst + c];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (jb + lane + 32 * u < S) {
          P[jb + lane + 32 * u] = acc[u];
          mx = fmaxf(mx, acc[u]);
        }
    }
    mx = warp_max(mx);
    float sum = 0.f;
    for (int j = lane; j < S; j += 32) {
      const float e = expf(P[j] - mx);
      P[j] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    __syncwarp();
    if (lane < d) {
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
      int j = 0;
      for (; j + 3 < S; j += 4) {
        a0 += P[j] * Vs[j * d + lane];
        a1 += P[j + 1] * Vs[(j + 1) * d + lane];
        a2 += P[j + 2] * Vs[(j + 2) * d + lane];
        a3 += P[j + 3] * Vs[(j + 3) * d + lane];
      }
      for (; j < S; ++j) a0 += P[j] * Vs[j * d + lane];
      st(o, ((int64_t)b * L + i) * C + h * d + lane, (a0 + a1 + a2 + a3) / sum);
    }
    __syncwarp();
  }
}

// v4: fp16 tensor-core path (head dim 32, fp16 storage, 16-byte aligned rows). v3's fp32-FMA
// smem kernel took 2.95 ms of the 13.3 ms fp16 batch-32 forward (CUPTI, 4 calls): ~14 GFLOP
// that mma.sync does at a fraction of that. Flash-attention-2 layout: a warp owns 16 queries;
// S = Q K^T and O += P V are mma.sync m16n8k16 (fp16 inputs, fp32 accumulators); softmax is
// online over 64-key chunks in fp32 (exp2 with scale*log2e folded in); P is rounded to fp16 only
// as the mma input, the row sums use the fp32 values. K (row-major, rows padded to 40 halves) and
// V (transposed, rows padded so the fragment loads hit 32 distinct banks) of one (image, head)
// are staged once per block in shared memory, zero-filled up to the 64-key chunk boundary.
constexpr int kMmaD = 32, kMmaChunk = 64, kKStride = kMmaD + 8;  // halves

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo: the lower column index
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ int mma_s_pad(int S) { return (S + kMmaChunk - 1) / kMmaChunk * kMmaChunk; }

// The maxima of a quad's two rows (the 4 lanes of an mma quad hold the same two rows).
__device__ __forceinline__ void quad_max(float& a, float& b) {
  a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
  a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
  b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, 1));
  b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, 2));
}

// The A fragments (row-major 16 x 32) of one head's queries for mma16816: rows r0 and r1 of
// image b, head h; rows past L read as zero. tig: the lane's thread-in-group (lane & 3). ldq: the
// row stride of q in halves.
__device__ __forceinline__ void load_q_frags(uint32_t (&qa)[2][4], const __half* q, int b, int L, int ldq, int h,
                                             int r0, int r1, int tig) {
  const __half* p0 = q + ((int64_t)b * L + r0) * ldq + h * kMmaD;
  const __half* p1 = q + ((int64_t)b * L + r1) * ldq + h * kMmaD;
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    const int c = ks * 16 + tig * 2;
    qa[ks][0] = r0 < L ? *reinterpret_cast<const uint32_t*>(p0 + c) : 0u;
    qa[ks][1] = r1 < L ? *reinterpret_cast<const uint32_t*>(p1 + c) : 0u;
    qa[ks][2] = r0 < L ? *reinterpret_cast<const uint32_t*>(p0 + c + 8) : 0u;
    qa[ks][3] = r1 < L ? *reinterpret_cast<const uint32_t*>(p1 + c + 8) : 0u;
  }
}

__global__ void attention_mma_k(const __half* q, const __half* k, const __half* v, __half* o, int L, int S, int C,
                                float scale_log2, AttnLd rs) {
  pdl_wait_and_release();
  extern __shared__ uint4 sm_mma[];
  const int Sp = mma_s_pad(S);
  const int vst = Sp + 8;  // Vt row stride in halves: (vst / 2) % 32 == 4, so g*4 + tig covers 32 banks
  __half* Ks = reinterpret_cast<__half*>(sm_mma);  // Sp x kKStride
  __half* Vt = Ks + Sp * kKStride;                 // kMmaD x vst
  const int b = blockIdx.z, h = blockIdx.y;
  const __half* kb = k + (int64_t)b * S * rs.k + h * kMmaD;
  const __half* vb = v + (int64_t)b * S * rs.v + h * kMmaD;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // K: 16-byte copies, 4 per row (consecutive threads read one row's 64 contiguous bytes).
  for (int idx = threadIdx.x; idx < Sp * 4; idx += blockDim.x) {
    const int j = idx >> 2, c = idx & 3;
    const uint4 val = j < S ? *reinterpret_cast<const uint4*>(kb + (int64_t)j * rs.k + c * 8) : zero;
    *reinterpret_cast<uint4*>(Ks + j * kKStride + c * 8) = val;
  }
  // V transposed: a thread takes keys (2p, 2p+1) of 8 channels and writes 8 half2 words;
  // consecutive threads write consecutive words.
  uint32_t* Vt32 = reinterpret_cast<uint32_t*>(Vt);
  const int npairs = Sp / 2;
  for (int idx = threadIdx.x; idx < npairs * 4; idx += blockDim.x) {
    const int p = idx % npairs, c = idx / npairs, j = 2 * p;
    uint4 r0 = j < S ? *reinterpret_cast<const uint4*>(vb + (int64_t)j * rs.v + c * 8) : zero;
    uint4 r1 = j + 1 < S ? *reinterpret_cast<const uint4*>(vb + (int64_t)(j + 1) * rs.v + c * 8) : zero;
    const __half* h0 = reinterpret_cast<const __half*>(&r0);
    const __half* h1 = reinterpret_cast<const __half*>(&r1);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      __half2 w = __halves2half2(h0[e], h1[e]);
      Vt32[(c * 8 + e) * (vst / 2) + p] = *reinterpret_cast<uint32_t*>(&w);
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int q0 = (blockIdx.x * (blockDim.x / 32) + warp) * 16;
  if (q0 >= L) return;
  // Q fragments (A, row-major 16 x 32): rows q0+g and q0+g+8; rows past L read as zero.
  uint32_t qa[2][4];
  load_q_frags(qa, q, b, L, rs.q, h, q0 + g, q0 + g + 8, tig);
  float acc[4][4];  // O: 4 tiles of 8 channels; [0],[1] row g, [2],[3] row g+8
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // running max (log2 units), partial sums

  for (int kc = 0; kc < S; kc += kMmaChunk) {
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const __half* kr = Ks + (kc + nt * 8 + g) * kKStride + tig * 2;
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(kr + ks * 16);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(kr + ks * 16 + 8);
        mma16816(s[nt], qa[ks], b0, b1);
      }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kc + nt * 8 + tig * 2 + (e & 1);
        const float t = key < S ? s[nt][e] * scale_log2 : -INFINITY;
        s[nt][e] = t;
        if (e < 2) mx0 = fmaxf(mx0, t); else mx1 = fmaxf(mx1, t);
      }
    // The 4 lanes of a quad hold the same two rows.
    quad_max(mx0, mx1);
    // Every chunk holds at least one real key, so the new maxima are finite; exp2(-inf) = 0 on
    // the first chunk.
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float a0 = exp2f(m0 - n0), a1 = exp2f(m1 - n1);
    m0 = n0;
    m1 = n1;
    l0 *= a0;
    l1 *= a1;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      acc[nt][0] *= a0;
      acc[nt][1] *= a0;
      acc[nt][2] *= a1;
      acc[nt][3] *= a1;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - n0);
      s[nt][1] = exp2f(s[nt][1] - n0);
      s[nt][2] = exp2f(s[nt][2] - n1);
      s[nt][3] = exp2f(s[nt][3] - n1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
    // O += P V, 16 keys per step: two score tiles form one A fragment (the C and A layouts of
    // m16n8k16 line up), B from the transposed V.
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t pa[4] = {pack_half2(s[2 * ks][0], s[2 * ks][1]), pack_half2(s[2 * ks][2], s[2 * ks][3]),
                              pack_half2(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                              pack_half2(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const __half* vr = Vt + (nt * 8 + g) * vst + kc + ks * 16 + tig * 2;
        mma16816(acc[nt], pa, *reinterpret_cast<const uint32_t*>(vr), *reinterpret_cast<const uint32_t*>(vr + 8));
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = 1.f / l0, i1 = 1.f / l1;
  const int r0 = q0 + g, r1 = q0 + g + 8;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = h * kMmaD + nt * 8 + tig * 2;
    if (r0 < L)
      *reinterpret_cast<uint32_t*>(o + ((int64_t)b * L + r0) * C + c) = pack_half2(acc[nt][0] * i0, acc[nt][1] * i0);
    if (r1 < L)
      *reinterpret_cast<uint32_t*>(o + ((int64_t)b * L + r1) * C + c) = pack_half2(acc[nt][2] * i1, acc[nt][3] * i1);
  }
}

// v5: key-split variant of the tensor-core path for small grids (batch 1). v4 ran 16.3 us for
// AIFI (L = S = 400) and 12.4 us per decoder self-attention (L = S = 300) on the H200 (CUPTI,
// fp16 b1, whole forward 0.99 ms) for ~92 MFLOP: pure latency, as 80 blocks of 2 warps each
// staged all of K and V of one (image, head) and then walked 5-7 64-key chunks serially.
// Here a block of kSplitWarps = 8 warps owns 16 queries and warp w takes keys [w*kw, (w+1)*kw)
// (kw: S split in 16-key tiles, rounded up), flash-decoding style: each warp stages only its
// slice (cp.async, K and V row-major, rows padded to 40 halves: the K fragment loads and the
// ldmatrix.trans V loads are bank-conflict free), scores its whole slice in registers (no
// online rescaling, kw <= 8 * NT keys), and keeps its max m_w, row sum l_w and O_w in fp32.
// The partials are merged through shared memory: O = sum_w 2^(m_w - m) O_w / sum_w 2^(m_w - m)
// l_w. Grid ceil(L/16) x heads x B (152 blocks at L = 300, batch 1): more blocks than SMs,
// each with a short serial chain (48-64 keys per warp at S = 300-400). H200, fp16, batch 1,
// 100 launches in a CUDA graph: L = S = 300 5.0 us (v4 11.5 us), L = S = 400 5.8 us (v4
// 15.3 us); 4 warps per block gave 6.1 / 7.0 us. It stays ahead of v4 up to ~800 blocks (batch 4,
// L = 300: 11.9 vs 13.5 us) and falls behind beyond (batch 6: 15.8 vs 14.2 us): the launcher's
// block limit. Numerics as v4: fp32 softmax with exp2 and scale*log2e
// folded, P rounded to fp16 only as the mma operand.
constexpr int kSplitWarps = 8, kOStride = kMmaD + 8;  // merge buffer row stride (floats)

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sa));
}
__host__ __device__ inline int split_kw(int S) {  // keys per warp, a multiple of 16
  return ((S + 15) / 16 + kSplitWarps - 1) / kSplitWarps * 16;
}

template <int NT>  // at most NT 8-key tiles per warp
__global__ void __launch_bounds__(kSplitWarps * 32) attention_split_k(const __half* q, const __half* k,
                                                                      const __half* v, __half* o, int L, int S,
                                                                      int C, float scale_log2, AttnLd rs) {
  pdl_wait_and_release();
  extern __shared__ uint4 sm_split[];
  const int kw = split_kw(S);
  __half* Ks = reinterpret_cast<__half*>(sm_split);    // kSplitWarps*kw x kKStride
  __half* Vs = Ks + kSplitWarps * kw * kKStride;       // kSplitWarps*kw x kKStride (row-major V)
  float* Om = reinterpret_cast<float*>(Vs + kSplitWarps * kw * kKStride);  // warps x 16 x kOStride
  float* Mm = Om + kSplitWarps * 16 * kOStride;        // warps x 16 row maxima (log2 units)
  float* Lm = Mm + kSplitWarps * 16;                   // warps x 16 row sums
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tig = lane & 3;
  const int kbeg = warp * kw;
  const __half* kb = k + (int64_t)b * S * rs.k + h * kMmaD;
  const __half* vb = v + (int64_t)b * S * rs.v + h * kMmaD;
  // Stage this warp's K and V rows: 4 x 16 bytes per row; keys past S are zero (V must be finite:
  // their P is 0).
  for (int idx = lane; idx < kw * 4; idx += 32) {
    const int r = kbeg + (idx >> 2), c = (idx & 3) * 8;
    __half* kd = Ks + r * kKStride + c;
    __half* vd = Vs + r * kKStride + c;
    if (r < S) {
      cp_async16(smem_u32(kd), kb + (int64_t)r * rs.k + c, true);
      cp_async16(smem_u32(vd), vb + (int64_t)r * rs.v + c, true);
    } else {
      *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
    }
  }
  cp_async_commit();
  // Q fragments while the copies fly (rows past L read as zero; their outputs are not stored).
  const int q0 = blockIdx.x * 16, r0 = q0 + g, r1 = q0 + g + 8;
  uint32_t qa[2][4];
  load_q_frags(qa, q, b, L, rs.q, h, r0, r1, tig);
  cp_async_wait<0>();
  __syncwarp();

  const int ntw = min(NT, kw / 8);  // kw <= 8 * NT (checked by the launcher)
  float s[NT][4];
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    if (nt < ntw) {
      const __half* kr = Ks + (kbeg + nt * 8 + g) * kKStride + tig * 2;
#pragma unroll
      for (int ks = 0; ks < 2; ++ks)
        mma16816(s[nt], qa[ks], *reinterpret_cast<const uint32_t*>(kr + ks * 16),
                 *reinterpret_cast<const uint32_t*>(kr + ks * 16 + 8));
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = kbeg + nt * 8 + tig * 2 + (e & 1);
      const float t = (nt < ntw && key < S) ? s[nt][e] * scale_log2 : -INFINITY;
      s[nt][e] = t;
      if (e < 2) mx0 = fmaxf(mx0, t); else mx1 = fmaxf(mx1, t);
    }
  }
  quad_max(mx0, mx1);
  // A warp whose slice lies wholly past S (small S) has mx = -inf: subtract 0 instead, so every
  // P is exp2(-inf) = 0 (not NaN) and the merge weight 2^(-inf - m) is 0.
  const float b0 = mx0 == -INFINITY ? 0.f : mx0, b1 = mx1 == -INFINITY ? 0.f : mx1;
  float l0 = 0.f, l1 = 0.f;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    s[nt][0] = exp2f(s[nt][0] - b0);
    s[nt][1] = exp2f(s[nt][1] - b0);
    s[nt][2] = exp2f(s[nt][2] - b1);
    s[nt][3] = exp2f(s[nt][3] - b1);
    l0 += s[nt][0] + s[nt][1];
    l1 += s[nt][2] + s[nt][3];
  }
  float acc[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  // O += P V, 16 keys per step; ldmatrix.trans gives the B fragments of two 8-channel tiles:
  // lane -> matrix lane/8 (keys +0/+8 by bit 0, channels +0/+8 by bit 1), row lane%8.
#pragma unroll
  for (int ks = 0; ks < NT / 2; ++ks) {
    if (2 * ks < ntw) {
      const uint32_t pa[4] = {pack_half2(s[2 * ks][0], s[2 * ks][1]), pack_half2(s[2 * ks][2], s[2 * ks][3]),
                              pack_half2(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                              pack_half2(s[2 * ks + 1][2], s[2 * ks + 1][3])};
      const int mi = lane >> 3, row = kbeg + ks * 16 + (mi & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bv[4];
        ldsm_x4_trans(bv, Vs + row * kKStride + np * 16 + (mi >> 1) * 8);
        mma16816(acc[2 * np], pa, bv[0], bv[1]);
        mma16816(acc[2 * np + 1], pa, bv[2], bv[3]);
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  // Partials to shared memory (row stride 40 floats: the float2 stores of a half-warp hit 32
  // distinct banks).
  float* ow = Om + warp * 16 * kOStride;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    *reinterpret_cast<float2*>(ow + g * kOStride + nt * 8 + tig * 2) = make_float2(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<float2*>(ow + (g + 8) * kOStride + nt * 8 + tig * 2) = make_float2(acc[nt][2], acc[nt][3]);
  }
  if (tig == 0) {
    Mm[warp * 16 + g] = mx0;
    Mm[warp * 16 + g + 8] = mx1;
    Lm[warp * 16 + g] = l0;
    Lm[warp * 16 + g + 8] = l1;
  }
  __syncthreads();
  // Merge: thread t < 128 -> row t/8, channels 4*(t%8) .. +3 (16 rows x 32 channels).
  static_assert(kSplitWarps >= 4, "the merge uses 128 threads");
  if (threadIdx.x >= 128) return;
  const int row = threadIdx.x >> 3, c4 = (threadIdx.x & 7) * 4;
  float m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kSplitWarps; ++w) m = fmaxf(m, Mm[w * 16 + row]);  // finite: warp 0 has keys
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  float lsum = 0.f;
#pragma unroll
  for (int w = 0; w < kSplitWarps; ++w) {
    const float f = exp2f(Mm[w * 16 + row] - m);
    const float4 ov = *reinterpret_cast<const float4*>(Om + (w * 16 + row) * kOStride + c4);
    lsum += f * Lm[w * 16 + row];
    sum.x += f * ov.x;
    sum.y += f * ov.y;
    sum.z += f * ov.z;
    sum.w += f * ov.w;
  }
  const int qi = q0 + row;
  if (qi < L) {
    const float inv = 1.f / lsum;
    uint2 pk;
    pk.x = pack_half2(sum.x * inv, sum.y * inv);
    pk.y = pack_half2(sum.z * inv, sum.w * inv);
    *reinterpret_cast<uint2*>(o + ((int64_t)b * L + qi) * C + h * kMmaD + c4) = pk;
  }
}

size_t attention_split_smem(int S) {
  const size_t rows = (size_t)kSplitWarps * split_kw(S);
  return sizeof(__half) * 2 * rows * kKStride + sizeof(float) * kSplitWarps * 16 * (kOStride + 2);
}

size_t attention_mma_smem(int S) {
  const size_t Sp = (size_t)(S + kMmaChunk - 1) / kMmaChunk * kMmaChunk;
  return sizeof(__half) * (Sp * kKStride + (size_t)kMmaD * (Sp + 8));
}

}  // namespace

void attention(const void* q, const void* k, const void* v, void* o, int B, int L, int S, int C, int heads,
               float scale, bool half, cudaStream_t s, AttnLd rs) {
  const int d = C / heads;
  if (rs.q == 0) rs.q = C;
  if (rs.k == 0) rs.k = C;
  if (rs.v == 0) rs.v = C;
  if (rs.q < C || rs.k < C || rs.v < C)
    throw Error("attention: row strides " + std::to_string(rs.q) + "/" + std::to_string(rs.k) + "/" +
                std::to_string(rs.v) + " below the width " + std::to_string(C));
  const size_t mma_smem = attention_mma_smem(S);
  const bool mma_ok = half && d == kMmaD && C % 8 == 0 && rs.q % 8 == 0 && rs.k % 8 == 0 && rs.v % 8 == 0 &&
                      aligned16(q) && aligned16(k) && aligned16(v) && aligned16(o) && L > 0 && S > 0;
  // v5 key split when the v4 grid would be small (v4's 2-warp test: fewer than two 4-warp blocks
  // per SM of a 132-SM H200), its own grid is at most 800 blocks (measured crossover, see
  // attention_split_k) and each warp's slice fits in 128 keys (S <= 1024).
  if (mma_ok && (int64_t)B * heads * ((L + 63) / 64) < 264 && (int64_t)B * heads * ((L + 15) / 16) <= 800 &&
      split_kw(S) <= 128) {
    const size_t smem = attention_split_smem(S);
    dim3 grid((L + 15) / 16, heads, B);
    const float sl2 = scale * 1.4426950408889634f;
    auto run = [&](auto kern) {
      if (smem > 48 * 1024)
        DF_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      launch(kern, grid, kSplitWarps * 32, smem, s, (const __half*)q, (const __half*)k, (const __half*)v, (__half*)o, L,
             S, C, sl2, rs);
    };
    if (split_kw(S) <= 64) run(attention_split_k<8>); else run(attention_split_k<16>);
    return;
  }
  if (mma_ok && mma_smem <= 200 * 1024) {
    // 4 warps (64 queries) per block when that still gives two blocks per SM on a 132-SM H200;
    // otherwise 2 warps, so batch 1 (8 heads x 300-400 queries) spreads over more SMs.
    const int warps = (int64_t)B * heads * ((L + 63) / 64) >= 264 ? 4 : 2;
    dim3 grid((L + 16 * warps - 1) / (16 * warps), heads, B);
    if (mma_smem > 48 * 1024)
      DF_CUDA(cudaFuncSetAttribute(attention_mma_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(mma_smem)));
    launch(attention_mma_k, grid, warps * 32, mma_smem, s, (const __half*)q, (const __half*)k, (const __half*)v,
           (__half*)o, L, S, C, scale * 1.4426950408889634f, rs);
    return;
  }
  const size_t fast_smem = sizeof(float) * ((size_t)S * (2 * d + 1) + (size_t)kFastWarps * (S + d));
  if (d <= 32 && fast_smem <= 200 * 1024) {
    dim3 grid((L + kFastQueries - 1) / kFastQueries, heads, B);
    DF_DISPATCH(half, T, {
      if (fast_smem > 48 * 1024)
        DF_CUDA(cudaFuncSetAttribute(attention_smem_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(fast_smem)));
      launch(attention_smem_k<T>, grid, kFastWarps * 32, fast_smem, s, (const T*)q, (const T*)k, (const T*)v, (T*)o, L,
             S, C, heads, scale, rs);
    });
    return;
  }
  dim3 grid((L + kWarps - 1) / kWarps, heads, B);
  size_t smem = sizeof(float) * kWarps * S;
  DF_DISPATCH(half, T, {
    if (smem > 48 * 1024) DF_CUDA(cudaFuncSetAttribute(attention_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(smem)));
    launch(attention_k<T>, grid, kWarps * 32, smem, s, (const T*)q, (const T*)k, (const T*)v, (T*)o, L, S, C, heads,
           scale, rs);
  });
}

}  // namespace detforge::cuda
