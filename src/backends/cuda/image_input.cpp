#include "backends/cuda/image_input.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "io/image_resize.h"
#include "io/image_resize_coeffs.h"

namespace detforge::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

std::string size_str(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

bool same_spec(const ImageInputSpec& a, const ImageInputSpec& b) {
  if (a.rescale_factor != b.rescale_factor || a.do_rescale != b.do_rescale || a.do_normalize != b.do_normalize)
    return false;
  for (int c = 0; c < 3; ++c)
    if (a.mean[c] != b.mean[c] || a.std[c] != b.std[c]) return false;
  return true;
}

}  // namespace

ImageInput::~ImageInput() {
  // The engine synchronizes its stream before destroying; the frees below also synchronize.
  for (auto& e : cache_) cudaFree(e.dev);
  cudaFreeHost(h_stage_);
  cudaFree(d_stage_);
  cudaFree(d_tmp_);
  cudaFree(d_table_);
  if (uploaded_) cudaEventDestroy(uploaded_);
  if (stage_free_) cudaEventDestroy(stage_free_);
  for (auto e : image_up_) cudaEventDestroy(e);
  if (up_) cudaStreamDestroy(up_);
}

// The table of rt_detr_v2::preprocess_image, same expressions: rescale in float64 then cast to
// float32; normalize in float32 with float32 mean and std.
void ImageInput::set_table(const ImageInputSpec& spec, cudaStream_t s) {
  if (have_table_ && same_spec(spec, table_spec_)) return;
  for (int c = 0; c < 3; ++c)
    if (spec.do_normalize && (!(spec.std[c] != 0.0)))
      throw Error("image input: std[" + std::to_string(c) + "] is zero");
  DF_CUDA(cudaStreamSynchronize(s));  // kernels queued earlier may still read the old table
  if (!d_table_) DF_CUDA(cudaMalloc(&d_table_, sizeof(table_)));
  for (int c = 0; c < 3; ++c) {
    const float mean = float(spec.mean[c]), stdv = float(spec.std[c]);
    for (int v = 0; v < 256; ++v) {
      float x = spec.do_rescale ? float(double(v) * spec.rescale_factor) : float(v);
      if (spec.do_normalize) x = (x - mean) / stdv;
      table_[c][v] = x;
    }
  }
  DF_CUDA(cudaMemcpy(d_table_, table_, sizeof(table_), cudaMemcpyHostToDevice));
  table_spec_ = spec;
  have_table_ = true;
}

