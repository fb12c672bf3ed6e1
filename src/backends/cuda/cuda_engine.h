// The CUDA backend's Engine: NHWC activations (fp32 or fp16 storage) in one arena planned by
// liveness, weights uploaded once, one CUDA graph captured per batch size. run() is
// pinned-H2D -> graph launch -> D2H. The extra methods here (async API, bench hooks) are what
// src/bench and the GPU tests use beyond the generic Engine interface.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends/cuda/conv_select.h"
#include "backends/cuda/cublaslt_linear.h"
#include "backends/cuda/cuda_green.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cuda_settings.h"
#include "backends/cuda/cudnn_fused_conv.h"
#include "backends/cuda/kernels/kernels.h"
#include "backends/engine.h"
#include "backends/image_input_spec.h"
#include "core/choice_cache.h"
#include "graph/dec_tails.h"
#include "detforge/types.h"
#include "graph/row_chains.h"
#include "graph/stream_schedule.h"

namespace detforge::cuda {

class ImageInput;  // image_input.h

// For CudaEngine::harden_edges and capture_misses_hazards: records in sets[e] the graph nodes that
// the launches made while it is in scope add to the capture of stream `s` (nothing when s is null).
class CaptureNodes {
 public:
  CaptureNodes(cudaStream_t s, std::vector<std::vector<cudaGraphNode_t>>& sets, size_t e);
  ~CaptureNodes();
  CaptureNodes(const CaptureNodes&) = delete;
  CaptureNodes& operator=(const CaptureNodes&) = delete;

 private:
  cudaStream_t s_;
  std::vector<cudaGraphNode_t>* out_ = nullptr;
  std::vector<cudaGraphNode_t> before_;
};

// DETFORGE_CUDA_LATE_VALUE's ops (cuda_late_values.cpp): (anchor op, value linear) pairs of
// `mode` (1-4), each value to run after its anchor; empty when the graph has none.
std::vector<std::pair<int, int>> late_value_ops(const graph::Graph& g, int mode);
// The decoder's value projections (cuda_late_values.cpp): the linears whose outputs only
// ms_deform_attn ops read, as values; ascending op indices.
std::vector<int> decoder_value_linears(const graph::Graph& g);

// DETFORGE_CUDA_LINEAR_LN's candidates (cuda_linear_lns.cpp): (linear, layer_norm) pairs where
// the layer_norm is the only reader of the linear's output and kernels/linear_ln.h takes the
// shapes (N = 256, K a multiple of 64 it can split, activation none or relu, constant weights).
std::vector<std::pair<int, int>> linear_ln_pairs(const graph::Graph& g);

// DETFORGE_CUDA_* setting `name` as an integer in lo..hi, dflt when unset or empty; throws
// detforge::Error naming the variable otherwise (cuda_settings.cpp).
int env_int(const char* name, int dflt, int lo, int hi);

// The engine's DETFORGE_CUDA_* settings (the members of CudaSettings) keep their names here.
class CudaEngine : public Engine, private CudaSettings {
 public:
  CudaEngine(const graph::Graph& g, const EngineOptions& opt);
  ~CudaEngine() override;

  std::string backend_name() const override { return "cuda"; }
  int max_batch() const override { return max_batch_; }
  std::vector<HostTensor> run(const float* pixels, int batch) override;
  std::string first_nonfinite_op() const override { return first_nonfinite_; }

  // Async API: enqueue() copies the pixels into pinned memory and queues upload, forward and
  // download on the engine's stream; wait() blocks and returns the outputs. One in flight.
  void enqueue(const float* pixels, int batch);
  std::vector<HostTensor> wait();

