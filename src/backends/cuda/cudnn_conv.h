// One NHWC convolution for one batch size through cuDNN 9's descriptor API:
// y = conv(x, w) with w in KRSC (OHWI) layout. Bias, residual and activation are applied by the
// caller's epilogue kernel (cuDNN's fused bias+activation call offers only ReLU/identity, and
// the CCFM needs SiLU).
//
// Precision: fp32 runs with CUDNN_FMA_MATH so no TF32 tensor-core kernel is ever chosen (on
// Ampere and later CUDNN_DEFAULT_MATH permits TF32 for float data); fp16 stores half and
// accumulates in float (CUDNN_TENSOR_OP_MATH).
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace detforge::cuda {

struct ConvShape {
  int B = 1, H = 0, W = 0, Ci = 0, Co = 0, kh = 1, kw = 1, stride = 1, pad = 0, Ho = 0, Wo = 0;
};

// Whether convolution plans must be deterministic (DETFORGE_CUDA_CONV_DETERMINISTIC, default 1):
// plans that cuDNN marks non-deterministic (a split reduction through atomics) are skipped, so a
// replayed graph gives the same bits every time. Read at each plan choice (engine load).
bool conv_plans_deterministic();

class CudnnConv {
 public:
  // Throws detforge::Error naming `what` when no algorithm fits in ws_limit bytes.
  CudnnConv(cudnnHandle_t h, const ConvShape& s, bool half, size_t ws_limit, const std::string& what);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  size_t workspace_bytes() const { return ws_; }
  const char* algo_name() const;
  void run(const void* x, const void* w, void* y, void* ws, cudaStream_t s) const;

 private:
  cudnnHandle_t h_;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_{};
  size_t ws_ = 0;
  std::string what_;
};

[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* call, const std::string& what);

}  // namespace detforge::cuda

#define DF_CUDNN(call, what)                                                        \
  do {                                                                              \
    cudnnStatus_t df_st_ = (call);                                                  \
    if (df_st_ != CUDNN_STATUS_SUCCESS) ::detforge::cuda::throw_cudnn(df_st_, #call, what); \
  } while (0)
