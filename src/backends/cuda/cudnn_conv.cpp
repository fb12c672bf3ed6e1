#include "backends/cuda/cudnn_conv.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {

void throw_cudnn(cudnnStatus_t st, const char* call, const std::string& what) {
  throw Error("cuDNN error in " + std::string(call) + " for " + what + ": " + cudnnGetErrorString(st));
}

namespace {
const char* kAlgoNames[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling",
                            "winograd", "winograd_nonfused"};
}

bool conv_plans_deterministic() {
  const char* v = std::getenv("DETFORGE_CUDA_CONV_DETERMINISTIC");
  return !(v && std::strcmp(v, "0") == 0);
}

CudnnConv::CudnnConv(cudnnHandle_t h, const ConvShape& s, bool half, size_t ws_limit, const std::string& what)
    : h_(h), what_(what) {
  const cudnnDataType_t dt = half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  const cudnnMathType_t math = half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  const char* w = what_.c_str();
  DF_CUDNN(cudnnCreateTensorDescriptor(&xd_), w);
  DF_CUDNN(cudnnCreateTensorDescriptor(&yd_), w);
  DF_CUDNN(cudnnCreateFilterDescriptor(&wd_), w);
  DF_CUDNN(cudnnCreateConvolutionDescriptor(&cd_), w);
  DF_CUDNN(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NHWC, dt, s.B, s.Ci, s.H, s.W), w);
  DF_CUDNN(cudnnSetTensor4dDescriptor(yd_, CUDNN_TENSOR_NHWC, dt, s.B, s.Co, s.Ho, s.Wo), w);
  DF_CUDNN(cudnnSetFilter4dDescriptor(wd_, dt, CUDNN_TENSOR_NHWC, s.Co, s.Ci, s.kh, s.kw), w);
  DF_CUDNN(cudnnSetConvolution2dDescriptor(cd_, s.pad, s.pad, s.stride, s.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT),
           w);
  DF_CUDNN(cudnnSetConvolutionMathType(cd_, math), w);
  int n, ho, wo, co;
  DF_CUDNN(cudnnGetConvolution2dForwardOutputDim(cd_, xd_, wd_, &n, &co, &ho, &wo), w);
  if (ho != s.Ho || wo != s.Wo || co != s.Co)
    throw Error("conv " + what_ + ": graph says output " + std::to_string(s.Ho) + "x" + std::to_string(s.Wo) +
                "x" + std::to_string(s.Co) + " but the attributes give " + std::to_string(ho) + "x" +
                std::to_string(wo) + "x" + std::to_string(co));

  int count = 0;
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  if (half) {
    DF_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h_, xd_, wd_, cd_, yd_, static_cast<int>(perf.size()), &count,
                                                    perf.data()),
             w);
  } else {
    // fp32 (FMA only) times the candidates: the heuristic's first choice for NHWC float at batch
    // 32 was convolve_common_engine_float_NHWC, 134 of the 186 ms forward on the H200 (CUPTI).
    DF_CUDNN(cudnnFindConvolutionForwardAlgorithm(h_, xd_, wd_, cd_, yd_, static_cast<int>(perf.size()), &count,
                                                  perf.data()),
             w);
  }
  const bool deterministic = conv_plans_deterministic();
  for (int i = 0; i < count; ++i) {
    const auto& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    // fp32 must never take a tensor-op (TF32) kernel; heuristics may propose one under a
    // different math type, so re-pin FMA and ask cuDNN whether the algorithm still applies.
    if (!half && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
    if (cudnnSetConvolutionMathType(cd_, math) != CUDNN_STATUS_SUCCESS) continue;
    size_t ws = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(h_, xd_, wd_, cd_, yd_, p.algo, &ws) != CUDNN_STATUS_SUCCESS)
      continue;
    if (ws > ws_limit) continue;
    algo_ = p.algo;
    ws_ = ws;
    return;
  }
  throw Error("conv " + what_ + ": cuDNN offers no " + (deterministic ? "deterministic " : "") +
              (half ? "fp16" : "fp32 (FMA, no TF32)") + " NHWC algorithm within " + std::to_string(ws_limit >> 20) + " MiB of workspace");
}

CudnnConv::~CudnnConv() {
  if (cd_) cudnnDestroyConvolutionDescriptor(cd_);
  if (wd_) cudnnDestroyFilterDescriptor(wd_);
  if (yd_) cudnnDestroyTensorDescriptor(yd_);
  if (xd_) cudnnDestroyTensorDescriptor(xd_);
}

const char* CudnnConv::algo_name() const {
  int a = static_cast<int>(algo_);
  return a >= 0 && a < 8 ? kAlgoNames[a] : "?";
}

void CudnnConv::run(const void* x, const void* w, void* y, void* ws, cudaStream_t s) const {
  fence_before_library(s);
  const float one = 1.f, zero = 0.f;
  DF_CUDNN(cudnnSetStream(h_, s), what_);
  DF_CUDNN(cudnnConvolutionForward(h_, &one, xd_, x, wd_, w, cd_, algo_, ws, ws_, &zero, yd_, y), what_);
}

}  // namespace detforge::cuda
