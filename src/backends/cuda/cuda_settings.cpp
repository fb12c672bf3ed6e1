// The DETFORGE_CUDA_* settings of the CUDA engine, read once when an engine is created (the
// README's settings paragraph lists them; cuda_settings.h says at each member what it measured).
#include <algorithm>
#include <cstdlib>
#include <thread>
#include <string>

#include "backends/cuda/conv_select.h"
#include "backends/cuda/cuda_engine.h"
#include "backends/cuda/cuda_settings.h"
#include "backends/cuda/kernels/kernels.h"

namespace detforge::cuda {

int env_int(const char* name, int dflt, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    throw Error(std::string("cuda backend: ") + name + "=" + v + " is not an integer in " + std::to_string(lo) +
                ".." + std::to_string(hi));
  return static_cast<int>(x);
}

void CudaEngine::read_settings() {
  if (const char* f = std::getenv("DETFORGE_CUDA_FUSED_CONV")) fuse_conv_ = std::string(f) != "0";
  max_streams_ = env_int("DETFORGE_CUDA_STREAMS", max_streams_, 1, 8);
  conv_tune_ = env_int("DETFORGE_CUDA_CONV_TUNE", conv_tune_, 0, 64);
  // DETFORGE_CUDA_TUNE (default 1 up to kTuneMaxBatch images) and its cache: cuda_settings.h at
  // tune_cache_dir_ says why.
  const bool tune = env_int("DETFORGE_CUDA_TUNE", max_batch_ <= kTuneMaxBatch ? 1 : 0, 0, 1) != 0;
  if (tune) {
    conv_tune_graph_ = 4;
    conv_knobs_ = 1600;
  }
  conv_tune_graph_ = env_int("DETFORGE_CUDA_CONV_TUNE_GRAPH", conv_tune_graph_, 0, 64);
  conv_knobs_ = env_int("DETFORGE_CUDA_CONV_KNOBS", conv_knobs_, 0, 1 << 30);
  conv_ws0_ = env_int("DETFORGE_CUDA_CONV_WS0", 0, 0, 1) != 0;
  const char* cache = std::getenv("DETFORGE_CUDA_TUNE_CACHE");
  tune_cache_dir_ = !cache || !*cache ? default_cache_dir().string() : std::string(cache) == "0" ? "" : cache;
  share_conv_plans_ = env_int("DETFORGE_CUDA_SHARE_CONV_PLANS", 0, 0, 1) != 0;
  conv_handles_ = env_int("DETFORGE_CUDA_CONV_HANDLES", conv_handles_, 0, 9);  // cuda_settings.h says why 0
  snapshots_ = env_int("DETFORGE_CUDA_SNAPSHOTS", 0, 0, 1) != 0;
  // Measured on the H200 (bench/results/h200/ab-2026-12-03b-sched, fp16 engine p50): memset nodes
  // as kernels 0.7280 -> 0.7255 ms at batch 1, 6.378 -> 6.317 ms at batch 32; early outputs alone
  // within noise; both on by default (=0 turns each off).
  memset_kernels_ = env_int("DETFORGE_CUDA_MEMSET_KERNELS", 1, 0, 1) != 0;
  early_outputs_ = env_int("DETFORGE_CUDA_EARLY_OUTPUTS", 1, 0, 1) != 0;
  eager_fence_ = env_int("DETFORGE_CUDA_EAGER_FENCE", 1, 0, 1);
  gpu_select_ = env_int("DETFORGE_CUDA_GPU_SELECT", 1, 0, 1) != 0;  // run_images_selected()
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  if (hw < static_cast<unsigned>(stage_threads_)) stage_threads_ = 0;  // the default: one copy thread was slower than serial
  stage_threads_ = env_int("DETFORGE_CUDA_STAGE_THREADS", stage_threads_, 0, 64);
  stage_side_ = env_int("DETFORGE_CUDA_STAGE_SIDE", 1, 0, 1) != 0;
  stage_threads_ = std::min<int>(stage_threads_, static_cast<int>(hw));  // 0 stays 0
  own_conv_ = own_conv_mode_from_env(tune ? OwnConvMode::fastest : OwnConvMode::off);
  own_conv_margin_ = own_conv_margin_from_env(tune ? 1.3 : 1.0);
  row_mlp_ = env_int("DETFORGE_CUDA_ROW_MLP", 0, 0, 1) != 0;  // off: slower, NOTES.md v7
  box_step_on_ = env_int("DETFORGE_CUDA_BOX_STEP", 1, 0, 1) != 0;
  dec_tail_on_ = env_int("DETFORGE_CUDA_DEC_TAIL", 0, 0, 1) != 0;
  dec_tail_max_rows_ = env_int("DETFORGE_CUDA_DEC_TAIL_MAX_ROWS", static_cast<int>(dec_tail_max_rows_), 1, 1 << 30);
  priority_ = env_int("DETFORGE_CUDA_PRIORITY", 0, 0, 2);
  ln_add_on_ = env_int("DETFORGE_CUDA_LN_ADD", 1, 0, 1) != 0;
  linear_ln_mode_ = env_int("DETFORGE_CUDA_LINEAR_LN", 0, 0, 2);
  linear_ln_split_ = env_int("DETFORGE_CUDA_LINEAR_LN_SPLIT", 0, 0, 8);
  linear_ln_max_rows_ = env_int("DETFORGE_CUDA_LINEAR_LN_MAX_ROWS", static_cast<int>(linear_ln_max_rows_), 1, 1 << 30);
  topk_split_ = env_int("DETFORGE_CUDA_TOPK_SPLIT", topk_split_, 0, 2);
  topk_cluster_ = env_int("DETFORGE_CUDA_TOPK_CLUSTER", topk_cluster_ ? 1 : 0, 0, 1) != 0;
  pool_quad_ = env_int("DETFORGE_CUDA_POOL_QUAD", 0, 0, 1) != 0;
  pad_input_ = env_int("DETFORGE_CUDA_PAD_INPUT", 0, 0, 8);
  if (pad_input_ != 0 && pad_input_ != 4 && pad_input_ != 8)
    throw Error("cuda backend: DETFORGE_CUDA_PAD_INPUT=" + std::to_string(pad_input_) + " is not 0, 4 or 8");
  stem_mode_ = env_int("DETFORGE_CUDA_STEM", 0, 0, 2);
  // The fused stem by default (mode 2); a direct stem or padded input asked for takes the conv instead.
  stem_fused_ = env_int("DETFORGE_CUDA_STEM_FUSED", stem_mode_ == 0 && pad_input_ == 0 ? 2 : 0, 0, 3);
  if (stem_mode_ != 0 || stem_fused_) pad_input_ = 0;  // the direct and the fused stem read the fp32 input
  upsample_concat_on_ = env_int("DETFORGE_CUDA_UPSAMPLE_CONCAT", 1, 0, 1) != 0;
  late_value_ = env_int("DETFORGE_CUDA_LATE_VALUE", late_value_, 0, 4);
  green_sms_ = env_int("DETFORGE_CUDA_GREEN_SMS", 0, 0, 1024);
  // Own kernels for the linears with K <= 8 or N <= 8 (kernels/small_linear.cu): cuBLASLt took
  // ~3-3.6 us for each of the decoder's query_pos_head.layers.0 and bbox head last layers at
  // batch 1, ~8.6 us for the encoder's bbox head (H200 CUPTI). DETFORGE_CUDA_SMALL_LINEAR: 0 all
  // on cuBLASLt, 1 (default) the small-K kernel only, 2 both. Measured (H200, fp16 batch 1,
  // ab-2026-12-03b-sched call 3): small-K 2.3-3.2 us against CUTLASS's 2.9-3.8; small-N slower
  // everywhere (4.2-5.0 us against 3.6-3.7 for N = 4 at 300 rows, 15.4 against 3.6 for the
  // 8400-row score head), and both together were 0.6814 against 0.6687 ms off.
  small_linear_ = env_int("DETFORGE_CUDA_SMALL_LINEAR", 1, 0, 2);
  tile_linear_rows_ = env_int("DETFORGE_CUDA_TILE_LINEAR", static_cast<int>(tile_linear_rows_), 0, 1 << 30);
  tile_conv_ = env_int("DETFORGE_CUDA_TILE_CONV", tile_conv_ ? 1 : 0, 0, 1) != 0;
  tile_max_k_ = env_int("DETFORGE_CUDA_TILE_MAX_K", tile_max_k_, 64, kTileLinearMaxK);
  tile_early_ = env_int("DETFORGE_CUDA_TILE_EARLY", tile_early_ ? 1 : 0, 0, 1) != 0;
  op_workspaces_ = env_int("DETFORGE_CUDA_OP_WORKSPACE", 0, 0, 1) != 0;
  graph_check_ = env_int("DETFORGE_CUDA_GRAPH_CHECK", 1, 0, 1) != 0;
  arena_guard_ = env_int("DETFORGE_CUDA_ARENA_GUARD", 0, 0, 1) ? kArenaGuardBytes : 0;
  arena_reuse_ = env_int("DETFORGE_CUDA_ARENA_REUSE", 1, 0, 1) != 0;
  full_edges_ = env_int("DETFORGE_CUDA_FULL_EDGES", full_edges_, 0, 3);
  lt_sm_target_ = env_int("DETFORGE_CUDA_LT_SM_TARGET", lt_sm_target_, 0, 1024);
  lt_tune_ = env_int("DETFORGE_CUDA_LT_TUNE", 0, 0, 8);
  conv_linear_ = env_int("DETFORGE_CUDA_CONV_LINEAR", conv_linear_, 0, 3);
  conv_im2col_ = env_int("DETFORGE_CUDA_CONV_IM2COL", 0, 0, 1 << 30);
  offchain_own_ = env_int("DETFORGE_CUDA_OFFCHAIN_OWN", offchain_own_ ? 1 : 0, 0, 1) != 0;
  // Programmatic dependent launch of our own kernels (kernels/common.cuh): process-wide.
  // 1 (default): every launch of our kernels; 2: only ops that wait on no other stream; 0: off.
  // Measured (ab-2026-12-03b-sched): 0.7280 -> 0.7210 ms at batch 1 (PDL=2: 0.7188), batch 32
  // unchanged. It was off for a while after a fused-vs-unfused engine test failed with it; the
  // same run showed the default engine itself giving differing replays without PDL
  // (CudaDeterminism), so PDL was not the cause.
  pdl_mode_ = env_int("DETFORGE_CUDA_PDL", 1, 0, 2);
  set_pdl_enabled(pdl_mode_ != 0);
}

}  // namespace detforge::cuda
