// detect()'s selection on the device (kernels/detect_select.cu) against a host loop of its
// definition: candidates at or above the floor (NaN never), ranked by logit descending with -0
// equal to +0 and equal logits by the lower flat index, the first top_k kept, boxes through the
// host formula bit for bit. Then the engine path: a CUDA Detector's detect_batch() (which selects
// on the device) gives exactly what the host post-processing gives on the same run's raw outputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/kernels.h"
#include "detforge/detector.h"
#include "detforge/image.h"
#include "families/rt_detr_v2/postprocess.h"
#include "gpu_test_util.h"
#include "r18_bundle.h"
#include "test_paths.h"

namespace detforge::test {
namespace {

struct Case {
  int nq, nc, top_k, batch;
  float floor;
};

SelectedDetections select_ref(const float* lg, const float* bx, const Case& c, int w, int h) {
  const int n = c.nq * c.nc;
  std::vector<int> idx;
  for (int i = 0; i < n; ++i)
    if (lg[i] >= c.floor) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return lg[a] > lg[b]; });  // -0 == +0
  if (static_cast<int>(idx.size()) > c.top_k) idx.resize(c.top_k);
  SelectedDetections s;
  for (int i : idx) {
    const float* b = bx + 4 * (i / c.nc);
    const Box x = rt_detr_v2::box_xyxy(b[0], b[1], b[2], b[3], w, h);
    s.flat_index.push_back(i);
    s.logit.push_back(lg[i]);
    s.box.insert(s.box.end(), {x.x0, x.y0, x.x1, x.y1});
  }
  return s;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Runs the kernel on `logits` / `boxes` of c.batch images and compares every image with select_ref.
void check(const Case& c, const std::vector<float>& logits, const std::vector<float>& boxes, const std::string& what) {
  SCOPED_TRACE(what);
  float *dl = nullptr, *db = nullptr;
  uint32_t* dout = nullptr;
  const size_t words = cuda::detect_select_words(c.top_k);
  ASSERT_EQ(cudaMalloc(&dl, logits.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, boxes.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, words * c.batch * 4), cudaSuccess);
  cudaMemcpy(dl, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, boxes.data(), boxes.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, words * c.batch * 4);
  std::vector<int> ws(c.batch), hs(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    ws[b] = 640 + 37 * b;
    hs[b] = 480 - 13 * (b % 9);
  }
  cuda::detect_select(dl, db, c.nq, c.nc, c.top_k, c.floor, ws.data(), hs.data(), c.batch, dout, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint32_t> got(words * c.batch);
  cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(dl);
  cudaFree(db);
  cudaFree(dout);
  const size_t n = static_cast<size_t>(c.nq) * c.nc;
  for (int b = 0; b < c.batch; ++b) {
    const SelectedDetections want = select_ref(logits.data() + b * n, boxes.data() + b * 4 * c.nq, c, ws[b], hs[b]);
    const uint32_t* w = got.data() + words * b;
    const int k = static_cast<int>(want.flat_index.size());
    ASSERT_EQ(static_cast<int>(w[0]), k) << "image " << b;
    for (int r = 0; r < k; ++r) {
      ASSERT_EQ(static_cast<int>(w[1 + r]), want.flat_index[r]) << "image " << b << " rank " << r;
      float l, bb[4];
      std::memcpy(&l, &w[1 + c.top_k + r], 4);
      std::memcpy(bb, &w[1 + 2 * c.top_k + 4 * r], 16);
      ASSERT_TRUE(same_bits(l, want.logit[r])) << "image " << b << " rank " << r;
      for (int j = 0; j < 4; ++j) ASSERT_TRUE(same_bits(bb[j], want.box[4 * r + j])) << "image " << b << " rank " << r;
    }
  }
}

std::vector<float> tied_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(-4.f, 3.f);
  std::vector<float> v(n);
  for (auto& x : v) x = std::round(nd(rng) * 16.f) / 16.f;  // many exact ties
  return v;
}

TEST(CudaDetectSelect, EqualsTheHostDefinitionAtEveryFloorAndShape) {
  DETFORGE_REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int nc : {8, 80, 91}) {
    const int nq = 300, batch = 3;
    const size_t n = static_cast<size_t>(nq) * nc;
    std::vector<float> logits = tied_logits(n * batch, 11 + nc);
    const std::vector<float> boxes = random_vec(static_cast<size_t>(nq) * 4 * batch, 0.01f, 0.99f, 5);
    logits[3] = inf;
    logits[4] = -inf;
    logits[5] = nan;
    logits[6] = 40.f;
    logits[n + 10] = -0.f;
    logits[n + 11] = 0.f;
    logits[n + 12] = -0.f;
    for (size_t i = 2 * n; i < 2 * n + 2000; ++i) logits[i] = 1.5f;  // image 2: a block of ties at the top
    for (float t : {-1.f, 0.01f, 0.3f, 0.5f, 0.9f, 1.f, std::nanf("")})
      for (int top_k : {300, 1, 2048}) {
        const float fl = rt_detr_v2::logit_floor(t);
        check({nq, nc, top_k, batch, fl}, logits, boxes,
              "nc " + std::to_string(nc) + " threshold " + std::to_string(t) + " top_k " + std::to_string(top_k));
      }
  }
}

