// Per-op plans (cuDNN / cuBLASLt descriptors for one batch size) and launches, in the IR's
// semantics (src/graph/ir.h). Shapes come from the graph's tensors (batch excluded).
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/kernels/conv_stem.h"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {

using graph::Act;
using graph::OpKind;

namespace {
constexpr size_t kLtWorkspace = size_t{32} << 20;

std::string op_label(const graph::Op& op) { return op.name + " (" + graph::op_kind_name(op.kind) + ")"; }
int64_t prod(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) n *= s[i];
  return n;
}
// act(x W^T + b + residual) through cuBLASLt: its epilogue applies ReLU only without a residual
// (LtLinear fuses no other activation); any other activation is one more bias_act pass.
bool lt_fuses_relu(Act act, bool res) { return act == Act::relu && !res; }
bool lt_needs_act_pass(Act act, bool res) { return act != Act::none && !lt_fuses_relu(act, res); }
// The LtLinear of a linear op or of a 1x1 conv run as one (rows = pixels or tokens).
std::unique_ptr<LtLinear> lt_linear(cublasLtHandle_t h, int64_t rows, int N, int K, bool half, bool bias, Act act,
                                    bool res, size_t ws_limit, const graph::Op& op, int sm_target) {
  return std::make_unique<LtLinear>(h, static_cast<int>(rows), N, K, half, bias, lt_fuses_relu(act, res), res,
                                    std::min(kLtWorkspace, ws_limit), op_label(op), sm_target);
}
}  // namespace

ConvShape CudaEngine::conv_shape(size_t i, int batch) const {
  const graph::Op& op = g_.ops[i];
  const auto& x = g_.tensor(op.inputs[0]).shape;
  const auto& w = g_.tensor(op.inputs[1]).shape;
  const auto& y = g_.tensor(op.outputs[0]).shape;
  if (x.size() != 3 || w.size() != 4 || y.size() != 3) throw Error("cuda backend: conv " + op.name + " needs NHWC");
  ConvShape s;
  s.B = batch;
  s.H = static_cast<int>(x[0]);
  s.W = static_cast<int>(x[1]);
  s.Ci = static_cast<int>(x[2]);
  s.Co = static_cast<int>(w[0]);
  s.kh = static_cast<int>(w[2]);
  s.kw = static_cast<int>(w[3]);
  s.stride = op.attr_int_or("stride", 1);
  s.pad = op.attr_int_or("pad", 0);
  s.Ho = static_cast<int>(y[0]);
  s.Wo = static_cast<int>(y[1]);
  if (w[1] != s.Ci) throw Error("cuda backend: conv " + op.name + " weight has " + std::to_string(w[1]) +
                                " input channels, the input has " + std::to_string(s.Ci));
  if (static_cast<int>(i) == pad_op_) s.Ci = pad_input_;  // cuda_input_conv.cpp
  return s;
}

ConvBuffers CudaEngine::op_buffers(const graph::Op& op, bool bias, bool res) const {
  ConvBuffers cb;
  cb.x = ptr(op.inputs[0]);
  cb.w = ptr(op.inputs[1]);
  cb.bias = bias ? ptr(op.inputs[2]) : nullptr;
  cb.res = res ? ptr(op.inputs[3]) : nullptr;
  cb.y = ptr(op.outputs[0]);
  cb.ws = workspace_;
  cb.ws_bytes = workspace_bytes_;
  cb.stream = stream_;
  return cb;
}

std::string CudaEngine::conv_key(size_t i, int batch) const {
  const graph::Op& op = g_.ops[i];
  const ConvShape s = conv_shape(i, batch);
  const bool bias = op.has_input(2), res = op.has_input(3);  // optional inputs may be kNoTensor
  return std::to_string(s.B) + "," + std::to_string(s.H) + "," + std::to_string(s.W) + "," + std::to_string(s.Ci) +
         "," + std::to_string(s.Co) + "," + std::to_string(s.kh) + "," + std::to_string(s.kw) + "," +
         std::to_string(s.stride) + "," + std::to_string(s.pad) + "," + std::to_string(bias) + std::to_string(res) +
         graph::act_name(op.act()) + (op.res_after_act() ? ",res_after_act" : "");
}