const ImageInput::Entry& ImageInput::entry(int in_w, int in_h, int out_w, int out_h, cudaStream_t s) {
  ++tick_;
  for (auto& e : cache_)
    if (e.in_w == in_w && e.in_h == in_h && e.out_w == out_w && e.out_h == out_h) {
      e.last_used = tick_;
      return e;
    }
  if (cache_.capacity() < size_t(kCacheEntries)) cache_.reserve(kCacheEntries);
  Entry* slot;
  if (cache_.size() < size_t(kCacheEntries)) {
    slot = &cache_.emplace_back();
  } else {  // evict the least recently used; its tables may be in use by queued kernels
    slot = &*std::min_element(cache_.begin(), cache_.end(),
                              [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    DF_CUDA(cudaStreamSynchronize(s));
    cudaFree(slot->dev);
    *slot = Entry{};
  }
  Entry& e = *slot;
  e.in_w = in_w;
  e.in_h = in_h;
  e.out_w = out_w;
  e.out_h = out_h;
  e.last_used = tick_;
  const bool need_h = out_w != in_w, need_v = out_h != in_h;
  e.vertical_first = pil_vertical_first(in_w, in_h, out_w, out_h);
  PilTaps ht, vt;
  if (need_h) ht = pil_bilinear_taps(in_w, out_w);
  if (need_v) vt = pil_bilinear_taps(in_h, out_h);
  e.h_ksize = ht.ksize;
  e.v_ksize = vt.ksize;
  e.first_row = 0;
  e.rows = in_h;
  if (need_v && !e.vertical_first) {
    e.first_row = vt.first[0];
    e.rows = vt.first[out_h - 1] + vt.count[out_h - 1] - e.first_row;
  }
  if (need_h && need_v)
    e.tmp_bytes = e.vertical_first ? size_t(in_w) * out_h * 3 : size_t(e.rows) * out_w * 3;

  // One device block: the six arrays, each 256-byte aligned.
  const size_t hf = align256(ht.first.size() * 4), hw = align256(ht.weights.size() * 4);
  const size_t vf = align256(vt.first.size() * 4), vw = align256(vt.weights.size() * 4);
  const size_t total = 2 * hf + hw + 2 * vf + vw;
  std::vector<char> host(std::max<size_t>(total, 1), 0);
  char* p = host.data();
  auto put = [&](const void* src, size_t bytes, size_t span) {
    if (bytes) std::memcpy(p, src, bytes);
    p += span;
  };
  put(ht.first.data(), ht.first.size() * 4, hf);
  put(ht.count.data(), ht.count.size() * 4, hf);
  put(ht.weights.data(), ht.weights.size() * 4, hw);
  put(vt.first.data(), vt.first.size() * 4, vf);
  put(vt.count.data(), vt.count.size() * 4, vf);
  put(vt.weights.data(), vt.weights.size() * 4, vw);
  DF_CUDA(cudaMalloc(&e.dev, host.size()));
  DF_CUDA(cudaMemcpy(e.dev, host.data(), host.size(), cudaMemcpyHostToDevice));
  char* d = static_cast<char*>(e.dev);
  e.h_first = reinterpret_cast<const int*>(d);
  e.h_count = reinterpret_cast<const int*>(d + hf);
  e.h_w = reinterpret_cast<const int32_t*>(d + 2 * hf);
  d += 2 * hf + hw;
  e.v_first = reinterpret_cast<const int*>(d);
  e.v_count = reinterpret_cast<const int*>(d + vf);
  e.v_w = reinterpret_cast<const int32_t*>(d + 2 * vf);
  return e;
}

void ImageInput::reserve(size_t staged_bytes, size_t tmp_bytes, cudaStream_t s) {
  if (staged_bytes > stage_cap_) {
    DF_CUDA(cudaStreamSynchronize(s));
    const size_t cap = std::max({staged_bytes, stage_cap_ * 3 / 2, size_t{1} << 20});  // grown rarely
    cudaFreeHost(h_stage_);
    cudaFree(d_stage_);
    h_stage_ = nullptr;
    d_stage_ = nullptr;
    stage_cap_ = 0;
    DF_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&h_stage_), cap, cudaHostAllocDefault));
    DF_CUDA(cudaMalloc(&d_stage_, cap));
    stage_cap_ = cap;
  }
  if (tmp_bytes > tmp_cap_) {
    DF_CUDA(cudaStreamSynchronize(s));
    cudaFree(d_tmp_);
    d_tmp_ = nullptr;
    tmp_cap_ = 0;
    DF_CUDA(cudaMalloc(&d_tmp_, tmp_bytes));
    tmp_cap_ = tmp_bytes;
  }
}

// The pass structure of resize_bilinear_pil, pass for pass; the last pass writes pixels.
void ImageInput::queue_resize(const Entry& e, const uint8_t* src, float* out, cudaStream_t s) {
  const bool need_h = e.out_w != e.in_w, need_v = e.out_h != e.in_h;
  const PassTaps ht{e.h_first, e.h_count, e.h_w, e.h_ksize}, vt{e.v_first, e.v_count, e.v_w, e.v_ksize};
  if (!need_h && !need_v) {
    pil_bytes_to_pixels(src, int64_t(e.in_w) * e.in_h * 3, d_table_, out, s);
  } else if (!need_h) {
    pil_pass_vertical(src, e.in_w, 0, vt, e.out_h, nullptr, out, d_table_, s);
  } else if (!need_v) {
    pil_pass_horizontal(src, e.in_w, 0, e.in_h, ht, e.out_w, nullptr, out, d_table_, s);
  } else if (e.vertical_first) {
    pil_pass_vertical(src, e.in_w, 0, vt, e.out_h, d_tmp_, nullptr, nullptr, s);
    pil_pass_horizontal(d_tmp_, e.in_w, 0, e.out_h, ht, e.out_w, nullptr, out, d_table_, s);
  } else {  // horizontal first, only over the source rows the vertical pass reads
    pil_pass_horizontal(src, e.in_w, e.first_row, e.rows, ht, e.out_w, d_tmp_, nullptr, nullptr, s);
    pil_pass_vertical(d_tmp_, e.out_w, e.first_row, vt, e.out_h, nullptr, out, d_table_, s);
  }
}

