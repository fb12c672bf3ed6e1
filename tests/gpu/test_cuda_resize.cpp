// GPU preprocessing (backends/cuda/image_input.h) against the CPU path: the device resize +
// rescale/normalize must give exactly the floats of rt_detr_v2::preprocess_image (whose resize is
// bit-exact with Pillow 13, tests/unit/test_image_resize.cpp), for downscales, upscales, both
// pass orders, one-pass and identity cases, mixed-size batches and the host fallback for huge
// images; and CudaEngine::run_images must return exactly run() on host-preprocessed pixels.
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/image_input.h"
#include "families/rt_detr_v2/preprocess.h"
#include "gpu_test_util.h"
#include "io/image_resize.h"
#include "io/image_resize_coeffs.h"

namespace detforge::test {
namespace {

ImageU8 random_image(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  ImageU8 im;
  im.width = w;
  im.height = h;
  im.rgb.resize(size_t(w) * h * 3);
  // Half the rows noise, half smooth gradients: noise hits every rounding path, gradients make
  // results land near the .5 rounding boundaries of the fixed-point sums.
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        im.rgb[(size_t(y) * w + x) * 3 + c] =
            (y / 7) % 2 ? uint8_t(rng()) : uint8_t((x * (c + 1) + y * (3 - c) + seed) & 255);
  return im;
}

rt_detr_v2::PreprocessConfig to_cfg(const ImageInputSpec& s) {
  rt_detr_v2::PreprocessConfig c;
  c.height = s.height;
  c.width = s.width;
  c.do_rescale = s.do_rescale;
  c.rescale_factor = s.rescale_factor;
  c.do_normalize = s.do_normalize;
  for (int i = 0; i < 3; ++i) {
    c.mean[i] = s.mean[i];
    c.std[i] = s.std[i];
  }
  c.do_resize = s.do_resize;
  return c;
}

// Device preprocessing of a batch, downloaded. The output starts as NaN (DevBuf's poison), so
// an unwritten pixel cannot match.
std::vector<float> gpu_preprocess(cuda::ImageInput& in, const std::vector<const ImageU8*>& ims,
                                  const ImageInputSpec& spec) {
  DevBuf out(size_t(spec.width) * spec.height * 3 * ims.size(), false);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the poison memset ran on the legacy stream
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> own(s, &cudaStreamDestroy);
  in.enqueue(ims.data(), static_cast<int>(ims.size()), spec, static_cast<float*>(out.get()), s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return out.download();
}

std::vector<float> cpu_preprocess(const ImageU8& im, const ImageInputSpec& spec) {
  std::vector<float> out(size_t(spec.width) * spec.height * 3);
  rt_detr_v2::preprocess_image(im, to_cfg(spec), out.data());
  return out;
}

// Bitwise equality, reporting the first differing element.
::testing::AssertionResult same_bits(const float* got, const std::vector<float>& want, int w) {
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "pixel (x " << (i / 3) % w << ", y " << (i / 3) / w << ") channel "
                                           << i % 3 << ": gpu " << got[i] << ", cpu " << want[i];
  return ::testing::AssertionSuccess();
}

ImageInputSpec spec_of(int w, int h, int mode) {  // 0: raw bytes, 1: rescale, 2: rescale + normalize
  ImageInputSpec s;
  s.width = w;
  s.height = h;
  s.do_rescale = mode >= 1;
  s.do_normalize = mode == 2;
  return s;
}

class CudaResizeTest : public ::testing::Test {
 protected:
  void SetUp() override { DETFORGE_REQUIRE_GPU(); }
};

TEST_F(CudaResizeTest, EqualsCpuPreprocessBitExactly) {
  // Input sizes -> model sizes. Covers: 4:3 downscale both ways, extreme aspect (1 px wide or
  // tall), vertical-first order with both passes (333x777, 700x2000), horizontal-first with both
  // passes (1280x720, 4000x3000), one pass only (640x480 -> 640x640, 1280x640), identity, upscales.
  const std::vector<std::pair<int, int>> inputs = {{640, 480}, {480, 640}, {1, 4000}, {4000, 1},  {333, 777},
                                                   {1280, 720}, {640, 640}, {100, 50}, {700, 2000}, {4000, 3000},
                                                   {1280, 640}, {7, 3},     {640, 1281}};
  const std::vector<std::pair<int, int>> models = {{640, 640}, {320, 192}, {1000, 50}};
  cuda::ImageInput in(4);  // four copy threads (DETFORGE_CUDA_STAGE_THREADS=4)
  uint32_t seed = 1;
  for (auto [mw, mh] : models)
    for (auto [w, h] : inputs)
      for (int mode = 0; mode < 3; ++mode) {
        const ImageU8 im = random_image(w, h, seed++);
        const ImageInputSpec spec = spec_of(mw, mh, mode);
        const auto got = gpu_preprocess(in, {&im}, spec);
        const auto want = cpu_preprocess(im, spec);
        EXPECT_TRUE(same_bits(got.data(), want, mw))
            << w << "x" << h << " -> " << mw << "x" << mh << " mode " << mode
            << (pil_vertical_first(w, h, mw, mh) ? " (vertical first)" : "");
        if (mode == 0) {  // raw bytes: the values are resize_bilinear_pil's bytes themselves
          const ImageU8 r = resize_bilinear_pil(im, mw, mh);
          ASSERT_EQ(r.rgb.size(), got.size());
          for (size_t i = 0; i < got.size(); ++i)
            if (got[i] != float(r.rgb[i])) {
              ADD_FAILURE() << w << "x" << h << " -> " << mw << "x" << mh << ": byte " << i << " gpu " << got[i]
                            << " cpu " << int(r.rgb[i]);
              break;
            }
        }
      }
  EXPECT_LE(in.cached_tables(), cuda::ImageInput::kCacheEntries);
}

TEST_F(CudaResizeTest, MixedSizeBatchWithMoreSizesThanTheCacheHolds) {
  std::vector<ImageU8> ims;
  for (int i = 0; i < 11; ++i) ims.push_back(random_image(200 + 97 * i, 150 + 61 * (i % 4), 100 + i));
  ims.push_back(ims[0]);  // a repeated size after eviction
  std::vector<const ImageU8*> ptrs;
  for (auto& im : ims) ptrs.push_back(&im);
  const ImageInputSpec spec = spec_of(320, 320, 2);
  // Copy threads 0 (serial on the caller's stream), 1 (the caller alone) and 4 (three workers
  // too), pieces uploaded on the input's own stream or the caller's.
  for (auto [threads, side] : {std::pair{0, false}, {1, true}, {4, true}, {4, false}}) {
    cuda::ImageInput in(threads, side);
    for (int round = 0; round < 2; ++round) {  // the second round reuses staging and tables
      const auto got = gpu_preprocess(in, ptrs, spec);
      const size_t per = size_t(320) * 320 * 3;
      for (size_t b = 0; b < ims.size(); ++b)
        EXPECT_TRUE(same_bits(got.data() + b * per, cpu_preprocess(ims[b], spec), 320))
            << threads << " threads" << (side ? " (side stream)" : "") << ", round " << round << " image " << b
            << " (" << ims[b].width << "x" << ims[b].height << ")";
      EXPECT_LE(in.cached_tables(), cuda::ImageInput::kCacheEntries);
    }
  }
}

TEST_F(CudaResizeTest, ImagesOverTheDeviceLimitAreResizedOnTheHostWithTheSameResult) {
  const ImageU8 big = random_image(4100, 4097, 7);  // > 4096 * 4096 pixels
  const ImageU8 small = random_image(640, 480, 8);
  const ImageInputSpec spec = spec_of(640, 640, 1);
  cuda::ImageInput in(4);
  const auto got = gpu_preprocess(in, {&small, &big}, spec);
  const size_t per = size_t(640) * 640 * 3;
  EXPECT_TRUE(same_bits(got.data(), cpu_preprocess(small, spec), 640));
  EXPECT_TRUE(same_bits(got.data() + per, cpu_preprocess(big, spec), 640));
}

TEST_F(CudaResizeTest, BadImagesThrowNamingTheProblem) {
  cuda::ImageInput in;
  ImageU8 empty;
  ImageU8 short_buf = random_image(10, 10, 3);
  short_buf.rgb.pop_back();
  ImageInputSpec spec = spec_of(64, 64, 1);
  for (const ImageU8* p : {&empty, &short_buf}) {
    try {
      gpu_preprocess(in, {p}, spec);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("image 0 is empty or its pixel buffer has the wrong size"), std::string::npos)
          << e.what();
    }
  }
  spec.do_resize = false;
  const ImageU8 im = random_image(65, 64, 4);
  try {
    gpu_preprocess(in, {&im}, spec);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is 65x64 but the model takes 64x64"), std::string::npos) << e.what();
  }
  const ImageU8 ok = random_image(64, 64, 5);  // do_resize false and the right size: identity
  EXPECT_TRUE(same_bits(gpu_preprocess(in, {&ok}, spec).data(), cpu_preprocess(ok, spec), 64));
}

// pixels [H, W, 3] -> conv 3x3 s2 relu -> [H/2, W/2, 8]: the engine path around run_images.
graph::Graph conv_graph(int h, int w) {
  graph::Graph g;
  auto px = g.add_activation("pixels", {h, w, 3});
  g.inputs = {px};
  auto wt = g.add_const("c.w", {8, 3, 3, 3}, random_vec(8 * 27, -0.5f, 0.5f, 11));
  auto b = g.add_const("c.b", {8}, random_vec(8, -0.2f, 0.2f, 12));
  auto y = g.add_activation("y", {h / 2, w / 2, 8});
  graph::Op o;
  o.kind = graph::OpKind::conv2d;
  o.name = "c";
  o.inputs = {px, wt, b};
  o.outputs = {y};
  o.attrs = {{"stride", 2}, {"pad", 1}, {"act", "relu"}};
  g.add_op(o);
  g.outputs = {y};
  g.validate();
  return g;
}

class CudaRunImagesTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { DETFORGE_REQUIRE_GPU(); }
};

TEST_P(CudaRunImagesTest, EqualsRunOnHostPreprocessedPixels) {
  const int H = 640, W = 640;
  EngineOptions opt;
  opt.max_batch = 3;
  opt.precision = GetParam();
  cuda::CudaEngine e(conv_graph(H, W), opt);
  const ImageInputSpec spec = spec_of(W, H, 2);
  const std::vector<ImageU8> ims = {random_image(640, 480, 21), random_image(100, 50, 22), random_image(640, 640, 23)};
  for (int batch : {1, 3, 1}) {  // batch 1 twice: steady state after a larger batch
    std::vector<float> px(size_t(batch) * H * W * 3);
    std::vector<const ImageU8*> ptrs;
    for (int b = 0; b < batch; ++b) {
      rt_detr_v2::preprocess_image(ims[b], to_cfg(spec), px.data() + size_t(b) * H * W * 3);
      ptrs.push_back(&ims[b]);
    }
    const auto want = e.run(px.data(), batch);
    const auto got = e.run_images(ptrs.data(), batch, spec);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      EXPECT_EQ(got[o].shape, want[o].shape);
      EXPECT_TRUE(same_bits(got[o].data.data(), want[o].data, W / 2)) << "batch " << batch << " output " << o;
    }
  }
}

TEST_P(CudaRunImagesTest, RejectsASpecOfAnotherSizeAndABadBatch) {
  EngineOptions opt;
  opt.precision = GetParam();
  cuda::CudaEngine e(conv_graph(64, 64), opt);
  const ImageU8 im = random_image(64, 64, 1);
  const ImageU8* p = &im;
  try {
    e.run_images(&p, 1, spec_of(64, 32, 1));
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("does not match the graph input [64, 64, 3]"), std::string::npos)
        << err.what();
  }
  EXPECT_THROW(e.run_images(&p, 2, spec_of(64, 64, 1)), Error);  // max_batch 1
  EXPECT_NO_THROW(e.run_images(&p, 1, spec_of(64, 64, 1)));       // the engine is still usable
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaRunImagesTest, ::testing::Values("fp32", "fp16"));

}  // namespace
}  // namespace detforge::test