std::shared_ptr<FusedConv> CudaEngine::fused_conv_plan(size_t i, int batch, cudnnHandle_t h, const std::string& tag,
                                                       std::string* why) {
  const graph::Op& op = g_.ops[i];
  const ConvShape s = conv_shape(i, batch);
  const bool bias = op.has_input(2), res = op.has_input(3);  // optional inputs may be kNoTensor
  const std::string plan_key = conv_key(i, batch) + tag + (share_conv_plans_ ? "" : "#" + std::to_string(i));
  auto it = fused_cache_.find(plan_key);
  if (it == fused_cache_.end()) {
    const ConvBuffers cb = op_buffers(op, bias, res);
    ConvTune tune{conv_tune_, cb.x, cb.w, cb.bias, cb.res, cb.y, cb.ws, cb.stream};
    const bool in_graph = conv_tune_graph_ > 0 || conv_knobs_ > 0;
    if (in_graph) {
      tune.max_plans = std::max(conv_tune_graph_, 1);  // cuda_settings.h at conv_tune_graph_ says why
      tune.in_graph = true;
      tune.knob_max_pixels = conv_knobs_;
    }
    // Timed choices go through the tuning cache (cuda_tune_cache.cpp), on the engine's own handle:
    // side handles (conv_handles_ 1) re-plan a conv the main handle has already tuned.
    const bool cached = in_graph && h == cudnn_;
    auto make = [&](size_t ws_limit) {
      return cached ? tuned_fused_conv(conv_key(i, batch), s, bias, res, op.act(), op.res_after_act(), ws_limit, tune,
                                       why, batch)
                    : make_fused_conv(h, s, bias, res, op.act(), ws_limit, why, &tune, nullptr, op.res_after_act());
    };
    std::unique_ptr<FusedConv> fc;
    if (conv_ws0_) fc = make(0);
    if (!fc) fc = make(workspace_bytes_);
    it = fused_cache_.emplace(plan_key, std::move(fc)).first;
  }
  return it->second;
}

bool CudaEngine::conv_as_linear(size_t i) const {
  const graph::Op& op = g_.ops[i];
  if (!half_ || !fuse_conv_ || conv_linear_ == 0 || op.res_after_act()) return false;
  const ConvShape s = conv_shape(i, 1);
  if (s.kh != 1 || s.kw != 1 || s.stride != 1 || s.pad != 0) return false;
  const Act act = op.act();
  if (act == Act::none || act == Act::relu || conv_linear_ >= 3) return true;
  // Mode 2: a conv whose output is only ever another op's residual input (a CSP block's conv2,
  // added after the last bottleneck) is off the dependency chain, so the extra activation pass
  // costs nothing there, while leaving the ordered fused convs frees it to overlap them.
  return conv_linear_ >= 2 && feeds_only_residuals(i);
}

bool CudaEngine::conv_as_im2col(size_t i, int batch) const {
  const graph::Op& op = g_.ops[i];
  if (!half_ || !fuse_conv_ || conv_im2col_ == 0 || op.res_after_act() || static_cast<int>(i) == stem_op_) return false;
  const ConvShape s = conv_shape(i, batch);
  if (s.kh * s.kw == 1 || static_cast<int64_t>(s.B) * s.Ho * s.Wo > conv_im2col_) return false;
  // The columns go above cuBLASLt's share of the workspace (kLtWorkspace).
  return im2col_bytes(s, half_) <= workspace_bytes_ - kLtWorkspace && im2col_supported(s, half_, ptr(op.inputs[0]), workspace_);
}

bool CudaEngine::tile_takes(const graph::Op& op, int64_t rows, int N, int K) const {
  auto in = [&](size_t k) {
    return k < op.inputs.size() && op.inputs[k] != graph::kNoTensor ? ptr(op.inputs[k]) : nullptr;
  };
  return half_ && rows <= tile_linear_rows_ && K <= tile_max_k_ &&
         tile_linear_ok(rows, N, K, in(0), in(1), in(2), in(3), ptr(op.outputs[0]));
}

