// Multi-scale deformable attention (RT-DETR v2, method "default"), family spec section 3.8.
// Per query q and head h:
//   aw   = softmax over the levels*points logits (max-subtracted)
//   loc  = ref_xy + ((off * points_scale[l*P+p]) * ref_wh) * offset_scale     (HF's order)
//   g    = 2*loc - 1;  ix = ((g_x + 1) * W - 1) / 2  (= loc_x*W - 0.5; torch's grid_sample
//          source-index formula kept literally so the fp32 rounding matches)
//   sample = bilinear over the 4 corners nw, ne, sw, se; a corner outside the map adds 0
//   out[q, h*dh + d] = sum over l (major), p (minor) of aw * sample
// Value is [Lv, C] with level l's tokens at level_start[l] + y*W + x, channel h*dh + d.
// Offsets, logits and value are column slices (graph::deform_columns): row q of the offsets
// starts at offs + q*off_ld + off_col; both may be one [Q, 288] tensor
// (graph::merge_deform_projections), and the value token t at value + t*v_ld + v_col (the three
// decoder layers' values one [Lv, 768] tensor, graph::merge_value_projections).
#include <algorithm>
#include <cmath>

#include "backends/cpu/step.h"

namespace detforge::cpu {
namespace {

constexpr int kMaxLevelPoints = 64;

class MsDeformAttnStep final : public Step {
 public:
  MsDeformAttnStep(const CompileCtx& cc, const graph::Op& op) {
    expect_inputs(op, 5, 5);
    expect_outputs(op, 1);
    heads_ = op.attr_int("heads");
    levels_ = op.attr_int("levels");
    points_ = op.attr_int("points");
    offset_scale_ = op.attr_float("offset_scale");
    if (heads_ < 1 || levels_ < 1 || points_ < 1 || levels_ * points_ > kMaxLevelPoints)
      op_fail(op, "heads/levels/points out of range (levels*points must be <= 64)");
    const auto& value = in_tensor(cc, op, 0);
    expect_rank(op, value, 2);
    Lv_ = value.shape[0];
    if (const auto why = graph::deform_columns_error(cc.g, op); !why.empty()) op_fail(op, why);
    cols_ = graph::deform_columns(cc.g, op);
    C_ = cols_.v_width;
    if (C_ % heads_ != 0) op_fail(op, "heads do not divide the value width " + std::to_string(C_));
    dh_ = C_ / heads_;
    Q_ = in_tensor(cc, op, 1).shape[0];
    const int64_t LP = levels_ * points_;
    expect_shape(op, in_tensor(cc, op, 3), {Q_, 4});
    const auto& ps = in_tensor(cc, op, 4);
    expect_shape(op, ps, {LP});
    points_scale_ = const_data(op, ps);
    expect_shape(op, out_tensor(cc, op), {Q_, C_});

    if (!op.attrs.contains("spatial_shapes")) op_fail(op, "lacks attribute 'spatial_shapes'");
    const auto& ss = op.attrs.at("spatial_shapes");
    if (!ss.is_array() || static_cast<int>(ss.size()) != levels_) op_fail(op, "spatial_shapes must list one [H,W] per level");
    std::vector<int64_t> starts;
    if (op.attrs.contains("level_start")) starts = op.attrs.at("level_start").get<std::vector<int64_t>>();
    int64_t at = 0;
    for (int l = 0; l < levels_; ++l) {
      const auto hw = ss.at(l).get<std::vector<int64_t>>();
      if (hw.size() != 2 || hw[0] < 1 || hw[1] < 1) op_fail(op, "spatial_shapes[" + std::to_string(l) + "] is not a positive [H,W]");
      H_.push_back(hw[0]);
      W_.push_back(hw[1]);
      if (!starts.empty() && (static_cast<int>(starts.size()) != levels_ || starts[l] != at))
        op_fail(op, "level_start does not match spatial_shapes (level " + std::to_string(l) + " starts at " + std::to_string(at) + ")");
      start_.push_back(at);
      at += hw[0] * hw[1];
    }
    if (at != Lv_) op_fail(op, "spatial_shapes cover " + std::to_string(at) + " tokens but value has " + std::to_string(Lv_));
    v_ = op.inputs[0];
    off_ = op.inputs[1];
    logit_ = op.inputs[2];
    ref_ = op.inputs[3];
    y_ = op.outputs[0];
  }

  void run(const ExecCtx& c, int batch) override {
    for (int bi = 0; bi < batch; ++bi)
      run_image(c.f(v_, bi), c.f(off_, bi), c.f(logit_, bi), c.f(ref_, bi), c.f(y_, bi));
  }

