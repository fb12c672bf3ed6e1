// Detector: bundle → graph → engine, with the family's pre- and post-processing around it.
#include "detforge/detector.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include "backends/engine.h"
#include "families/rt_detr_v2/postprocess.h"
#include "families/rt_detr_v2/preprocess.h"
#include "io/bundle_graph.h"

namespace detforge {

namespace {

class RtDetrDetector : public Detector {
 public:
  RtDetrDetector(const std::string& path, const DetectorOptions& opt) : backend_(opt.backend) {
    LoadedBundle lb = load_bundle_graph(path);
    const auto& h = lb.header;
    try {
      pre_ = rt_detr_v2::PreprocessConfig::from_json(h.at("preprocess"));
      labels_ = h.at("labels").get<std::vector<std::string>>();
      top_k_ = h.at("postprocess").at("top_k").get<int>();
      precision_ = h.at("precision").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw Error("bundle " + path + " header is incomplete: " + e.what());
    }
    graph::Graph& g = lb.graph;
    if (g.inputs.size() != 1 || g.outputs.size() < 2)
      throw Error("bundle " + path + " graph must have 1 input and at least 2 outputs (logits, boxes)");
    const auto& in = g.tensor(g.inputs[0]).shape;
    if (in.size() != 3 || in[0] != pre_.height || in[1] != pre_.width || in[2] != 3)
      throw Error("bundle " + path + " graph input does not match its preprocessing size");
    nq_ = static_cast<int>(g.tensor(g.outputs[0]).shape[0]);
    nc_ = static_cast<int>(g.tensor(g.outputs[0]).shape[1]);
    EngineOptions eo;
    eo.max_batch = opt.max_batch;
    eo.threads = opt.threads;
    // The bundle's precision is the default where the backend has it; the CPU runs fp32 only,
    // so an fp16 bundle (fp16-stored matrices, widened at load) runs there in fp32.
    eo.precision = !opt.precision.empty() ? opt.precision : opt.backend == "cpu" ? "" : precision_;
    eo.check_finite = opt.check_finite;
    engine_ = make_engine(opt.backend, g, eo);
    spec_ = rt_detr_v2::image_input_spec(pre_);
    pixels_.resize(static_cast<size_t>(opt.max_batch) * pre_.height * pre_.width * 3);
    ptrs_.resize(opt.max_batch);
  }

  std::vector<float> preprocess(const ImageU8& image) const override {
    std::vector<float> out(static_cast<size_t>(pre_.height) * pre_.width * 3);
    rt_detr_v2::preprocess_image(image, pre_, out.data());
    return out;
  }

  Detections detect(const ImageU8& image, float threshold) override {
    return std::move(detect_batch({image}, threshold).at(0));
  }

  std::vector<Detections> detect_batch(const std::vector<ImageU8>& images, float threshold) override {
    std::lock_guard<std::mutex> lock(mu_);  // one staging buffer and engine: calls take turns
    std::vector<Detections> out;
    const size_t per = static_cast<size_t>(pre_.height) * pre_.width * 3;
    const int mb = engine_->max_batch();
    for (size_t start = 0; start < images.size(); start += mb) {
      int n = static_cast<int>(std::min<size_t>(mb, images.size() - start));
      for (int i = 0; i < n; ++i) {
        if (images[start + i].empty()) throw Error("cannot detect on an empty image");
        ptrs_[i] = &images[start + i];
      }
      // A backend that preprocesses on its own device (CUDA) takes the decoded bytes, which are
      // 5x smaller than fp32 pixels; the result is bit-identical to preprocessing here. Where it
      // can also select (top-k, box decode), only the kept detections come back.
      DetectionSelect sel;
      sel.top_k = top_k_ < 0 || top_k_ > nq_ * nc_ ? std::min(nq_, nq_ * nc_) : top_k_;
      sel.logit_floor = rt_detr_v2::logit_floor(threshold);
      if (engine_->run_images_selected(ptrs_.data(), n, spec_, sel, selected_)) {
        for (int i = 0; i < n; ++i)
          out.push_back(rt_detr_v2::finalize_selected(selected_[i], nc_, images[start + i].width,
                                                      images[start + i].height, threshold, labels_));
        continue;
      }
      std::vector<HostTensor> res;
      if (!engine_->run_images(ptrs_.data(), n, spec_, res)) {
        for (int i = 0; i < n; ++i) rt_detr_v2::preprocess_image(images[start + i], pre_, pixels_.data() + i * per);
        res = engine_->run(pixels_.data(), n);
      }
      for (int i = 0; i < n; ++i) {
        const ImageU8& im = images[start + i];
        out.push_back(rt_detr_v2::postprocess(res[0].data.data() + static_cast<size_t>(i) * nq_ * nc_,
                                              res[1].data.data() + static_cast<size_t>(i) * nq_ * 4, nq_, nc_, im.width,
                                              im.height, threshold, labels_, top_k_));
      }
    }
    return out;
  }

  RawOutputs run_raw(const ImageU8& image) override {
    if (image.empty()) throw Error("cannot run on an empty image");
    std::lock_guard<std::mutex> lock(mu_);
    const ImageU8* one = &image;
    std::vector<HostTensor> res;
    if (!engine_->run_images(&one, 1, spec_, res)) {
      rt_detr_v2::preprocess_image(image, pre_, pixels_.data());
      res = engine_->run(pixels_.data(), 1);
    }
    RawOutputs r;
    r.num_queries = nq_;
    r.num_classes = nc_;
    r.logits = std::move(res[0].data);
    r.boxes = std::move(res[1].data);
    if (res.size() > 2)
      for (float v : res[2].data) r.query_indices.push_back(static_cast<int>(v));
    r.first_nonfinite_op = engine_->first_nonfinite_op();
    return r;
  }

  const std::vector<std::string>& labels() const override { return labels_; }
  std::string backend() const override { return backend_; }
  int input_height() const override { return pre_.height; }
  int input_width() const override { return pre_.width; }

 private:
  std::string backend_, precision_;
  rt_detr_v2::PreprocessConfig pre_;
  std::vector<std::string> labels_;
  int top_k_ = 300, nq_ = 0, nc_ = 0;
  std::unique_ptr<Engine> engine_;
  std::vector<float> pixels_;
  std::vector<const ImageU8*> ptrs_;
  std::vector<SelectedDetections> selected_;
  ImageInputSpec spec_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<Detector> Detector::load(const std::string& bundle_path, const DetectorOptions& opt) {
  return std::make_unique<RtDetrDetector>(bundle_path, opt);
}

std::future<Detections> Detector::detect_async(ImageU8 image, float threshold) {
  return std::async(std::launch::async, [this, img = std::move(image), threshold]() { return detect(img, threshold); });
}

}  // namespace detforge
