// Device preprocessing for CudaEngine::run_images(): decoded uint8 RGB images go to the GPU as
// bytes (3 bytes a pixel instead of 12 for fp32 pixels) and are resized there with exactly the
// bytes of resize_bilinear_pil (Pillow 13: same fixed-point taps, computed on the host by the same
// code in io/image_resize.cpp, same pass order and 8-bit intermediate), then mapped through the
// per-channel 256-entry table of ImageInputSpec's rescale/normalize (the host formula of
// rt_detr_v2::preprocess_image) into NHWC fp32. Host preprocessing of a 640x480 image cost ~3.5 ms
// of the 5 ms e2e fp16 b1 (NOTES.md); here the host only copies the bytes into pinned memory.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <vector>

#include "backends/image_input_spec.h"
#include "core/parallel_copy.h"
#include "detforge/types.h"

namespace detforge::cuda {

class ImageInput {
 public:
  // Images with more pixels than this are resized on the host (resize_bilinear_pil, the same
  // bytes) and only the model-sized result is staged, so pinned memory stays bounded.
  static constexpr int64_t kMaxDevicePixels = int64_t{4096} * 4096;
  static constexpr int kCacheEntries = 8;  // coefficient tables kept, by (in size, out size)

  // stage_threads: threads that copy the images into pinned memory (core/parallel_copy.h), in
  // pieces of kPiece bytes, uploaded on a stream of this object's own (side_stream) or on the
  // caller's. 0: the serial path, whole images copied and uploaded one after another on the
  // caller's stream.
  explicit ImageInput(int stage_threads = 1, bool side_stream = true)
      : piece_bytes_(stage_threads == 0 ? SIZE_MAX : kPiece),
        side_(stage_threads != 0 && side_stream),
        copier_(std::max(stage_threads, 1)) {}
  ~ImageInput();
  ImageInput(const ImageInput&) = delete;
  ImageInput& operator=(const ImageInput&) = delete;

  // Queues on `s`: upload of the `batch` images, resize to spec.width x spec.height and the
  // rescale/normalize into out[batch, spec.height, spec.width, 3] (device fp32). Returns once
  // queued; the images may be freed then (they are copied to pinned memory first). With copy
  // threads (stage_threads >= 1) the uploads run on a stream of their own, piece by piece as the
  // threads finish each piece, and each image's resize waits on `s` for its last piece, so uploads
  // overlap the copies and the resizes of the images before (a 640x480 image: ~45 us of upload on
  // an H100); with 0, image after image is copied, uploaded and resized on `s`. A later call
  // waits for this call's uploads before reusing the staging memory. Steady state (sizes seen
  // before, same spec) allocates nothing. Throws detforge::Error for an empty image, a pixel
  // buffer of the wrong size, or (do_resize false) an image of another size.
  void enqueue(const ImageU8* const* images, int batch, const ImageInputSpec& spec, float* out, cudaStream_t s);

  // Tables currently cached (tests: the LRU stays bounded).
  int cached_tables() const { return static_cast<int>(cache_.size()); }

 private:
  struct Entry {
    int in_w = 0, in_h = 0, out_w = 0, out_h = 0;
    uint64_t last_used = 0;
    bool vertical_first = false;
    int first_row = 0, rows = 0;  // source rows the vertical pass reads (horizontal-first order)
    size_t tmp_bytes = 0;         // 8-bit intermediate, 0 when one pass or none
    int h_ksize = 0, v_ksize = 0;
    void* dev = nullptr;          // h first | h count | h weights | v first | v count | v weights
    const int *h_first = nullptr, *h_count = nullptr, *v_first = nullptr, *v_count = nullptr;
    const int32_t *h_w = nullptr, *v_w = nullptr;
  };

  const Entry& entry(int in_w, int in_h, int out_w, int out_h, cudaStream_t s);
  void set_table(const ImageInputSpec& spec, cudaStream_t s);
  void reserve(size_t staged_bytes, size_t tmp_bytes, cudaStream_t s);
  void queue_resize(const Entry& e, const uint8_t* src, float* out, cudaStream_t s);

  std::vector<Entry> cache_;
  uint64_t tick_ = 0;
  uint8_t* h_stage_ = nullptr;  // pinned
  uint8_t* d_stage_ = nullptr;
  size_t stage_cap_ = 0;
  uint8_t* d_tmp_ = nullptr;
  size_t tmp_cap_ = 0;
  float* d_table_ = nullptr;  // [3][256]
  float table_[3][256] = {};
  bool have_table_ = false;
  ImageInputSpec table_spec_;
  static constexpr size_t kPiece = size_t{256} << 10;  // upload unit (bytes)
  size_t piece_bytes_;
  bool side_;
  ParallelCopy copier_;
  std::vector<ParallelCopy::Part> pieces_;
  std::vector<const ImageU8*> staged_;  // per image: it, or its host-resized copy
  std::vector<int> piece_image_;      // the image each piece belongs to
  std::vector<size_t> image_off_;     // each image's offset in the staging memory
  cudaStream_t up_ = nullptr;         // uploads (side_)
  cudaEvent_t stage_free_ = nullptr;  // on s: the previous call's resizes have read d_stage_
  std::vector<cudaEvent_t> image_up_;  // per image: its last piece is on the device
  cudaEvent_t uploaded_ = nullptr;  // after the last call's uploads (staging reuse)
  bool upload_pending_ = false;
  std::vector<ImageU8> host_resized_;  // images over kMaxDevicePixels, resized on the host
};

// kernels/resize_pil.cu. One pass of Pillow's fixed-point resampler over packed RGB bytes.
// Output index i reads count[i] source indices from first[i] with weights w[i * ksize + k].
// Exactly one of dst_u8 (the 8-bit intermediate) and dst_f32 (final pixels: table[c][byte]) is set.
struct PassTaps {
  const int* first;
  const int* count;
  const int32_t* w;
  int ksize;
};
// Rows [row0, row0 + rows) of src (src_w pixels wide) -> rows x out_w pixels.
void pil_pass_horizontal(const uint8_t* src, int src_w, int row0, int rows, PassTaps t, int out_w, uint8_t* dst_u8,
                         float* dst_f32, const float* table, cudaStream_t s);
// src holds rows from source row row0 on, w pixels wide -> out_h rows.
void pil_pass_vertical(const uint8_t* src, int w, int row0, PassTaps t, int out_h, uint8_t* dst_u8, float* dst_f32,
                       const float* table, cudaStream_t s);
// n bytes (n / 3 pixels) -> table[i % 3][src[i]].
void pil_bytes_to_pixels(const uint8_t* src, int64_t n, const float* table, float* dst, cudaStream_t s);

}  // namespace detforge::cuda
