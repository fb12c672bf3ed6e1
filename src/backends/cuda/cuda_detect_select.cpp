// CudaEngine::run_images_selected: detect()'s selection on the device (kernels/detect_select.cu),
// so that a call downloads ~6 KB an image instead of every output in fp32.
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"

namespace detforge::cuda {

bool CudaEngine::run_images_selected(const ImageU8* const* images, int batch, const ImageInputSpec& spec,
                                     const DetectionSelect& sel, std::vector<SelectedDetections>& out) {
  if (!gpu_select_) return false;
  const int n_out = static_cast<int>(g_.outputs.size());
  if (sel.logits_output < 0 || sel.logits_output >= n_out || sel.boxes_output < 0 || sel.boxes_output >= n_out)
    return false;
  const auto& ls = g_.tensor(g_.outputs[sel.logits_output]).shape;
  const auto& bs = g_.tensor(g_.outputs[sel.boxes_output]).shape;
  if (ls.size() != 2 || bs.size() != 2 || bs[0] != ls[0] || bs[1] != 4) return false;
  if (sel.top_k < 1 || sel.top_k > kDetectSelectMaxK) return false;
  if (pending_batch_) throw Error("cuda backend: run_images_selected() while a forward is in flight; call wait() first");
  const int nq = static_cast<int>(ls[0]), nc = static_cast<int>(ls[1]);
  queue_images(images, batch, spec);  // checks the spec and the batch
  const size_t words = detect_select_words(sel.top_k);
  if (sel.top_k > select_k_) {  // the first call, or a larger top_k
    DF_CUDA(cudaStreamSynchronize(stream_));
    cudaFree(d_select_);
    cudaFreeHost(h_select_);
    d_select_ = h_select_ = nullptr;
    select_k_ = 0;
    DF_CUDA(cudaMalloc(&d_select_, sizeof(uint32_t) * words * max_batch_));
    DF_CUDA(cudaMallocHost(&h_select_, sizeof(uint32_t) * words * max_batch_));
    select_k_ = sel.top_k;
  }
  select_w_.resize(batch);
  select_h_.resize(batch);
  for (int b = 0; b < batch; ++b) {
    select_w_[b] = images[b]->width;
    select_h_[b] = images[b]->height;
  }
  detect_select(d_out32_[sel.logits_output], d_out32_[sel.boxes_output], nq, nc, sel.top_k, sel.logit_floor,
                select_w_.data(), select_h_.data(), batch, d_select_, stream_);
  DF_CUDA(cudaMemcpyAsync(h_select_, d_select_, sizeof(uint32_t) * words * batch, cudaMemcpyDeviceToHost, stream_));
  DF_CUDA(cudaStreamSynchronize(stream_));
  out.resize(batch);
  for (int b = 0; b < batch; ++b) {
    const uint32_t* w = h_select_ + words * b;
    const int k = static_cast<int>(w[0]);
    if (k < 0 || k > sel.top_k) throw Error("cuda backend: detect_select returned " + std::to_string(k) + " entries");
    SelectedDetections& d = out[b];
    d.flat_index.assign(w + 1, w + 1 + k);
    d.logit.resize(k);
    std::memcpy(d.logit.data(), w + 1 + sel.top_k, sizeof(float) * k);
    d.box.resize(4 * static_cast<size_t>(k));
    std::memcpy(d.box.data(), w + 1 + 2 * sel.top_k, sizeof(float) * 4 * k);
  }
  return true;
}

}  // namespace detforge::cuda
