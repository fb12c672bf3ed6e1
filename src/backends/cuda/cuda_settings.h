// The CUDA engine's settings from the environment: the DETFORGE_CUDA_* members that
// cuda_settings.cpp reads once per engine (CudaEngine derives from CudaSettings, so they keep
// their names there). Each comment says what the setting does and the measured why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/cuda/conv_select.h"

namespace detforge::cuda {

struct CudaSettings {
  // DETFORGE_CUDA_OP_WORKSPACE=1 (a debugging aid, off by default): every op that takes a
  // workspace gets bytes of its own instead of its stream's, so no two ops share workspace bytes.
  bool op_workspaces_ = false;
  // DETFORGE_CUDA_ARENA_GUARD=1 (a debugging aid, off by default): every arena buffer is followed
  // by kArenaGuardBytes of its own, which arena_overruns() watches.
  static constexpr size_t kArenaGuardBytes = 4096;
  size_t arena_guard_ = 0;
  bool arena_reuse_ = true;  // DETFORGE_CUDA_ARENA_REUSE (op_outputs)
  // DETFORGE_CUDA_FULL_EDGES: 1 programmatic edges into library-kernel ops become full edges after
  // capture (harden_edges), 2 every programmatic edge, 0 none, 3 (the default) see below. Same-stream
  // early starts are not safe either: hardening only the cross-stream ones (a mode 3, tenth session)
  // left 16 of 16 inputs differing (CudaGraphEqualsEager, H200), so it was removed. Why: without reuse
  // of arena bytes (op_outputs, ninth session) the first op whose graph output differed from the eager
  // one was a block's second conv (runtime-compiled cuDNN kernel) whose input came from another
  // stream, with that input itself equal: it read the input before its producer had finished, although
  // the graph holds the edge (capture_misses_hazards).
  // 3 (the default since session 25): as 1, and the edges into the library kernels that do wait for a
  // programmatic predecessor (cuDNN engine 41, CudaLibraryWaits) made programmatic. The probe found
  // cuBLASLt's nvjet kernels do not wait: with their edges programmatic the graph differed from the
  // eager forward on 16 of 16 inputs (H100), so they stay full. Measured (H100): b1 0.6566/0.6586
  // against 0.6703/0.6788 ms (session 25), 0.6606/0.6592 against 0.6672/0.6723 (session 22), b32
  // equal; the GPU suite 180/180 with it. It waited for the graph-vs-eager difference of NOTES.md
  // v25-v28, which was the eager forward's (closed by eager_fence_).
  int full_edges_ = 3;
  bool fuse_conv_ = true;  // DETFORGE_CUDA_FUSED_CONV=0 turns it off (A/B timing)
  int max_streams_ = 4;    // DETFORGE_CUDA_STREAMS (1 = one stream, the v1-v4 behaviour)
  int conv_tune_ = 0;      // DETFORGE_CUDA_CONV_TUNE=K: time cuDNN's first K fused-conv plans
  // DETFORGE_CUDA_TUNE=1: the three load-time tunings that measured faster together,
  // conv_tune_graph_ 4, conv_knobs_ 1600 and own_conv_ 1 at margin 1.3 (each variable set on its
  // own still overrides); 0: the heuristics' plans and library kernels only. Default: 1 for fp16
  // engines of at most kTuneMaxBatch images, 0 above. Their timing is paid once per GPU, library
  // versions and settings (H100: ~11-13 s of load at batch 1, ~75 s at batch 32); the choices are
  // kept in the tuning cache and later loads take them from it (~2 s, as untuned). Measured from
  // the cache (H100, sessions 30-31, fp16 engine p50): batch 1 0.6467 ms against 0.6571 (1.6 %,
  // five pairs), batch 32 6.596 against 6.642 ms (0.7 %, for a first load of ~75 s: hence off
  // above kTuneMaxBatch). Quality with it within the bars (session 27).
  static constexpr int kTuneMaxBatch = 4;
  // DETFORGE_CUDA_TUNE_CACHE: the cache's folder (default $XDG_CACHE_HOME/detforge, else
  // ~/.cache/detforge); 0 = no cache (every load times again). cuda_tune_cache.cpp.
  std::string tune_cache_dir_;
  // DETFORGE_CUDA_CONV_TUNE_GRAPH=K (0 = off, the default; TUNE=1 sets 4): each fused conv
  // runs on the fastest of up to K plans of cuDNN's heuristic modes A and B, timed inside a
  // captured graph (ConvTune::in_graph). Why: at batch 1 the 20x20 and 40x40 convs run at 70-130
  // TFLOP/s on plans that do not split K (`segment_k_off`; stage 3's 3x3s take 12-16 us with 32
  // CTAs over a 4608-long K), the stem's C = 32 convs at ~110-230 TFLOP/s on sm80 kernels (34 us
  // for two), and the host-timed CONV_TUNE was never better (NOTES.md v13).
  int conv_tune_graph_ = 0;
  // DETFORGE_CUDA_CONV_KNOBS=P (0 = off, the default): fused convs of at most P output pixels also
  // time cuDNN plans with other split or tile knobs (ConvTune::knob_max_pixels) in the graph, against the
  // heuristic's first plan (or CONV_TUNE_GRAPH's candidates). Measured (H100, NOTES.md v22):
  // b1 0.8 % faster at P = 1600 (load 9.7 s against 1.8), 0.9 % at 6400 (50 s); b32 equal.
  int conv_knobs_ = 0;
  // DETFORGE_CUDA_CONV_WS0=1: fused convs take a plan without workspace when cuDNN has one. Some
  // plans with workspace clear it with a memset node first, and the graph idles ~12 us after it
  // (H200 CUPTI timeline, fp16 batch 1: the 32->64 stem conv). Off: the gap goes, but the plans
  // without workspace are slower (batch 1 0.7415 vs 0.7388 ms, batch 32 7.35 vs 6.58 ms).
  bool conv_ws0_ = false;
  bool memset_kernels_ = true;  // DETFORGE_CUDA_MEMSET_KERNELS (default 1): graph_memsets.h
  // DETFORGE_CUDA_EARLY_OUTPUTS (default 1): each graph output is converted to fp32 on its
  // producer's stream right after it; the three conversions after the join took ~4 us at the
  // tail of the batch-1 forward (H200 timeline).
  bool early_outputs_ = true;
  int pdl_mode_ = 1;       // DETFORGE_CUDA_PDL: 0 off, 1 all own kernels (default), 2 same-stream edges only
  // DETFORGE_CUDA_EAGER_FENCE: 1 (default) in the eager (uncaptured) forward every cuDNN and cuBLASLt
  // launch is preceded by pdl_fence (the wrappers call fence_before_library while forward holds a
  // LibraryFence), 0 none; the graph is unchanged. Why: cuDNN and cuBLASLt launch some kernels for an
  // early start (capture gives them programmatic edges, NOTES.md v12), and those kernels read their
  // inputs without waiting (CudaLibraryWaits). The graph makes such edges full (harden_edges); the
  // eager forward had nothing, so when its launches queued up behind a busy GPU a library kernel could
  // read its input before the op before it had written it. Measured (H100, session 25, NOTES.md v28):
  // without the fence the eager forward differed from the graph on 12 of 800 inputs, and a second
  // eager forward on each equalled the graph; with it on 0 of 800 (CudaEagerFence). That was the
  // graph-vs-eager difference of NOTES.md v25-v26.
  int eager_fence_ = 1;
  // DETFORGE_CUDA_SMALL_LINEAR: 0 off, 1 (default) linears with K <= 8 on kernels/small_linear.cu
  // instead of cuBLASLt, 2 also those with N <= 8 (build_op_plan).
  int small_linear_ = 1;
  // DETFORGE_CUDA_TILE_LINEAR=n: fp16 linears of at most n rows (batch x tokens) on
  // kernels/tile_linear.cu instead of cuBLASLt; 0 (default) none. Measured slower (H200 b1, one
  // command, tenth session): 0.6950-0.7068 ms against 0.6830/0.6853 for the defaults in every
  // setting tried (the 45 linears and 1x1 convs it took: 176 -> 228 us in the per-op profile).
  // Kept with its tests for the next try at the decoder's ~3.5 us linears (NOTES.md v13).
  int64_t tile_linear_rows_ = 0;
  // DETFORGE_CUDA_TILE_CONV=1: 1x1 convs (stride 1, no pad, residual before the activation) of at
  // most tile_linear_rows_ pixels run on tile_linear too.
  bool tile_conv_ = false;
  // DETFORGE_CUDA_TILE_MAX_K: larger K stays on cuBLASLt (K = 1024, fc2: 4.7-5.1 us either way);
  // DETFORGE_CUDA_TILE_EARLY=0: tile_linear launched without PDL (its blocks then do not wait on
  // SMs for their producer, and do not fetch W meanwhile).
  int tile_max_k_ = 512;
  bool tile_early_ = true;
  // DETFORGE_CUDA_LT_SM_TARGET=n (default 116, 0 = off): linears of 4096-16800 rows (r18vd's
  // 8400-row encoder heads at batch 1-2) ask cuBLASLt for plans on n SMs. Why: at batch 1 the
  // bbox head filled all 132 SMs, and the top-k select (one CTA needing a whole SM) waited ~7 us
  // for one (H200 timeline, 2026-12-03). Measured b1 0.6789 -> 0.6687 and 0.7016 -> 0.6930 ms in
  // two sessions; at batch 32 it cost 0-0.7 %, hence the row cap.
  int lt_sm_target_ = 116;
  // DETFORGE_CUDA_LT_TUNE=K (fp16; 0 = off, the default: K = 8 measured no faster on an H100,
  // 0.6626 / 0.6577 against 0.6566 / 0.6570 ms at batch 1, session 26): each cuBLASLt
  // linear runs on the fastest of the heuristic's first K deterministic candidates, timed inside a
  // captured graph on the op's own buffers and taken only when >= 2 % faster with the same
  // output (CudaEngine::tune_lt, as DETFORGE_CUDA_CONV_TUNE_GRAPH does for convs). Why: at batch 1
  // each decoder layer runs ~11 cuBLASLt GEMMs of 300 rows at 3.2-5 us on the critical path (H100
  // timeline, session 22), and the heuristic's first pick for such latency-bound shapes is a guess.
  int lt_tune_ = 0;
  // DETFORGE_CUDA_CONV_LINEAR (fp16 with fused convs): 1x1 stride-1 convs run as cuBLASLt linears
  // over B*H*W pixel rows (the bias and ReLU in the epilogue, other activations in one more pass).
  // 0 (default) off; 1 those with no activation or ReLU (r18vd: the stage-0 shortcut and the six
  // encoder / decoder input projections, which cuDNN ran through cuBLASLt anyway, engine 39); 2
  // also those whose output only feeds another conv's residual (the CSP blocks' SiLU conv2); 3
  // every 1x1. Why tried: the fused convs run one after another (conv_handles_), so a 1x1 beside
  // the chain waited its turn in it; as a linear it overlaps the chain (H200 b1 0.6908 -> 0.6800
  // with 1, 0.6681 ms with 2). Why off: with 1 or 2 the 4-stream graph differed from the eager
  // forward on 1-3 of 16 batch-1 inputs in every run (4 runs, graph check off; 0 with 0 in the
  // same command, eighth session): cuBLASLt GEMMs overlapping the fused convs meet the same
  // race as overlapping fused convs (conv_handles_). That race was the early-start edges (NOTES.md
  // v12); with them made full and convs free to overlap, mode 1 measured equal (b1 0.6843 vs
  // 0.6835 ms, tenth session), so it stays off.
  int conv_linear_ = 0;
  // DETFORGE_CUDA_CONV_IM2COL=P (default 0 = off, not yet run on a GPU): fp16 kxk convs of at
  // most P output pixels per forward (B*Ho*Wo) as im2col (kernels/im2col.cu) into the upper half
  // of the op's workspace plus one cuBLASLt GEMM, which may split K. Why: cuDNN ran stage 3's
  // 20x20 3x3 convs (M 400, N 512, K 4608) at 12-16 us with 32 CTAs, and had no better plan.
  int conv_im2col_ = 0;
  // DETFORGE_CUDA_OFFCHAIN_OWN=1: a non-1x1 conv whose output only feeds another conv's residual
  // (r18vd: backbone stages 1-3's shortcut, the avg-pool folded 2x2/2 conv) runs on our own
  // implicit-GEMM kernel (the fastest variant that matches cuDNN's output), even when slower than
  // cuDNN. Why: it is off the dependency chain, and as an own kernel it leaves the ordered fused
  // convs (conv_handles_), so it overlaps the chain instead of waiting its turn in it. Since the
  // convs overlap freely (ninth session) that reason is gone: b1 0.6995 vs 0.6835 ms, off.
  bool offchain_own_ = false;
  bool row_mlp_ = false;   // DETFORGE_CUDA_ROW_MLP=1: linear chains as row_mlp (fp16; slower, NOTES.md v7)
  // DETFORGE_CUDA_PRIORITY (default 0, measured no faster): the kernels of ops on or near the longest
  // path (graph::critical_ops, slack of a quarter unit) at the greatest priority, so that where an
  // off-path GEMM and a path kernel wait for SMs together the path's blocks go first. 1: through
  // the capturing stream's attribute; 2: set on the captured nodes (cuda_priority.cpp).
  int priority_ = 0;
  // DETFORGE_CUDA_BOX_STEP (default 1): the decoder's box steps as one launch each.
  bool box_step_on_ = true;
  // DETFORGE_CUDA_DEC_TAIL (default 0): the decoder tails as one cooperative launch each.
  bool dec_tail_on_ = false;
  int64_t dec_tail_max_rows_ = 300;               // DETFORGE_CUDA_DEC_TAIL_MAX_ROWS
  // DETFORGE_CUDA_LN_ADD (default 1): adds launched with their layer_norm (ln_add_of_).
  bool ln_add_on_ = true;
  int linear_ln_mode_ = 0;  // DETFORGE_CUDA_LINEAR_LN (default 0, not yet measured; cuda_linear_lns.cpp)
  int linear_ln_split_ = 0;  // DETFORGE_CUDA_LINEAR_LN_SPLIT
  // DETFORGE_CUDA_LINEAR_LN_MAX_ROWS: one wave of 64-row blocks at two per SM (132 SMs). Beyond it
  // the kernel's weight re-reads (128 KiB per 64 rows) outgrow cuBLASLt's: r18vd's enc_output at
  // batch 32 (268,800 rows) would move ~0.7 GB through L2.
  int64_t linear_ln_max_rows_ = 264 * 64;
  // DETFORGE_CUDA_TOPK_SPLIT: the top-k's row maxima from a grid-wide kernel into the op's
  // stream workspace, then the one-SM selection from those keys (kernels/topk_rows.cu v6).
  // 0: never; 1: always; 2 (default): when a row is wider than 16 values. Measured (H100, fp16
  // b1): equal for the 8-class model's 16-byte rows; with COCO's 80 classes the one-SM kernel
  // read its 160-byte rows through the scalar path and took 184 of the 843 us (NOTES.md v22).
  int topk_split_ = 2;
  // DETFORGE_CUDA_TOPK_CLUSTER=1: the selection on a cluster of 8 CTAs per image
  // (kernels/topk_cluster.cu; compute capability 9.0, k <= 1024), before the split; 0 (default):
  // equal on an H100 (15.9 against 16.7 us; the encoder box head beside it bounds that stretch,
  // bench/results/h100/ab-2026-12-07-session27/).
  bool topk_cluster_ = false;
  // DETFORGE_CUDA_POOL_QUAD=1 (off, measured equal): the stem's 3x3/2 max-pool computes 2x2
  // outputs per thread (kernels/pool.cu says why).
  bool pool_quad_ = false;
  bool upsample_concat_on_ = true;  // DETFORGE_CUDA_UPSAMPLE_CONCAT (default 1): upsampled_from_
  int late_value_ = 3;  // DETFORGE_CUDA_LATE_VALUE (cuda_late_values.cpp)
  // DETFORGE_CUDA_GREEN_SMS=n (0 = off, the default): the decoder's value projections run on a
  // stream of a green context of >= n SMs (cuda_green.h, cuda_green_ops.cpp), so they stop taking
  // SMs from the path's kernels. Measured (H100, session 30, NOTES.md v33): slower, 0.6598 ms on
  // 16 SMs and 0.6648 on 32 against 0.6572/0.6592: on a partition the GEMMs take 10-19 us each and
  // the later layers' sampling waits for them.
  int green_sms_ = 0;
  // DETFORGE_CUDA_PAD_INPUT=P (cuda_input_conv.cpp): the conv that reads the input converted to
  // fp16 with P channels (zeros past the image's), and its weight, uploaded with P input channels.
  int pad_input_ = 0;
  int stem_mode_ = 0;      // DETFORGE_CUDA_STEM; 0: off; 1: the row kernel where it fits; 2: one
                           // thread per output pixel (v2); both slower than or equal to the
                           // conversion plus cuDNN (session 27)
  // DETFORGE_CUDA_STEM_FUSED (fp16): the stem's three convs and its max pool as one kernel from the
  // fp32 pixels (kernels/stem_fused.h, cuda_stem_fused.cpp); 1: each thread stages four input
  // pixels at a time; 2 (the default, unless DETFORGE_CUDA_STEM or DETFORGE_CUDA_PAD_INPUT is set):
  // the input tile requested at once by cp.async; 3 (not yet run on a GPU): 2 with conv2's and
  // conv3's m16 tiles two at a time per warp (8 independent mma per k-step; the kernel took 30.4
  // us where ~16 were estimated at mma.sync's rate); 0: five kernels (the input's conversion,
  // three cuDNN convs, the pool). Why: those took 0-55.8 us of the batch-1 path with nothing beside them
  // (H100, session 30). Measured (H100, session 31, fp16 engine p50, batch 1 from the tuning cache):
  // 0.6219/0.6242 ms with 2, 0.6265/0.6245/0.6248 with 1, against 0.6407/0.6430/0.6445 without;
  // untuned 0.6335/0.6344 (2) and 0.6384/0.6396 (1) against 0.6570/0.6577; batch 32 (1) 6.516
  // against 6.596 ms. fp16 against fp32 on shapes_val256 with it (and TUNE=1): precision and recall
  // 0.9979, AP 0.7113 against 0.7115, every output finite.
  int stem_fused_ = 2;
  // Fused convs (fused_cache_): equal shapes used to share one object (DETFORGE_CUDA_SHARE_CONV_PLANS=1);
  // replays of that 4-stream r18vd graph differed from each other on the H200 (CudaDeterminism,
  // 2026-12-03; on one stream they did not), and two same-shape convs on two streams executing
  // one plan object was the suspect no byte-range hazard covers.
  bool share_conv_plans_ = false;
  // DETFORGE_CUDA_CONV_HANDLES: how fused (cuDNN frontend) convs on several streams share cuDNN.
  // 2 (the default until the ninth session): one handle, and the schedule orders all fused convs
  // one after another (a shared pseudo byte range) while other ops still overlap them.
  // 0 before the ninth session (edges as captured): the 4-stream r18vd fp16 graph differed from
  // the eager forward on every batch-1 input and failed the shapes_val256 quality check
  // (precision 0.905, AP 0.662 vs fp32 0.7115); 2 hid it at ~35 us of batch-1 time. Sessions 7-8
  // searched for the cause among the convs themselves (modes 3-8 order subsets; none held).
  // 1: one handle per stream, convs free to overlap: broke fp16 quality and replays.
  // 9: every op that launches a cuDNN or cuBLASLt kernel ordered among all such ops (the graph
  // check's first fallback). Tried first in the ninth session; it failed now and then too.
  // 0 (default again since the ninth session, with full_edges_): the cause of all the above was
  // found (NOTES.md v12): cuDNN and cuBLASLt launch kernels that stream capture gives programmatic
  // (early-start) incoming edges, 50 in the batch-1 graph, and a library kernel started through
  // one read its input before the producer on the other stream had finished. With those edges
  // made full (harden_edges), free overlap gave the eager bits on every input tried (16 x 2
  // batch-1 inputs, 8 + 8 op by op without arena reuse), and the orderings are not needed.
  int conv_handles_ = 0;
  // DETFORGE_CUDA_GRAPH_CHECK (default 1): prepare() checks each captured graph against the
  // eager forward on one fresh input and, when they differ, captures again with every library op
  // ordered (conv_order 9) unless they are, then with one stream. A net, not a proof: one input
  // caught the early-start defect (NOTES.md v12) every time at batch 1 with free overlap, but
  // missed it at 1 of 16 inputs under ordered fused convs.
  bool graph_check_ = true;
  bool snapshots_ = false;  // DETFORGE_CUDA_SNAPSHOTS (op_snapshots)
  OwnConvMode own_conv_ = OwnConvMode::fastest;  // DETFORGE_CUDA_OWN_CONV (conv_select.h)
  double own_conv_margin_ = 1.0;                 // DETFORGE_CUDA_OWN_CONV_MARGIN (conv_select.h)
  // Threads that copy images into pinned memory (DETFORGE_CUDA_STAGE_THREADS, capped by the
  // machine's; image_input.h); 0 = serial on stream_. Default 4 (serial on a machine of fewer
  // than 4 hardware threads). Measured in one command (H100, NOTES.md v25): e2e batch 1 0.814 ms
  // with 4 against 0.841-0.917 serial, batch 32 8.38 against 10.13-10.27 (8 threads: 0.819, 8.13).
  int stage_threads_ = 4;
  bool stage_side_ = true;  // DETFORGE_CUDA_STAGE_SIDE=0: the pieces uploaded on stream_ itself
  bool gpu_select_ = true;  // run_images_selected(): DETFORGE_CUDA_GPU_SELECT (default 1)
};

}  // namespace detforge::cuda
