// Per-shape choice of the fp16 convolution kernel, measured at engine load on the engine's own
// buffers: cuDNN's fused plan against our implicit-GEMM variants (kernels/conv_igemm). The
// per-op profile of r18vd at batch 1 (bench/results/h200/ab-2026-12-02-streams) has cuDNN at
// ~3x the roofline on its small convolutions (0.515 of 0.99 ms), so each shape takes whichever
// is fastest there. An own variant is taken only when its output matches cuDNN's on the same
// random inputs, element by element (|a - b| <= 2e-2 * max(1, |b|)), so a wrong kernel can
// never win on speed.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_fused_conv.h"
#include "graph/ir.h"

namespace detforge::cuda {

// DETFORGE_CUDA_OWN_CONV: 0 = cuDNN/cuBLASLt only (the default; under DETFORGE_CUDA_TUNE=1 the
// default is 1 at margin 1.3), 1 = fastest verified, force = the
// fastest own variant whenever one supports the shape (tests use it to exercise the own kernels).
// History: in the 2026-12-02 H200 A/B (bench/results/h200/ab-2026-12-02-own-conv) the
// per-shape choice made batch 1 slower (0.956 vs 0.851 ms): the load-time timing ran each
// candidate 20 times back to back from the host, where cuBLASLt's and cuDNN's host-side launch
// cost (not paid inside the captured graph) made the library kernels look slower than they are.
// The candidates are now timed inside a captured graph (conv_select.cpp). With the wgmma
// families added (session 16, H100) mode 1 measured 0.6628 against 0.6663/0.6678 ms at batch 1
// and -0.6 % at batch 32: the spread between runs. At margin 1.3 together with the conv plan
// tunings it measured 2.8 % faster (session 27): DETFORGE_CUDA_TUNE=1, cached (cuda_tune_cache.cpp).
// direct = only the halo-tiled 3x3 kernels (kernels/conv_direct.h), each where it beats cuDNN's
// fused plan inside a captured graph; direct_force = those kernels wherever one supports the
// shape (tests). Every own choice is still checked against the library's output when one exists.
enum class OwnConvMode { off, fastest, force, direct, direct_force };
inline bool own_conv_forced(OwnConvMode m) { return m == OwnConvMode::force || m == OwnConvMode::direct_force; }
OwnConvMode own_conv_mode_from_env(OwnConvMode unset = OwnConvMode::off);
// DETFORGE_CUDA_OWN_CONV_MARGIN (default 1): in the timed modes (1, direct) a halo-tiled kernel
// (conv_direct, either family) is taken when its graph time is below margin x the library's (the
// implicit-GEMM variants, launched plainly, still need to be faster). Above 1 it favours the
// halo kernels, which are launched with programmatic dependent launch (their weight loads and block setup overlap the
// previous kernel's tail; the engine makes edges into cuDNN/cuBLASLt kernels full, so theirs
// cannot): session 15's direct_force, with some kernels slower alone than cuDNN, measured 0.6659
// against 0.6701 ms. Values outside [0.5, 2] throw detforge::Error.
double own_conv_margin_from_env(double unset = 1.0);

// Own conv variants in one index space: conv_igemm's [0, n) and conv_direct's from
// kDirectVariantBase. The engine stores this index per op (-1 = the library).
constexpr int kDirectVariantBase = 1000;
const char* own_conv_name(int v);  // throws detforge::Error for an index of neither family
size_t own_conv_workspace(const ConvShape& s, int v);
// Variant v (either family) supports `s`, runs on this GPU, and needs at most ws_bytes of workspace:
// what makes it a candidate (choose_conv) and a cached choice still usable (cuda_tune_cache.cpp).
bool own_conv_runs(const ConvShape& s, int v, size_t ws_bytes);
void run_own_conv(const void* x, const void* w, const void* bias, const void* res, void* y, const ConvShape& s,
              graph::Act act, int v, void* ws, cudaStream_t st);

struct ConvBuffers {
  void *x = nullptr, *res = nullptr, *y = nullptr;  // activations (x and res get random data)
  const void *w = nullptr, *bias = nullptr;         // the op's real weights
  void* ws = nullptr;
  size_t ws_bytes = 0;
  cudaStream_t stream = nullptr;
};

// y[rows, N] = x[rows, K] W[N, K]^T as a 1x1 convolution of one image of rows x 1 pixels.
inline ConvShape linear_as_conv(int64_t rows, int N, int K) {
  ConvShape s;
  s.B = 1;
  s.H = s.Ho = static_cast<int>(rows);
  s.W = s.Wo = 1;
  s.Ci = K;
  s.Co = N;
  return s;
}

struct ConvChoice {
  int variant = -1;  // -1: cuDNN
  double library_us = 0, chosen_us = 0;
  std::string name;  // chosen implementation ("library" or the own variant's name)
};

// GPU time per call of f as a captured forward sees it: 20 calls captured into one CUDA graph and
// replayed (the host-side cost of a library call is not counted). Synchronises s.
double graph_time_us(const std::function<void()>& f, cudaStream_t s);
std::vector<uint16_t> download_half(const void* p, size_t n, cudaStream_t s);
// Element by element, |a - b| <= 2e-2 * max(1, |b|) (fp16 values).
bool halves_close(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);
// Random fp16 values in [-1, 1) (fixed seeds) in a conv's input x and, when given, its residual,
// for timing candidates on real buffers; returns the output's element count. Synchronises st.
size_t randomize_conv_inputs(const ConvShape& s, void* x, void* res, cudaStream_t st);
// The candidate to take among `runs` (each writes the same output y): the fastest whose
// graph_time_us, times its `scale` entry when given (a handicap or a bonus per candidate), is
// below margin * *best_us (which it then lowers to that scaled time) and whose output matches
// `ref` (halves_close; no check when ref is empty). -1 when none beats *best_us. Synchronises st.
int fastest_matching(const std::vector<std::function<void()>>& runs, const std::vector<uint16_t>& ref, const void* y,
                     cudaStream_t st, double margin, double* best_us, const std::vector<double>* scale = nullptr);

// `reference` runs the library kernel (cuDNN's fused conv, or cuBLASLt for a linear seen as a
// 1x1 convolution) on the same buffers; it may be empty (no fused plan): then an own variant is
// taken, without a cross-check, only in force mode. Synchronises the stream.
ConvChoice choose_conv(const std::function<void()>& reference, const ConvShape& s, graph::Act act,
                       const ConvBuffers& b, OwnConvMode mode, double margin = 1.0);

}  // namespace detforge::cuda