bool CudaEngine::conv_as_tile(size_t i, int batch) {
  const graph::Op& op = g_.ops[i];
  if (!tile_conv_ || op.res_after_act()) return false;
  const ConvShape s = conv_shape(i, batch);
  if (s.kh != 1 || s.kw != 1 || s.stride != 1 || s.pad != 0 || s.Ho != s.H || s.Wo != s.W) return false;
  return tile_takes(op, static_cast<int64_t>(s.B) * s.H * s.W, s.Co, s.Ci);
}

bool CudaEngine::feeds_only_residuals(size_t i) const {
  const graph::TensorId out = g_.ops[i].outputs[0];
  int uses = 0;
  for (const auto& o : g_.ops)
    for (size_t k = 0; k < o.inputs.size(); ++k)
      if (o.inputs[k] == out) {
        if (k != 3 || o.kind != OpKind::conv2d) return false;
        ++uses;
      }
  for (auto t : g_.outputs)
    if (t == out) return false;
  return uses > 0;
}

void CudaEngine::build_op_plan(size_t i, BatchPlan& p, int batch) {
  const graph::Op& op = g_.ops[i];
  if (op.kind == OpKind::conv2d && static_cast<int>(i) == stem_op_) return;  // conv_stem needs no plan
  if (in_stem_fused(i)) return;                                               // nor stem_fused
  if (op.kind == OpKind::conv2d) {
    const ConvShape s = conv_shape(i, batch);
    const bool bias = op.has_input(2), res = op.has_input(3);  // optional inputs may be kNoTensor
    // A 1x1 conv (conv_linear_) or, after im2col, a kxk conv (conv_im2col_) as one cuBLASLt GEMM
    // over B*Ho*Wo pixel rows; cuda_settings.h at those settings says why.
    const bool cols = conv_as_im2col(i, batch);
    if (cols || conv_as_linear(i)) {
      const int64_t rows = static_cast<int64_t>(s.B) * s.Ho * s.Wo;
      p.lin[i] = lt_linear(lt_, rows, s.Co, s.kh * s.kw * s.Ci, half_, bias, op.act(), res, workspace_bytes_, op, 0);
      if (!cols) tune_lt(*p.lin[i], op, rows, s.Co, s.Ci, bias, res);
      p.im2col[i] = cols;
      ++(cols ? p.n_conv_im2col : p.n_conv_linear);
      return;
    }
    if (conv_as_tile(i, batch)) {  // a 1x1 conv as a linear over B*H*W pixel rows, on tile_linear
      p.small_lin[i] = SmallLinear::tile;
      return;
    }
    if (half_ && fuse_conv_) {
      std::string why = "unsupported (cached)";
      const std::string key = conv_key(i, batch);
      const ConvBuffers cb = op_buffers(op, bias, res);
      p.fused[i] = fused_conv_plan(i, batch, cudnn_, "", &why);
      // Our implicit-GEMM epilogue adds the residual before the activation only.
      const bool own_ok = !op.res_after_act();
      // cuda_settings.h at offchain_own_ says why an off-chain conv takes an own kernel even when slower.
      const bool offchain = offchain_own_ && own_conv_ == OwnConvMode::off && feeds_only_residuals(i);
      const OwnConvMode mode = offchain ? OwnConvMode::force : own_conv_;
      if (own_ok && (p.fused[i] || own_conv_forced(mode))) {
        const std::string own_key = key + (offchain ? "#offchain" : "");
        auto oc = own_conv_cache_.find(own_key);
        if (oc == own_conv_cache_.end()) {
          std::function<void()> ref;
          if (auto* f = p.fused[i].get()) ref = [f, cb] { f->run(cb.x, cb.w, cb.bias, cb.res, cb.y, cb.ws, cb.stream); };
          oc = own_conv_cache_.emplace(own_key, own_choice(own_key, ref, s, op.act(), cb, mode, batch)).first;
        }
        p.own_conv[i] = oc->second.variant;
        if (p.own_conv[i] >= 0) ++p.n_own;
      }
      if (p.fused[i] || p.own_conv[i] >= 0) {
        ++p.n_fused;
        return;
      }
      if (p.unfused_why.empty()) p.unfused_why = op.name + ": " + why;
    }
    ++p.n_unfused;
    p.conv[i] = std::make_unique<CudnnConv>(cudnn_, s, half_, workspace_bytes_, op_label(op));
  } else if (op.kind == OpKind::linear) {
    const auto& w = g_.tensor(op.inputs[1]).shape;
    const int N = static_cast<int>(w[0]), K = static_cast<int>(w[1]);
    const int64_t rows = g_.tensor(op.inputs[0]).numel() / K * batch;
    const bool bias = op.has_input(2);
    const bool res = op.has_input(3);
    if (small_linear_) {
      // K <= 8 or N <= 8: own kernel, no library plan (kernels/small_linear.cu says why).
      p.small_lin[i] = small_linear_kind(rows, N, K, half_, ptr(op.inputs[0]), ptr(op.inputs[1]),
                                         bias ? ptr(op.inputs[2]) : nullptr, res ? ptr(op.inputs[3]) : nullptr,
                                         ptr(op.outputs[0]));
      // The small-N kernel measured slower than cuBLASLt on every r18vd use (mode 2 only).
      if (p.small_lin[i] == SmallLinear::small_n && small_linear_ < 2) p.small_lin[i] = SmallLinear::none;
      if (p.small_lin[i] != SmallLinear::none) return;
    }
    if (tile_takes(op, rows, N, K)) {
      p.small_lin[i] = SmallLinear::tile;  // own latency-bound GEMM (kernels/tile_linear.cu says why)
      return;
    }
    const bool relu = lt_fuses_relu(op.act(), res);
    // On the green stream (DETFORGE_CUDA_GREEN_SMS) a plan for the partition's SMs.
    const int sm_target = green_op_[i] && green_at(batch) ? green_->sms()
                          : rows >= 4096 && rows <= 16800             ? lt_sm_target_
                                                                       : 0;
    p.lin[i] = lt_linear(lt_, rows, N, K, half_, bias, op.act(), res, workspace_bytes_, op, sm_target);
    tune_lt(*p.lin[i], op, rows, N, K, bias, res);
    if (half_ && own_conv_ != OwnConvMode::off) {
      // A linear is a 1x1 convolution over `rows` pixels: our implicit-GEMM variants compete
      // with cuBLASLt, whose tiny GEMMs (300 x 256 x 256) take ~3 us each at batch 1.
      const std::string key = "linear," + std::to_string(rows) + "," + std::to_string(N) + "," + std::to_string(K) +
                               "," + std::to_string(bias) + std::to_string(res) + std::to_string(relu);
      auto oc = own_conv_cache_.find(key);
      if (oc == own_conv_cache_.end()) {
        const ConvBuffers cb = op_buffers(op, bias, res);
        const LtLinear* lt = p.lin[i].get();
        std::function<void()> ref = [lt, cb] { lt->run(cb.x, cb.w, cb.bias, cb.res, cb.y, cb.ws, cb.stream); };
        oc = own_conv_cache_.emplace(key, own_choice(key, ref, linear_as_conv(rows, N, K), relu ? Act::relu : Act::none,
                                                     cb, own_conv_, batch)).first;
      }
      p.own_conv[i] = oc->second.variant;
      if (p.own_conv[i] >= 0) ++p.n_own_linear;
    }
  }
}