 private:
  void run_image(const float* value, const float* offs, const float* logits, const float* ref, float* y) const {
    const int H = heads_, NL = levels_, NP = points_, LP = NL * NP;
    const int64_t C = C_, dh = dh_;
    const float os = offset_scale_;
    const float* ps = points_scale_.data();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < Q_ * H; ++t) {
      const int64_t q = t / H;
      const int h = static_cast<int>(t % H);
      float aw[kMaxLevelPoints];
      const float* lg = logits + q * cols_.aw_ld + cols_.aw_col + h * LP;
      float mx = -INFINITY;
      for (int i = 0; i < LP; ++i) mx = std::max(mx, lg[i]);
      float sum = 0.f;
      for (int i = 0; i < LP; ++i) {
        aw[i] = std::exp(lg[i] - mx);
        sum += aw[i];
      }
      for (int i = 0; i < LP; ++i) aw[i] /= sum;
      const float rx = ref[q * 4 + 0], ry = ref[q * 4 + 1], rw = ref[q * 4 + 2], rh = ref[q * 4 + 3];
      const float* off = offs + q * cols_.off_ld + cols_.off_col + h * LP * 2;
      float* out = y + q * C + h * dh;
      std::fill(out, out + dh, 0.f);
      for (int l = 0; l < NL; ++l) {
        const int64_t Hl = H_[l], Wl = W_[l];
        const float* vl = value + start_[l] * cols_.v_ld + cols_.v_col + h * dh;
        for (int p = 0; p < NP; ++p) {
          const int i = l * NP + p;
          const float lx = rx + off[i * 2 + 0] * ps[i] * rw * os;
          const float ly = ry + off[i * 2 + 1] * ps[i] * rh * os;
          const float gx = 2.f * lx - 1.f, gy = 2.f * ly - 1.f;
          const float ix = ((gx + 1.f) * static_cast<float>(Wl) - 1.f) / 2.f;
          const float iy = ((gy + 1.f) * static_cast<float>(Hl) - 1.f) / 2.f;
          const float fx0 = std::floor(ix), fy0 = std::floor(iy);
          if (!(fx0 > -2.f && fx0 < static_cast<float>(Wl) && fy0 > -2.f && fy0 < static_cast<float>(Hl))) {
            if (std::isnan(ix) || std::isnan(iy)) out[0] = NAN;  // keep NaN visible to check_finite
            continue;                                           // all four corners outside
          }
          const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
          const int64_t x1 = x0 + 1, y1 = y0 + 1;
          // torch: nw = (x1-ix)(y1-iy), ne = (ix-x0)(y1-iy), sw = (x1-ix)(iy-y0), se = (ix-x0)(iy-y0)
          const float wx1 = static_cast<float>(x1) - ix, wx0 = ix - static_cast<float>(x0);
          const float wy1 = static_cast<float>(y1) - iy, wy0 = iy - static_cast<float>(y0);
          const bool in_x0 = x0 >= 0 && x0 < Wl, in_x1 = x1 >= 0 && x1 < Wl;
          const bool in_y0 = y0 >= 0 && y0 < Hl, in_y1 = y1 >= 0 && y1 < Hl;
          const float a = aw[i];
          const float wnw = (in_x0 && in_y0) ? wx1 * wy1 : 0.f;
          const float wne = (in_x1 && in_y0) ? wx0 * wy1 : 0.f;
          const float wsw = (in_x0 && in_y1) ? wx1 * wy0 : 0.f;
          const float wse = (in_x1 && in_y1) ? wx0 * wy0 : 0.f;
          // Out-of-map corners read a clamped, in-bounds row with weight 0 (keeps the loop branch-free).
          auto row = [&](int64_t yy, int64_t xx) {
            yy = std::clamp<int64_t>(yy, 0, Hl - 1);
            xx = std::clamp<int64_t>(xx, 0, Wl - 1);
            return vl + (yy * Wl + xx) * cols_.v_ld;
          };
          const float *vnw = row(y0, x0), *vne = row(y0, x1), *vsw = row(y1, x0), *vse = row(y1, x1);
#pragma omp simd
          for (int64_t d = 0; d < dh; ++d)
            out[d] += a * (((wnw * vnw[d] + wne * vne[d]) + wsw * vsw[d]) + wse * vse[d]);
        }
      }
    }
  }

  graph::TensorId v_, off_, logit_, ref_, y_;
  graph::DeformColumns cols_;
  int heads_, levels_, points_;
  float offset_scale_;
  int64_t Lv_, C_, dh_, Q_;
  std::vector<int64_t> H_, W_, start_;
  std::vector<float> points_scale_;
};

}  // namespace

StepPtr make_ms_deform_attn_step(const CompileCtx& cc, const graph::Op& op) {
  return std::make_unique<MsDeformAttnStep>(cc, op);
}

}  // namespace detforge::cpu
