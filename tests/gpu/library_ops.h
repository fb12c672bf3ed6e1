// Library ops (cuDNN fused convs, cuBLASLt GEMMs) on fp16 device buffers, outside the engine, for
// the tests that run them beside or behind other kernels (test_cuda_library_overlap.cpp,
// test_cuda_library_waits.cpp).
#pragma once
#include <cudnn.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cuda/cublaslt_linear.h"
#include "backends/cuda/cudnn_fused_conv.h"
#include "gpu_test_util.h"

namespace detforge::test {

using cuda::ConvShape;

// One library op on fp16 device buffers: its input (one of kInputs versions copied in before each
// launch), weights, bias, output and private workspace.
constexpr int kInputs = 6;

struct Op {
  std::string name;
  std::unique_ptr<DevBuf> x, w, b, y;
  void* xp = nullptr;                       // the input the op reads: x, or another op's
  std::vector<std::unique_ptr<DevBuf>> xs;  // the input versions (none when it reads another op's)
  void* ws = nullptr;
  size_t ws_bytes = 0;
  size_t y_elems = 0;
  std::function<void(cudaStream_t)> launch;
  ~Op() { cudaFree(ws); }
  std::vector<uint16_t> output() const {
    std::vector<uint16_t> h(y_elems);
    cudaMemcpy(h.data(), y->get(), y_elems * 2, cudaMemcpyDeviceToHost);
    return h;
  }
  void use_input(int k, cudaStream_t s) const {
    if (!xs.empty()) cudaMemcpyAsync(xp, xs[k]->get(), x_elems * 2, cudaMemcpyDeviceToDevice, s);
  }
  void read_input_of(const Op& other) {
    xs.clear();
    x.reset();
    xp = other.xp;
  }
  size_t x_elems = 0;
};

inline void add_inputs(Op& op, size_t n, uint32_t seed) {
  op.x_elems = n;
  op.x = std::make_unique<DevBuf>(n, true);
  op.xp = op.x->get();
  for (int k = 0; k < kInputs; ++k) op.xs.push_back(std::make_unique<DevBuf>(random_vec(n, -1, 1, seed + k), true));
}

inline std::unique_ptr<Op> conv_op(cudnnHandle_t h, const ConvShape& s, graph::Act act, uint32_t seed) {
  auto op = std::make_unique<Op>();
  add_inputs(*op, static_cast<size_t>(s.B) * s.H * s.W * s.Ci, seed);
  op->w = std::make_unique<DevBuf>(random_vec(static_cast<size_t>(s.Co) * s.kh * s.kw * s.Ci, -0.1f, 0.1f, seed + 50), true);
  op->b = std::make_unique<DevBuf>(random_vec(s.Co, -0.5f, 0.5f, seed + 51), true);
  op->y_elems = static_cast<size_t>(s.B) * s.Ho * s.Wo * s.Co;
  op->y = std::make_unique<DevBuf>(op->y_elems, true);
  std::string why, plan;
  std::shared_ptr<cuda::FusedConv> fc =
      cuda::make_fused_conv(h, s, true, false, act, size_t{64} << 20, &why, nullptr, &plan);
  if (!fc) throw std::runtime_error("no fused conv plan: " + why);
  op->name = "conv " + std::to_string(s.kh) + "x" + std::to_string(s.kw) + "/" + std::to_string(s.stride) + " " +
             std::to_string(s.Ci) + "->" + std::to_string(s.Co) + " at " + std::to_string(s.H) + " (" + plan + ")";
  op->ws_bytes = fc->workspace_bytes();
  cudaMalloc(&op->ws, std::max<size_t>(op->ws_bytes, 256));
  Op* o = op.get();
  op->launch = [o, fc](cudaStream_t st) { fc->run(o->xp, o->w->get(), o->b->get(), nullptr, o->y->get(), o->ws, st); };
  return op;
}

inline std::unique_ptr<Op> gemm_op(cublasLtHandle_t h, int M, int N, int K, uint32_t seed) {
  auto op = std::make_unique<Op>();
  add_inputs(*op, static_cast<size_t>(M) * K, seed);
  op->w = std::make_unique<DevBuf>(random_vec(static_cast<size_t>(N) * K, -0.1f, 0.1f, seed + 50), true);
  op->b = std::make_unique<DevBuf>(random_vec(N, -0.5f, 0.5f, seed + 51), true);
  op->y_elems = static_cast<size_t>(M) * N;
  op->y = std::make_unique<DevBuf>(op->y_elems, true);
  auto lin = std::make_shared<cuda::LtLinear>(h, M, N, K, true, true, false, false, size_t{32} << 20,
                                              "overlap test gemm");
  op->name = "cuBLASLt gemm " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
  op->ws_bytes = lin->workspace_bytes();
  cudaMalloc(&op->ws, std::max<size_t>(op->ws_bytes, 256));
  Op* o = op.get();
  op->launch = [o, lin](cudaStream_t st) { lin->run(o->xp, o->w->get(), o->b->get(), nullptr, o->y->get(), o->ws, st); };
  return op;
}

inline ConvShape shape(int H, int Ci, int Co, int k, int stride, int pad) {
  ConvShape s;
  s.H = s.W = H;
  s.Ci = Ci;
  s.Co = Co;
  s.kh = s.kw = k;
  s.stride = stride;
  s.pad = pad;
  s.Ho = s.Wo = (H + 2 * pad - k) / stride + 1;
  return s;
}

}  // namespace detforge::test
