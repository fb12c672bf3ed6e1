// A stream confined to a few SMs: a CUDA green context (driver API, CUDA 12.4+) holding an SM
// partition, and a stream in it. The engine runs work that is off the batch-1 critical path there
// (DETFORGE_CUDA_GREEN_SMS, cuda_settings.h). Why: every candidate that moved work off the path
// (distribute_adds v14, gather_early v17, split_concats v29, the value GEMMs v15) found it taking
// SMs from the path's latency-bound kernels instead (src/backends/cuda/NOTES.md). Work in a green
// context runs only on its partition; work in the primary context keeps every SM.
//
// The driver entry points are looked up at run time (cudaGetDriverEntryPointByVersion), so
// nothing links libcuda and a driver without green contexts only leaves `problem` set.
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace detforge::cuda {

class GreenStream {
 public:
  GreenStream() = default;
  // A partition of at least min_sms SMs of `device` (the driver rounds up: a multiple of 8 on
  // compute capability 9.0) and a non-blocking stream in it. On any failure stream() is null and
  // problem() says why.
  GreenStream(int device, int min_sms);
  ~GreenStream();
  GreenStream(const GreenStream&) = delete;
  GreenStream& operator=(const GreenStream&) = delete;

  cudaStream_t stream() const { return stream_; }
  int sms() const { return sms_; }  // SMs of the partition (0 without one)
  const std::string& problem() const { return problem_; }
  // An event of the green context (no timing), for cudaEventRecord on stream(): the driver
  // records an event only on a stream of the event's own context. Destroy with cudaEventDestroy.
  cudaEvent_t make_event() const;

 private:
  void* ctx_ = nullptr;  // CUgreenCtx
  cudaStream_t stream_ = nullptr;
  int sms_ = 0;
  std::string problem_;
};

// sm_probe.cu: out[b] = the SM that ran block b (%smid), for `blocks` blocks of 128 threads that
// each spin ~spin_cycles, so the blocks spread over every SM the stream may use.
void record_block_sms(unsigned* out, int blocks, long long spin_cycles, cudaStream_t s);

}  // namespace detforge::cuda