TEST(CudaDetectSelect, TiesAtTheKthPlaceTakeTheLowestIndices) {
  DETFORGE_REQUIRE_GPU();
  // Every logit equal (24,000 candidates for 300 places), then equal but for a few above, and
  // -0 / +0 mixed: the lowest flat indices fill the places the larger logits leave.
  const int nq = 300, nc = 80;
  const size_t n = static_cast<size_t>(nq) * nc;
  std::vector<float> logits(n * 3, 0.f);
  for (size_t i = 0; i < n; i += 7) logits[i] = -0.f;
  for (size_t i = n; i < 2 * n; ++i) logits[i] = -2.f;
  for (size_t i : {n + 23000, n + 5, n + 17999}) logits[i] = 3.f;
  for (size_t i = 2 * n; i < 3 * n; ++i) logits[i] = (i % 1000 == 999) ? 1.f : 0.5f;
  const std::vector<float> boxes = random_vec(static_cast<size_t>(nq) * 4 * 3, 0.01f, 0.99f, 6);
  check({nq, nc, 300, 3, -std::numeric_limits<float>::infinity()}, logits, boxes, "floor -inf");
  check({nq, nc, 300, 3, rt_detr_v2::logit_floor(0.1f)}, logits, boxes, "threshold 0.1");
}

TEST(CudaDetectSelect, BatchesOverSixtyFourImagesAndOddSizes) {
  DETFORGE_REQUIRE_GPU();
  // 70 images take two launches (64 image sizes travel per launch); 7 x 3 logits, top_k 5.
  const Case c{7, 3, 5, 70, rt_detr_v2::logit_floor(0.2f)};
  const std::vector<float> logits = tied_logits(static_cast<size_t>(7) * 3 * 70, 9);
  const std::vector<float> boxes = random_vec(static_cast<size_t>(7) * 4 * 70, -0.2f, 1.2f, 8);
  check(c, logits, boxes, "70 images");
  check({1, 1, 1, 2, -std::numeric_limits<float>::infinity()}, {0.5f, -1.f}, {0.5f, 0.5f, 0.2f, 0.2f, 0.1f, 0.9f, 1.f, 1.f},
        "one query, one class");
}

TEST(CudaDetectSelect, RefusesWhatItCannotHold) {
  DETFORGE_REQUIRE_GPU();
  int w = 1, h = 1;
  EXPECT_THROW(cuda::detect_select(nullptr, nullptr, 300, 80, cuda::kDetectSelectMaxK + 1, 0.f, &w, &h, 1, nullptr,
                                   nullptr),
               Error);
  EXPECT_THROW(cuda::detect_select(nullptr, nullptr, 300, 80, 0, 0.f, &w, &h, 1, nullptr, nullptr), Error);
}

// The engine path: detect_batch() selects on the device; the host post-processing of the raw
// outputs of the same images must give the same detections, bit for bit, at a threshold that
// keeps few (0.3) and at one that lets every logit through (the radix path: 2,400 candidates).
// Batch 1 both ways, so both read the same captured graph's outputs.
TEST(CudaDetectSelect, DetectorEqualsHostPostprocessingOfTheRawOutputs) {
  DETFORGE_REQUIRE_GPU();
  DETFORGE_REQUIRE_SHARED();
  for (const char* precision : {"fp32", "fp16"}) {
    SCOPED_TRACE(precision);
    DetectorOptions o;
    o.backend = "cuda";
    o.precision = precision;
    auto det = Detector::load(r18_bundle(), o);
    std::vector<ImageU8> imgs;  // images the goldens name (the device's subset of ../shared has them)
    for (const char* f : {"coco_val80/images/000000005001.jpg", "coco_val80/images/000000010764.jpg"})
      imgs.push_back(load_image((shared_dir() / "data" / f).string()));
    for (float t : {0.3f, 0.f}) {
      SCOPED_TRACE("threshold " + std::to_string(t));
      int total = 0;
      for (size_t i = 0; i < imgs.size(); ++i) {
        const Detections got = det->detect(imgs[i], t);
        const RawOutputs raw = det->run_raw(imgs[i]);
        const Detections want =
            rt_detr_v2::postprocess(raw.logits.data(), raw.boxes.data(), raw.num_queries, raw.num_classes,
                                    imgs[i].width, imgs[i].height, t, det->labels(), raw.num_queries);
        ASSERT_EQ(got.items.size(), want.items.size()) << "image " << i;
        total += static_cast<int>(want.items.size());
        for (size_t k = 0; k < want.items.size(); ++k) {
          const Detection &g = got.items[k], &w = want.items[k];
          EXPECT_EQ(g.label, w.label) << "image " << i << " item " << k;
          EXPECT_EQ(g.label_name, w.label_name);
          EXPECT_TRUE(same_bits(g.score, w.score)) << "image " << i << " item " << k;
          EXPECT_TRUE(same_bits(g.box.x0, w.box.x0) && same_bits(g.box.y0, w.box.y0) && same_bits(g.box.x1, w.box.x1) &&
                      same_bits(g.box.y1, w.box.y1))
              << "image " << i << " item " << k;
        }
      }
      if (t == 0.f) EXPECT_GT(total, 300);  // the comparison compared something
    }
  }
}

}  // namespace
}  // namespace detforge::test