  // --- GPU preprocessing (gpu-preprocess; image_input.h) ---
  // Like run(), from decoded images: each is uploaded as uint8 RGB, resized on the device with
  // the bytes of resize_bilinear_pil (Pillow 13) and rescaled/normalized as spec says into the
  // graph input, then the same captured graph runs. Outputs equal run() on pixels preprocessed
  // on the host with the same spec, bit for bit. spec.height/width must equal the graph input
  // [H, W, 3]; images may differ in size; batch 1..max_batch(). Images over
  // ImageInput::kMaxDevicePixels are resized on the host (same bytes). Synchronous.
  std::vector<HostTensor> run_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec);
  bool run_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec,
                  std::vector<HostTensor>& out) override {
    out = run_images(images, batch, spec);
    return true;
  }
  // --- end GPU preprocessing ---
  // As run_images(), then the top-k over queries x classes and the box decode on the device
  // (cuda_detect_select.cpp, kernels/detect_select.cu); only the selection is downloaded.
  // Returns false (nothing run) with DETFORGE_CUDA_GPU_SELECT=0 or when the outputs named in
  // `sel` are not [Q, C] and [Q, 4] or top_k is over kDetectSelectMaxK. Synchronous.
  bool run_images_selected(const ImageU8* const* images, int batch, const ImageInputSpec& spec,
                           const DetectionSelect& sel, std::vector<SelectedDetections>& out) override;

  // Bench hooks. prepare() builds the plan for `batch` and captures its graph (run() does this
  // on first use). launch() queues the forward alone (graph launch, no copies).
  void prepare(int batch);
  void launch(int batch);
  cudaStream_t stream() const { return stream_; }
  bool half() const { return half_; }
  const std::string& precision() const { return precision_; }
  int graph_nodes(int batch);  // kernel/memcpy nodes in the captured graph (0 when eager)
  bool graph_captured(int batch);
  // Convolutions of `batch` whose epilogue runs fused in cuDNN, those that do not, and why.
  std::string conv_fusion_summary(int batch);
  size_t arena_bytes() const { return arena_bytes_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // Eager (uncaptured) forward, for graph-replay-equals-eager tests.
  std::vector<HostTensor> run_eager(const float* pixels, int batch);
  // Linear chains (graph/row_chains.h) that run as one row_mlp launch at `batch`, of those found.
  int row_chains_fused(int batch);
  int row_chains_found() const { return static_cast<int>(row_chains_.size()); }
  // The decoder's box steps (cuda_box_steps.cpp): ops of the bbox head's last linear, its
  // box_refine and the next linear reading the boxes (-1 for none), run as one box_step launch.
  struct BoxStep {
    int linear = -1, refine = -1, next = -1;
  };
  int box_steps() const { return static_cast<int>(box_steps_.size()); }
  // The decoder layers' row-local tails (cuda_dec_tails.cpp, DETFORGE_CUDA_DEC_TAIL=1): ops from
  // encoder_attn.output_proj through the box refine and, between layers, the next layer's
  // query_pos_head and self_attn.pos add (-1 where absent), run as one dec_tail launch.
  using DecTail = graph::DecoderTail;
  int dec_tails() const { return static_cast<int>(dec_tails_.size()); }
  // Adds launched as a second output of their layer_norm (cuda_ln_adds.cpp), and upsamples
  // launched inside their concat (cuda_upsample_concats.cpp).
  int ln_adds() const;
  int upsample_concats() const;
  // Linear + layer_norm pairs launched as one linear_ln kernel (cuda_linear_lns.cpp).
  int linear_lns() const;
  // DETFORGE_CUDA_PAD_INPUT (cuda_input_conv.cpp): the channels the first conv reads its fp16
  // input with (4 or 8), 0 when the input keeps its own.
  int padded_input_channels() const { return pad_op_ >= 0 ? pad_input_ : 0; }
  // Streams the captured graph of `batch` spreads its ops over (1 = sequential), and how many
  // cross-stream waits that takes.
  int graph_streams(int batch);
  int graph_edges_hardened(int batch);  // programmatic edges made full at capture (full_edges_)
  int graph_edges_made_early(int batch);  // edges made programmatic at capture (full_edges_ 3)
  int graph_prioritized(int batch);     // kernel nodes at the greatest priority (DETFORGE_CUDA_PRIORITY)
  int graph_priority_refused(int batch);  // kernel nodes of critical ops that did not take it
  int critical_op_count() const {
    int n = 0;
    for (char c : critical_) n += c;
    return n;
  }
  int graph_waits(int batch);
  int graph_memsets_replaced(int batch);  // DETFORGE_CUDA_MEMSET_KERNELS=1: memset nodes run as kernels
  // The load-time tunings (DETFORGE_CUDA_TUNE, cuda_tune_cache.cpp): whether any is on, how many
  // choices came from the tuning cache and how many were timed, the cache file ("" when off) and
  // the cache's last problem ("" when none).
  struct TuneStats {
    bool on = false;
    int cached = 0, timed = 0;
    std::string file, problem;
  };
  TuneStats tune_stats() const;
  // DETFORGE_CUDA_GREEN_SMS (cuda_green_ops.cpp): the green partition's SMs (0: none), the ops that
  // batch's graph runs there, and why there is no partition when one was asked for.
  struct GreenStats {
    int sms = 0, ops = 0;
    std::string problem;
  };
  GreenStats green_stats(int batch);
  // What prepare() found when it compared the captured graph's outputs with the eager forward's
  // on one input (DETFORGE_CUDA_GRAPH_CHECK, default 1): "equal", or which schedule it fell back
  // to and why; "off" when the check is off, "" while no graph is captured.
  std::string graph_check(int batch);
  // Diagnostic for the overlapping-fused-convs defect (NOTES.md v10): with the fused convs free
  // to overlap, the graph of `batch` differs from the eager forward; this searches (ddmin) for a
  // smallest set of fused convs whose ordering among themselves makes them agree, and returns
  // their op names (empty: the overlapping graph already agrees, or ordering every fused conv
  // does not help; `log` says which, and each trial). Afterwards the plan is captured again with
  // the engine's own schedule. Slow-ish: one capture and two forwards per trial.
  std::vector<std::string> conflicting_convs(int batch, std::string* log);
  // With DETFORGE_CUDA_ARENA_GUARD=1: one eager forward of `batch` (current inputs) in which the
  // guard bytes after each op's outputs are filled with a pattern before the op and read back
  // after it; returns the ops that wrote past the end of an output ("op name: output tensor").
  // Throws detforge::Error when the engine was built without the guard.
  std::vector<std::string> arena_overruns(int batch);
  // A debugging aid: captures `batch`'s forward once more with every schedule entry's graph nodes
  // recorded, and checks each hazard of the schedule (two entries touching overlapping bytes, one
  // of them writing) against the captured graph's edges: every node of the later entry must be
  // reachable from every node of the earlier one. Returns the first missing orderings ("" when
  // the graph holds them all); `checked` receives the number of hazards between two entries that
  // both launched something. Why: the graph-versus-eager defect (NOTES.md v11); this tells a
  // capture that drops an ordering from kernels that disturb each other on well-ordered bytes.
  std::string capture_misses_hazards(int batch, int* checked = nullptr, int* programmatic_into_library = nullptr);
  // A debugging aid: an eager forward of `batch` with the arena compared before and after each
  // op (in 256-byte chunks, the arena's alignment); returns the ops that changed arena bytes
  // outside the outputs the schedule knows them to write ("op: N chunks ..., the first in
  // <tensors there>"). Why: such a write is invisible to the eager forward when the victim's own
  // producer runs after it, but a stream schedule may run that producer first (NOTES.md v12).
  std::vector<std::string> stray_writes(int batch);
  // A debugging aid (cuda_stray_reads.cpp): two eager forwards of `batch` on the current inputs,
  // the second with every arena byte outside each op's declared reads and writes set to `poison`
  // while the op runs; returns the ops whose declared writes then differ ("op (how it runs): N of
  // M written ranges differ ..."), in op order. The first read bytes it does not declare.
  std::vector<std::string> stray_reads(int batch, unsigned char poison = 0x7B);
  // A debugging aid for engines built with DETFORGE_CUDA_ARENA_REUSE=0 (throws otherwise): every
  // op's first output (reshapes excepted) as the last forward of `batch` left it, in op order.
  struct OpOutput {
    size_t op;
    bool i32;  // int32 elements; otherwise the engine's storage (fp16 or fp32)
    std::vector<char> bytes;
  };
  std::vector<OpOutput> op_outputs(int batch);
  // A debugging aid: fills the whole activation arena with 0xFF bytes (NaN in fp16 and fp32) and
  // waits. A forward run right after must still give its usual bits; one that does not reads
  // bytes that no op of this forward wrote (before their writer ran, on another stream).
  void poison_arena();
  // DETFORGE_CUDA_SNAPSHOTS=1 (a debugging aid, off by default): every op's first output is
  // copied into a buffer of its own right after the launch that writes it (the op's own, or for
  // an op absorbed into a later launch, such as a layer norm inside its add's or a box step's
  // refine, that launch's), inside the captured graph, so that two replays can be compared op by
  // op. An op whose output no launch writes (an upsample read by its concat from the source,
  // the inner ops of a box step or row chain) has none. Returns one snapshot per op that has
  // one, in op order, after the last run of `batch`; empty when the setting is off.
  struct OpSnapshot {
    int op;
    std::string name;
    std::vector<char> bytes;
  };
  std::vector<OpSnapshot> op_snapshots(int batch);
  // How op i runs at `batch`, for diagnostics: its schedule stream and what it launches (cuDNN
  // fused/legacy conv, own conv variant, cuBLASLt, small linear, own kernel), e.g.
  // "stream 2, cuDNN fused conv".
  std::string op_launch_summary(int batch, size_t i);
  // Linears of `batch` that run on the own small-K / small-N kernels (DETFORGE_CUDA_SMALL_LINEAR=1),
  // not counting those inside a fused row chain; kind none counts both kinds.
  int small_linears(int batch, SmallLinear kind = SmallLinear::none);
  // 1x1 convs of `batch` that run as cuBLASLt linears (DETFORGE_CUDA_CONV_LINEAR).
  int convs_as_linears(int batch) { return plan(batch).n_conv_linear; }
  // Per-op profiling: one eager forward (single stream, current inputs) with hook(i, true)
  // before op i's launches and hook(i, false) after; i == -1 is the input conversion.
  void run_eager_hooked(int batch, const std::function<void(int, bool)>& hook);
  const graph::Graph& graph() const { return g_; }

 private:
  void read_settings();  // the DETFORGE_CUDA_* environment into CudaSettings (cuda_settings.cpp)
  struct BatchPlan {
    std::vector<std::unique_ptr<CudnnConv>> conv;  // by op index
    std::vector<std::shared_ptr<FusedConv>> fused;  // by op index (fp16 with the cuDNN frontend)
    std::vector<int> own_conv;  // by op index (conv2d, linear): own variant (conv_select.h), -1 = cuDNN / cuBLASLt
    int n_fused = 0, n_unfused = 0, n_own = 0, n_own_linear = 0;
    int n_conv_linear = 0;  // 1x1 convs run as cuBLASLt linears (conv_as_linear)
    int n_conv_im2col = 0;  // kxk convs run as im2col + cuBLASLt (conv_as_im2col)
    std::vector<char> im2col;  // by op index (conv2d): im2col + p.lin
    std::string unfused_why;  // first reason a conv was not fused
    std::vector<std::unique_ptr<LtLinear>> lin;    // by op index
    std::vector<SmallLinear> small_lin;  // by op index (linear): own small-K/N kernel; none: lin / own_conv
    std::vector<char> chain_on;  // by row chain: one row_mlp launch at this batch
    std::vector<char> linear_ln_on;  // by op (a pair's linear and site): one linear_ln launch at this batch
    bool dec_tail_on = false;        // the decoder tails launch as dec_tail at this batch (cuda_dec_tails.cpp)
    graph::StreamSchedule sched;       // entry 0: the input conversion, entry i+1: op i
    std::vector<cudaEvent_t> events;   // per schedule entry that another stream waits for
    cudaGraphExec_t exec = nullptr;
    int nodes = 0;
    // The schedule's concurrency: fused-conv ordering (DETFORGE_CUDA_CONV_HANDLES modes 2-5, 0
    // none) and the stream cap; prepare() tightens them when the graph check fails.
    int conv_order = 0;
    std::vector<char> order_ops;  // conv_order 6: by op, the fused convs to order (conflicting_convs)
    int max_streams = 1;
    // DETFORGE_CUDA_GREEN_SMS: green_op_ stays off green_ in this plan (its capture failed there,
    // or the graph check fell back to one stream).
    bool green_off = false;
    std::string graph_check;  // what prepare()'s graph-versus-eager check found (graph_check())
    int memsets_replaced = 0;  // DETFORGE_CUDA_MEMSET_KERNELS
    std::vector<void*> op_ws;         // by op: DETFORGE_CUDA_OP_WORKSPACE private workspace, or null
    void* op_ws_buf = nullptr;
    std::vector<void*> snap;          // by op: DETFORGE_CUDA_SNAPSHOTS copy of its output, or null
    std::vector<size_t> snap_bytes;
    std::vector<std::vector<int>> snap_after;  // by op: the ops whose snapshots its launch takes
    std::string capture_error;
    std::vector<graph::OpAccess> acc;  // by schedule entry: the bytes it reads and writes
    // harden_edges / capture_misses_hazards: while set, forward() records the graph nodes each
    // entry's launches added during capture (node_sets[e]); cleared once that graph is destroyed.
    bool track_nodes = false;
    int edges_hardened = 0;  // harden_edges at the last capture: edges it changed
    int edges_made_early = 0;  // of those, made programmatic (mode 3)
    int prioritized = 0;       // kernel nodes at the greatest priority after the last capture
    int priority_refused = 0;  // kernel nodes of critical ops that did not take it
    std::vector<std::vector<cudaGraphNode_t>> node_sets;
  };
  struct Slot {
    int root = 0;
    int64_t per_image = 0;  // elements per image (constants: all elements)
    bool is_const = false;
    bool i32 = false;
    void* dev = nullptr;
  };

  void upload_weights(const graph::Graph& g);
  void plan_memory();
  // cuda_input_conv.cpp: the conv that is the graph input's only reader (as its x), or -1
  // (cons: graph::consumers(g_)); then the direct stem (stem_op_) and the padded input (pad_op_).
  int sole_input_conv(const std::vector<std::vector<int>>& cons) const;
  void find_stem_op();
  void find_pad_input();
  // cuda_stem_fused.cpp (DETFORGE_CUDA_STEM_FUSED): the stem's three convs and its pool as one
  // launch at the pool; whether op i is one of them (the convs launch nothing).
  void setup_stem_fused();
  bool in_stem_fused(size_t i) const;
  bool launch_stem_fused(size_t i, int batch, cudaStream_t s);
  BatchPlan& plan(int batch);
  // concurrent: ops on the plan's streams (graph capture only); otherwise all on stream_.
  // Captures one concurrent forward of `batch` (sets p.capture_error on failure).
  cudaGraph_t capture(BatchPlan& p, int batch);
  // Captures, rewrites the memset nodes and instantiates p.exec (p.capture_error on failure).
  void dump_graph(cudaGraph_t graph, int batch);  // DETFORGE_CUDA_GRAPH_DUMP (cuda_capture.cpp)
  void capture_and_instantiate(BatchPlan& p, int batch);
  // Turns programmatic (early-start) edges of a captured graph into full edges, by full_edges_
  // mode: 1 those into the nodes of ops that run a library kernel (p.node_sets from the
  // capture), 2 all; 3 as 1, but every kernel-to-kernel edge into an op whose library kernel
  // waits (library_kernel_waits) made programmatic. Returns how many edges it changed. cuda_settings.h at full_edges_ says why.
  int harden_edges(cudaGraph_t graph, BatchPlan& p, int mode);
  // cuda_priority.cpp (DETFORGE_CUDA_PRIORITY): mode 1 sets stream s's priority attribute for op
  // i's launches during capture (greatest when critical_); prioritize_critical_nodes, after
  // capture, sets (mode 2) and counts the kernel nodes of critical_ ops at the greatest priority.
  struct PriorityCount {
    int set = 0, refused = 0;  // kernel nodes of critical ops at the greatest priority, and not
  };
  void set_capture_priority(size_t i, cudaStream_t s);
  PriorityCount prioritize_critical_nodes(const BatchPlan& p);
  // The graph nodes (p.node_sets) of ops that run a library kernel (runs_library_kernel): any,
  // or only those whose kernels wait for a programmatic predecessor (library_kernel_waits).
  std::unordered_set<cudaGraphNode_t> library_nodes(const BatchPlan& p, bool waiting_only) const;
  bool library_kernel_waits(size_t i, const BatchPlan& p) const;
  // Drops p.exec, schedules p again (after its conv_order / max_streams / order_ops changed)
  // and captures it again.
  void recapture(BatchPlan& p, int batch);
  // Runs p.exec and the eager forward on one fresh pseudo-random input (the arena still holds
  // the previous forward's values, so an op that reads its input too early sees them) and
  // returns the first graph output whose bits differ, "" when all are equal. Restores d_in32_.
  std::string graph_differs_from_eager(BatchPlan& p, int batch);
  void forward(BatchPlan& p, int batch, bool check, bool concurrent = false,
               const std::function<void(int, bool)>* hook = nullptr);
  void schedule(BatchPlan& p, int batch);
  void launch_op(size_t i, BatchPlan& p, int batch, cudaStream_t s, void* ws);  // cuda_ops.cpp
  // cuda_row_chains.cpp: find the chains (constructor, before plan_memory), decide per batch,
  // and launch: launch_row_chain() is true when op i is part of a fused chain (the launch sits
  // at the chain's last op; the others launch nothing).
  void setup_row_chains();
  void plan_row_chains(BatchPlan& p, int batch);
  bool launch_row_chain(size_t i, const BatchPlan& p, int batch, cudaStream_t s);
  bool writes_nothing(size_t i, const BatchPlan& p) const;  // absorbed into a later op's launch
  // cuda_box_steps.cpp: find the box steps and put their ops next to each other (constructor,
  // after setup_row_chains, before plan_memory); launch_box_step() is true when op i is part of
  // one (the launch sits at its last op; the others launch nothing).
  void setup_box_steps();
  bool launch_box_step(size_t i, int batch, cudaStream_t s);
  bool absorbed_in_box_step(size_t i) const;
  // cuda_dec_tails.cpp: order_dec_tails() puts each tail's ops next to each other (constructor,
  // before setup_row_chains); setup_dec_tails() (after absorbed_ is cleared) marks them absorbed
  // but the last; launch_dec_tail() is true at a tail's last op, which launches dec_tail.
  void order_dec_tails();
  void setup_dec_tails();
  bool launch_dec_tail(size_t i, const BatchPlan& p, int batch, cudaStream_t s);
  bool absorbed_in_dec_tail(size_t i) const;
  bool dec_tail_runs(size_t i, const BatchPlan& p) const;  // op i is in a tail launched at p's batch
  // cuda_ln_adds.cpp: order_ln_adds() puts each add right after its layer_norm (constructor,
  // before setup_row_chains); setup_ln_adds() (after setup_box_steps) marks the pairs;
  // launch_ln_add() is true when op i is such an add (it launches the pair's layer_norm).
  void order_ln_adds();
  void setup_ln_adds();
  bool launch_ln_add(size_t i, int batch, cudaStream_t s);
  // cuda_linear_lns.cpp (after setup_ln_adds, before plan_memory): linear + layer_norm pairs;
  // launch_linear_ln() is true when op i is the site of one (the layer_norm, or its add).
  // plan_linear_lns() (per batch, beside plan_row_chains): a pair runs fused while its rows fit
  // DETFORGE_CUDA_LINEAR_LN_MAX_ROWS, else as its two ops (the linear then writes its output).
  void setup_linear_lns();
  void plan_linear_lns(BatchPlan& p, int batch);
  bool launch_linear_ln(size_t i, const BatchPlan& p, int batch, cudaStream_t s);
  // cuda_upsample_concats.cpp (after setup_box_steps): upsamples run inside their concat.
  void setup_upsample_concats();
  // cuda_late_values.cpp (constructor, before setup_row_chains): DETFORGE_CUDA_LATE_VALUE's order.
  void order_late_values();
  void build_op_plan(size_t i, BatchPlan& p, int batch);  // cuda_ops.cpp
  ConvShape conv_shape(size_t i, int batch) const;        // cuda_ops.cpp
  // The op's buffers (at load: scratch the selection may fill) and stream_'s workspace.
  ConvBuffers op_buffers(const graph::Op& op, bool bias, bool res) const;  // cuda_ops.cpp
  std::string conv_key(size_t i, int batch) const;                          // shape/epilogue key
  // The fused cuDNN plan of conv op i built on handle h (cached by key + tag); null if unsupported.
  std::shared_ptr<FusedConv> fused_conv_plan(size_t i, int batch, cudnnHandle_t h, const std::string& tag,
                                             std::string* why);
  // conv_handles_ == 1: fused convs scheduled on side stream k are re-planned on that stream's
  // own cuDNN handle (side_cudnn_).
  void bind_convs_to_stream_handles(BatchPlan& p, int batch);
  // Op i launches a cuDNN or cuBLASLt kernel in plan p (conv_handles_ 9 orders those ops).
  bool runs_library_kernel(size_t i, const BatchPlan& p) const;
  void* ptr(graph::TensorId t) const { return slots_[slots_[t].root].dev; }
  // Bytes per element of a slot's storage (int32 indices, else fp16 or fp32), and a root slot's
  // arena extent (max_batch images).
  size_t elem_bytes(const Slot& s) const { return s.i32 ? 4 : (half_ ? 2 : 4); }
  size_t slot_bytes(int root) const {
    return static_cast<size_t>(slots_[root].per_image) * max_batch_ * elem_bytes(slots_[root]);
  }
  // DETFORGE_CUDA_SNAPSHOTS: one buffer per op for a copy of its first output (op_snapshots).
  void alloc_snapshots(BatchPlan& p, int batch);
  // DETFORGE_CUDA_OP_WORKSPACE=1 (op_workspaces_): a workspace of its own for every op that takes one.
  void alloc_op_workspaces(BatchPlan& p, int batch);
  void upload_input(const float* pixels, int batch);
  void queue_download(int batch);
  std::vector<HostTensor> collect(int batch) const;
  // Upload, device preprocessing and the forward of run_images(), queued on stream_.
  void queue_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec);

  graph::Graph g_;  // structure only: constant data is dropped after upload
  int max_batch_ = 1;
  bool half_ = false;
  bool check_finite_ = false;
  bool conv_as_tile(size_t i, int batch);
  // The linear (or 1x1 conv) op, seen as rows x K -> N, runs on tile_linear: fp16, the row and K
  // limits (tile_linear_rows_, tile_max_k_) and tile_linear_ok on its buffers.
  bool tile_takes(const graph::Op& op, int64_t rows, int N, int K) const;
  bool conv_as_linear(size_t i) const;       // cuda_ops.cpp
  bool conv_as_im2col(size_t i, int batch) const;  // cuda_ops.cpp (conv_im2col_)
  bool feeds_only_residuals(size_t i) const;  // op i's output is only other convs' residual input
  std::vector<graph::RowChain> row_chains_;
  std::vector<int> chain_of_;  // by op: the row chain it belongs to, -1
  // by op: tensors its launch reads beyond its inputs (a chain's input and the last linear's
  // residual, read at the chain's last op): kept live and ordered by plan_memory and schedule.
  std::vector<std::vector<graph::TensorId>> extra_reads_;
  // by op: tensors its launch writes beyond its outputs (a box step's refined boxes, written at
  // the step's last op): every later reader is ordered after it by schedule.
  std::vector<std::vector<graph::TensorId>> extra_writes_;
  std::vector<char> critical_;
  std::vector<BoxStep> box_steps_;
  std::vector<int> box_step_of_;  // by op: the box step it belongs to, -1
  std::vector<DecTail> dec_tails_;
  std::vector<int> dec_tail_of_;                  // by op: the tail whose launch sits there, -1
  std::vector<graph::TensorId> dec_tail_boxes_;   // refined boxes of the tails (box steps skip them)
  std::vector<char> dec_tail_member_;             // by op: part of a tail
  // by op: launches nothing, its work done by a later op's launch (a layer_norm in its add's, an
  // upsample in its concat's; box steps and row chains keep their own marks).
  std::vector<char> absorbed_;
  // DETFORGE_CUDA_LN_ADD (default 1): by op, for an add launched with its layer_norm (second
  // output), that layer_norm's index; -1.
  std::vector<int> ln_add_of_;
  // DETFORGE_CUDA_LINEAR_LN (default 0, not yet measured; cuda_linear_lns.cpp): by op, for the
  // site of a linear + layer_norm launch, the linear and the layer_norm; -1.
  std::vector<int> linear_ln_lin_, linear_ln_ln_;
  std::vector<int> linear_ln_lin_of_;  // by op: for a pair's linear, its site; -1
  // DETFORGE_CUDA_UPSAMPLE_CONCAT (default 1): by tensor, for an upsample's output that its
  // concat reads upsampled from the source, that source; kNoTensor.
  std::vector<graph::TensorId> upsampled_from_;
  // DETFORGE_CUDA_PAD_INPUT (pad_input_): the conv reading the padded input, and its weight.
  int pad_op_ = -1;
  graph::TensorId pad_w_ = graph::kNoTensor;
  int stem_op_ = -1;       // conv reading the fp32 input directly (kernels/conv_stem.h); DETFORGE_CUDA_STEM=1 or 2: on
  // the fused stem's conv1, conv2, conv3 and max pool (cuda_stem_fused.cpp); -1 when off, and its
  // packed weights (kernels/stem_fused.h)
  std::array<int, 4> stem_fused_ops_{-1, -1, -1, -1};
  void* stem_fused_w_ = nullptr;
  std::string precision_;
  std::string first_nonfinite_;
  int device_ = 0;

  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;

  std::vector<Slot> slots_;
  void* weights_ = nullptr;
  size_t weight_bytes_ = 0;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  void* workspace_ = nullptr;  // stream_'s; side stream k uses side_ws_[k - 1]
  size_t workspace_bytes_ = 0;
  std::vector<cudaStream_t> side_;
  std::vector<void*> side_ws_;
  // DETFORGE_CUDA_GREEN_SMS (cuda_green_ops.cpp): the stream confined to a few SMs, its workspace,
  // and by op whether a schedule pins it there (the decoder's value projections).
  std::unique_ptr<GreenStream> green_;
  void* green_ws_ = nullptr;
  std::vector<char> green_op_;
  int64_t green_rows_ = 0;  // rows per image of the first of them
  void setup_green();  // constructor, once the op order is final
  bool green_at(int batch) const;  // green_op_ go to green_ at this batch (small batches only)
  bool uses_green(const BatchPlan& p) const;  // p's schedule pins green_op_ to green_
  cudaStream_t side_stream(const BatchPlan& p, int k) const;  // stream k >= 1 of p's schedule
  float* d_in32_ = nullptr;             // fp32 pixels as uploaded
  float* h_in_ = nullptr;               // pinned
  std::vector<float*> d_out32_, h_out_;  // per graph output, fp32
  unsigned long long* d_count_ = nullptr;
  std::vector<std::unique_ptr<BatchPlan>> plans_;
  // Fused convs by shape/epilogue key and, unless share_conv_plans_, by op: one built cuDNN plan
  // object per conv op (cuda_settings.h at share_conv_plans_ says why).
  std::map<std::string, std::shared_ptr<FusedConv>> fused_cache_;
  std::vector<cudnnHandle_t> side_cudnn_;  // per side stream (conv_handles_ == 1)
  std::map<std::string, ConvChoice> own_conv_cache_;  // by the same shape key, fp16 only
  std::map<std::string, int> lt_choice_cache_;         // tune_lt's candidate, by linear shape key
  // The tuning cache (cuda_tune_cache.cpp): the timed choices kept across loads.
  ChoiceCache tune_cache_;
  int tune_cached_ = 0, tune_timed_ = 0, tune_timed_reported_ = 0, tune_announced_ = 0;
  bool tunes() const;      // some load-time tuning is on (fp16)
  void open_tune_cache();  // constructor, once the workspace size is known
  void note_tuning(int batch);  // one line on stderr before the first timing at this batch
  // make_fused_conv with `tune`'s in-graph timing, or the plan the cache holds for `key`.
  std::unique_ptr<FusedConv> tuned_fused_conv(const std::string& key, const ConvShape& s, bool bias, bool res,
                                              graph::Act act, bool res_after_act, size_t ws_limit, ConvTune tune,
                                              std::string* why, int batch);
  // choose_conv, or the cached choice (an own kernel checked once against `ref`'s output).
  ConvChoice own_choice(const std::string& key, const std::function<void()>& ref, const ConvShape& s, graph::Act act,
                        const ConvBuffers& cb, OwnConvMode mode, int batch);
  void save_tune_cache(int batch, double seconds);  // after a batch's plans, when something was timed
  // DETFORGE_CUDA_LT_TUNE (cuda_settings.h at lt_tune_): picks lt's candidate on op's buffers.
  void tune_lt(LtLinear& lt, const graph::Op& op, int64_t rows, int N, int K, bool bias, bool res);
  int pending_batch_ = 0;
  std::unique_ptr<ImageInput> image_input_;  // gpu-preprocess: created by the first run_images()
  // run_images_selected(): the result words for max_batch images of select_k_ (device and pinned),
  // allocated by the first call (gpu_select_).
  int select_k_ = 0;
  uint32_t* d_select_ = nullptr;
  uint32_t* h_select_ = nullptr;
  std::vector<int> select_w_, select_h_;
};

}  // namespace detforge::cuda