void CudaEngine::launch_op(size_t i, BatchPlan& p, int B, cudaStream_t s, void* ws) {
  const graph::Op& op = g_.ops[i];
  if (launch_stem_fused(i, B, s)) return;
  if (launch_row_chain(i, p, B, s)) return;
  if (launch_box_step(i, B, s)) return;
  if (launch_dec_tail(i, p, B, s)) return;
  // a later op's launch does its work (a pair's linear only where linear_ln runs at this batch,
  // a decoder tail's op only where the tail runs as one launch)
  if (!absorbed_.empty() && absorbed_[i] && (linear_ln_lin_of_.empty() || linear_ln_lin_of_[i] < 0 || p.linear_ln_on[i]) &&
      (dec_tail_member_.empty() || !dec_tail_member_[i] || p.dec_tail_on))
    return;
  if (launch_linear_ln(i, p, B, s)) return;
  if (launch_ln_add(i, B, s)) return;
  auto in = [&](size_t k) -> void* {
    return k < op.inputs.size() && op.inputs[k] != graph::kNoTensor ? ptr(op.inputs[k]) : nullptr;
  };
  // Input k from column `col` of its rows (attention and ms_deform_attn read column slices).
  auto in_col = [&](size_t k, int64_t col) { return static_cast<char*>(in(k)) + col * (half_ ? 2 : 4); };
  auto shape = [&](size_t k) -> const std::vector<int64_t>& { return g_.tensor(op.inputs[k]).shape; };
  const std::vector<int64_t>& oshape = g_.tensor(op.outputs[0]).shape;
  void* y = ptr(op.outputs[0]);
  const int64_t n_out = g_.tensor(op.outputs[0]).numel() * B;
  switch (op.kind) {
    case OpKind::conv2d: {
      if (static_cast<int>(i) == stem_op_) {
        conv_stem(d_in32_, in(1), in(2), y, conv_shape(i, B), op.act(), half_, s, stem_mode_ == 1);
        break;
      }
      if (p.own_conv[i] >= 0) {
        run_own_conv(in(0), in(1), in(2), in(3), y, conv_shape(i, B), op.act(), p.own_conv[i], ws, s);
        break;
      }
      if (p.small_lin[i] == SmallLinear::tile) {  // 1x1: x [B*H*W, Ci], w [Co, Ci], act(x w^T + b + res)
        const ConvShape cs = conv_shape(i, B);
        tile_linear(in(0), in(1), in(2), in(3), y, n_out / cs.Co, cs.Co, cs.Ci, op.act(), tile_early_, s);
        break;
      }
      if (p.lin[i]) {  // a conv as a linear over B*Ho*Wo pixel rows: act(x W^T + b + residual)
        const void* x = in(0);
        if (p.im2col[i]) {  // kxk: x becomes the columns [B*Ho*Wo, kh*kw*Ci], above cuBLASLt's workspace
          void* cols = static_cast<char*>(ws) + kLtWorkspace;
          im2col(x, cols, conv_shape(i, B), half_, s);
          x = cols;
        }
        p.lin[i]->run(x, in(1), in(2), in(3), y, ws, s);
        if (lt_needs_act_pass(op.act(), in(3)))
          bias_act(y, nullptr, nullptr, y, n_out, static_cast<int>(oshape.back()), op.act(), half_, s);
        break;
      }
      if (p.fused[i]) {
        p.fused[i]->run(in(0), in(1), in(2), in(3), y, ws, s);
        break;
      }
      p.conv[i]->run(in(0), in(1), y, ws, s);
      const Act act = op.act();
      if (op.res_after_act() && in(3)) {  // act(conv + b) + residual: two passes
        bias_act(y, in(2), nullptr, y, n_out, static_cast<int>(oshape.back()), act, half_, s);
        add_act(y, in(3), n_out, y, n_out, Act::none, half_, s);
      } else if (in(2) || in(3) || act != Act::none) {
        bias_act(y, in(2), in(3), y, n_out, static_cast<int>(oshape.back()), act, half_, s);
      }
      break;
    }
    case OpKind::linear: {
      const int N = static_cast<int>(shape(1)[0]);
      const Act act = op.act();
      if (p.small_lin[i] == SmallLinear::tile) {  // act and residual in the kernel
        tile_linear(in(0), in(1), in(2), in(3), y, n_out / N, N, static_cast<int>(shape(1)[1]), act, tile_early_, s);
        break;
      }
      if (p.small_lin[i] != SmallLinear::none) {  // act and residual in the kernel
        small_linear(p.small_lin[i], in(0), in(1), in(2), in(3), y, n_out / N, N, static_cast<int>(shape(1)[1]), act,
                     half_, s);
        break;
      }
      if (p.own_conv[i] >= 0) {
        const int K = static_cast<int>(shape(1)[1]);
        run_own_conv(in(0), in(1), in(2), in(3), y, linear_as_conv(n_out / N, N, K),
                     lt_fuses_relu(act, in(3)) ? Act::relu : Act::none, p.own_conv[i], ws, s);
      } else {
        p.lin[i]->run(in(0), in(1), in(2), in(3), y, ws, s);
      }
      if (lt_needs_act_pass(act, in(3))) bias_act(y, nullptr, nullptr, y, n_out, N, act, half_, s);
      break;
    }
    case OpKind::max_pool2d:
    case OpKind::avg_pool2d: {
      const auto& x = shape(0);
      const int k = op.attr_int("kernel"), st = op.attr_int_or("stride", k), pad = op.attr_int_or("pad", 0);
      if (op.kind == OpKind::max_pool2d)
        max_pool2d(in(0), y, B, (int)x[0], (int)x[1], (int)x[2], (int)oshape[0], (int)oshape[1], k, st, pad, half_, s,
                   pool_quad_);
      else
        avg_pool2d(in(0), y, B, (int)x[0], (int)x[1], (int)x[2], (int)oshape[0], (int)oshape[1], k, st, pad, half_, s);
      break;
    }
    case OpKind::upsample_nearest2x: {
      const auto& x = shape(0);
      upsample_nearest2x(in(0), y, B, (int)x[0], (int)x[1], (int)x[2], half_, s);
      break;
    }
    case OpKind::concat: {
      const int axis = op.attr_int("axis");
      const int64_t outer = prod(oshape, 0, axis) * B;
      const int64_t ld = prod(oshape, axis, oshape.size());
      // One launch for all parts (the 5 concats of r18vd were 11 launches, 16.5 us at batch 1).
      std::vector<ConcatPart> parts;
      int64_t off = 0;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const int64_t inner = prod(shape(k), axis, shape(k).size());
        const graph::TensorId src = upsampled_from_.empty() ? graph::kNoTensor : upsampled_from_[op.inputs[k]];
        if (src != graph::kNoTensor)  // the upsample launched nothing: read its source (cuda_upsample_concats.cpp)
          parts.push_back({ptr(src), inner, off, true});
        else
          parts.push_back({in(k), inner, off});
        off += inner;
      }
      const bool grid = oshape.size() == 3;
      concat(parts.data(), static_cast<int>(parts.size()), y, outer, ld, half_, s, grid ? (int)oshape[0] : 0,
             grid ? (int)oshape[1] : 0);
      break;
    }
    case OpKind::add: {
      size_t a = 0, b = 1;
      if (g_.tensor(op.inputs[0]).is_const) std::swap(a, b);
      const bool bconst = g_.tensor(op.inputs[b]).is_const;
      const int64_t bn = bconst ? g_.tensor(op.inputs[b]).numel() : n_out;
      add_act(in(a), in(b), bn, y, n_out, op.act(), half_, s);
      break;
    }
    case OpKind::mul_rows: {
      const auto& x = shape(0);
      const int C = static_cast<int>(x.back());
      const int L = static_cast<int>(g_.tensor(op.inputs[0]).numel() / C);
      mul_rows(in(0), in(1), y, (int64_t)L * B, L, C, half_, s);
      break;
    }
    case OpKind::activation:
      bias_act(in(0), nullptr, nullptr, y, n_out, 8, op.act(), half_, s);  // C only indexes a bias
      break;
    case OpKind::layer_norm: {
      const int C = static_cast<int>(shape(0).back());
      const float eps = op.attrs.contains("eps") ? op.attr_float("eps") : 1e-5f;
      layer_norm(in(0), in(3), in(1), in(2), y, n_out / C, C, eps, half_, s);
      break;
    }
    case OpKind::attention: {
      // q, k and v may be column slices of wider tensors (graph::merge_qk_projections).
      const auto cols = graph::attention_columns(op);
      const int L = (int)shape(0)[0], S = (int)shape(1)[0], C = (int)g_.tensor(op.outputs[0]).shape[1];
      const int heads = op.attr_int("heads");
      if (C % heads) throw Error("cuda backend: attention " + op.name + ": channels not divisible by heads");
      attention(in_col(0, cols.q), in_col(1, cols.k), in_col(2, cols.v), y, B, L, S, C, heads, op.attr_float("scale"), half_, s,
                {(int)shape(0)[1], (int)shape(1)[1], (int)shape(2)[1]});
      break;
    }
    case OpKind::ms_deform_attn: {
      DeformShape sh;
      sh.heads = op.attr_int("heads");
      sh.levels = op.attr_int("levels");
      sh.points = op.attr_int("points");
      sh.offset_scale = op.attr_float("offset_scale");
      if (sh.levels > 8) throw Error("cuda backend: ms_deform_attn " + op.name + ": more than 8 levels");
      const auto& ss = op.attrs.at("spatial_shapes");
      const auto& ls = op.attrs.at("level_start");
      for (int l = 0; l < sh.levels; ++l) {
        sh.H[l] = ss.at(l).at(0).get<int>();
        sh.W[l] = ss.at(l).at(1).get<int>();
        sh.start[l] = ls.at(l).get<int>();
      }
      // offsets and logits may be column slices of one tensor (graph::merge_deform_projections),
      // the value a slice of the merged value projection (graph::merge_value_projections); the
      // engine checked at load that they lie inside their inputs (graph::deform_columns_error).
      const auto cols = graph::deform_columns(g_, op);
      const int Lv = (int)shape(0)[0], C = (int)cols.v_width, Q = (int)shape(1)[0];
      ms_deform_attn(in_col(0, cols.v_col), in_col(1, cols.off_col), in_col(2, cols.aw_col), in(3), in(4), y, B, Lv, Q,
                     C, sh, half_, s, {(int)cols.off_ld, (int)cols.aw_ld, (int)cols.v_ld});
      break;
    }
    case OpKind::topk_rows: {
      const auto& x = shape(0);
      if (topk_cluster_ && topk_rows_cluster_supported((int)x[0], op.attr_int("k"))) {
        topk_rows_cluster(in(0), static_cast<int32_t*>(y), B, (int)x[0], (int)x[1], op.attr_int("k"), half_, s);
        break;
      }
      // Split: B*L 4-byte keys (4 MiB at batch 64, L 16384) in the stream's 64 MiB workspace.
      const bool split = (topk_split_ == 1 || (topk_split_ == 2 && x[1] > 16)) &&
                         static_cast<size_t>(B) * x[0] * 4 <= workspace_bytes_;
      topk_rows(in(0), static_cast<int32_t*>(y), B, (int)x[0], (int)x[1], op.attr_int("k"), half_, s,
                split ? static_cast<uint32_t*>(ws) : nullptr);
      break;
    }
    case OpKind::gather_rows: {
      const auto& x = shape(0);
      const int K = static_cast<int>(g_.tensor(op.inputs[1]).numel());
      gather_rows(in(0), static_cast<const int32_t*>(in(1)), y, B, (int)x[0], K, (int)(g_.tensor(op.inputs[0]).numel() / x[0]), half_, s,
                  g_.tensor(op.inputs[0]).is_const);
      break;
    }
    case OpKind::box_refine:
      box_refine(in(0), in(1), y, n_out, half_, s);
      break;
    case OpKind::reshape:
      break;  // alias: the output shares the input's memory
    case OpKind::batch_norm:
      throw Error("cuda backend: batch_norm " + op.name + " was not folded");
  }
}

}  // namespace detforge::cuda