void ImageInput::enqueue(const ImageU8* const* images, int batch, const ImageInputSpec& spec, float* out,
                         cudaStream_t s) {
  if (batch < 1 || !images) throw Error("image input: no images (batch " + std::to_string(batch) + ")");
  if (spec.width < 1 || spec.height < 1)
    throw Error("image input: model input size " + size_str(spec.width, spec.height) + " is not positive");
  // Validate all first: nothing is queued for a batch that then fails.
  for (int b = 0; b < batch; ++b) {
    const ImageU8* im = images[b];
    if (!im || im->empty() || im->rgb.size() != size_t(im->width) * im->height * 3)
      throw Error("image input: image " + std::to_string(b) + " is empty or its pixel buffer has the wrong size");
    if (!spec.do_resize && (im->width != spec.width || im->height != spec.height))
      throw Error("image input: image " + std::to_string(b) + " is " + size_str(im->width, im->height) +
                  " but the model takes " + size_str(spec.width, spec.height) + " and its preprocessor does not resize");
  }
  if (!uploaded_) DF_CUDA(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
  if (side_ && !up_) {
    DF_CUDA(cudaEventCreateWithFlags(&stage_free_, cudaEventDisableTiming));
    DF_CUDA(cudaStreamCreateWithFlags(&up_, cudaStreamNonBlocking));
  }
  while (side_ && image_up_.size() < size_t(batch)) {
    cudaEvent_t e;
    DF_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    image_up_.push_back(e);
  }
  if (upload_pending_) {  // the previous call's copies read the staging memory
    DF_CUDA(cudaEventSynchronize(uploaded_));
    upload_pending_ = false;
  }
  set_table(spec, s);

  // Oversized images: resized on the host now (the same bytes), staged at the model size.
  if (host_resized_.size() < size_t(batch)) host_resized_.resize(batch);
  staged_.resize(batch);
  size_t staged = 0, tmp = 0;
  for (int b = 0; b < batch; ++b) {
    const ImageU8* im = images[b];
    if (int64_t(im->width) * im->height > kMaxDevicePixels) {
      host_resized_[b] = resize_bilinear_pil(*im, spec.width, spec.height);
      im = &host_resized_[b];
    }
    staged_[b] = im;
    staged += align256(im->rgb.size());
    tmp = std::max(tmp, entry(im->width, im->height, spec.width, spec.height, s).tmp_bytes);
  }
  reserve(staged, tmp, s);

  // Pieces of each image (whole images on the serial path): copied into pinned memory by the copy
  // threads, each uploaded as soon as it is complete; an image's resize is queued after its last
  // piece.
  const int64_t per_image = int64_t(spec.width) * spec.height * 3;
  pieces_.clear();
  piece_image_.clear();
  image_off_.resize(batch);
  size_t off = 0;
  for (int b = 0; b < batch; ++b) {
    const ImageU8* im = staged_[b];
    const size_t n = im->rgb.size();
    for (size_t o = 0; o < n; o += piece_bytes_) {
      pieces_.push_back({h_stage_ + off + o, im->rgb.data() + o, std::min(piece_bytes_, n - o)});
      piece_image_.push_back(b);
    }
    image_off_[b] = off;
    off += align256(n);
  }
  const cudaStream_t us = side_ ? up_ : s;
  if (side_) {
    DF_CUDA(cudaEventRecord(stage_free_, s));  // the last call's resizes read d_stage_
    DF_CUDA(cudaStreamWaitEvent(up_, stage_free_, 0));
  }
  const int np = static_cast<int>(pieces_.size());
  copier_.run(pieces_, [&](int i) {
    const auto& p = pieces_[i];
    uint8_t* h = static_cast<uint8_t*>(p.dst);
    DF_CUDA(cudaMemcpyAsync(d_stage_ + (h - h_stage_), h, p.bytes, cudaMemcpyHostToDevice, us));
    const int b = piece_image_[i];
    if (i + 1 < np && piece_image_[i + 1] == b) return;
    if (side_) {
      DF_CUDA(cudaEventRecord(image_up_[b], up_));
      DF_CUDA(cudaStreamWaitEvent(s, image_up_[b], 0));
    }
    const ImageU8* im = staged_[b];
    queue_resize(entry(im->width, im->height, spec.width, spec.height, s), d_stage_ + image_off_[b],
                 out + b * per_image, s);
  });
  DF_CUDA(cudaEventRecord(uploaded_, us));
  upload_pending_ = true;
  for (int b = 0; b < batch; ++b)
    if (!host_resized_[b].rgb.empty()) host_resized_[b] = ImageU8{};  // keep no large buffers
}

}  // namespace detforge::cuda
