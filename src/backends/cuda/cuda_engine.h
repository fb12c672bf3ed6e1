// The CUDA backend's Engine: NHWC activations (fp32 or fp16 storage) in one arena planned by
// liveness, weights uploaded once, one CUDA graph captured per batch size. run() is
// pinned-H2D -> graph launch -> D2H. The extra methods here (async API, bench hooks) are what
// src/bench and the GPU tests use beyond the generic Engine interface.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

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
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_fused_conv.h"
#include "backends/cuda/kernels/kernels.h"
#include "backends/engine.h"
#include "backends/image_input_spec.h"
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

// DETFORGE_CUDA_LINEAR_LN's candidates (cuda_linear_lns.cpp): (linear, layer_norm) pairs where
// the layer_norm is the only reader of the linear's output and kernels/linear_ln.h takes the
// shapes (N = 256, K a multiple of 64 it can split, activation none or relu, constant weights).
std::vector<std::pair<int, int>> linear_ln_pairs(const graph::Graph& g);

// DETFORGE_CUDA_* setting `name` as an integer in lo..hi, dflt when unset or empty; throws
// detforge::Error naming the variable otherwise (cuda_settings.cpp).
int env_int(const char* name, int dflt, int lo, int hi);

class CudaEngine : public Engine {
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
  int graph_prioritized(int batch);     // kernel nodes at the greatest priority (DETFORGE_CUDA_PRIORITY)
  int graph_priority_refused(int batch);  // kernel nodes of critical ops that did not take it
  int critical_op_count() const {
    int n = 0;
    for (char c : critical_) n += c;
    return n;
  }
  int graph_waits(int batch);
  int graph_memsets_replaced(int batch);  // DETFORGE_CUDA_MEMSET_KERNELS=1: memset nodes run as kernels
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
  void read_settings();  // the DETFORGE_CUDA_* environment into the members below (cuda_settings.cpp)
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
    int edges_hardened = 0;  // harden_edges at the last capture
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
  BatchPlan& plan(int batch);
  // concurrent: ops on the plan's streams (graph capture only); otherwise all on stream_.
  // Captures one concurrent forward of `batch` (sets p.capture_error on failure).
  cudaGraph_t capture(BatchPlan& p, int batch);
  // Captures, rewrites the memset nodes and instantiates p.exec (p.capture_error on failure).
  void dump_graph(cudaGraph_t graph, int batch);  // DETFORGE_CUDA_GRAPH_DUMP (cuda_capture.cpp)
  void capture_and_instantiate(BatchPlan& p, int batch);
  // Turns programmatic (early-start) edges of a captured graph into full edges, by full_edges_
  // mode: 1 those into the nodes of ops that run a library kernel (p.node_sets from the
  // capture), 2 all; 3 those into cuDNN ops, and every kernel-to-kernel edge into a cuBLASLt op
  // made programmatic. Returns how many edges it changed. cuda_engine.h at full_edges_ says why.
  int harden_edges(cudaGraph_t graph, const BatchPlan& p, int mode);
  // cuda_priority.cpp (DETFORGE_CUDA_PRIORITY): mode 1 sets stream s's priority attribute for op
  // i's launches during capture (greatest when critical_); prioritize_critical_nodes, after
  // capture, sets (mode 2) and counts the kernel nodes of critical_ ops at the greatest priority.
  struct PriorityCount {
    int set = 0, refused = 0;  // kernel nodes of critical ops at the greatest priority, and not
  };
  void set_capture_priority(size_t i, cudaStream_t s);
  PriorityCount prioritize_critical_nodes(const BatchPlan& p);
  // The graph nodes (p.node_sets) of ops that run a library kernel (runs_library_kernel): any,
  // or only cuDNN's (convs) or cuBLASLt's (linears).
  enum class LibraryKind { any, cudnn, cublaslt };
  std::unordered_set<cudaGraphNode_t> library_nodes(const BatchPlan& p, LibraryKind kind) const;
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
  // DETFORGE_CUDA_OP_WORKSPACE=1 (a debugging aid, off by default): every op that takes a
  // workspace gets bytes of its own instead of its stream's, so no two ops share workspace bytes.
  void alloc_op_workspaces(BatchPlan& p, int batch);
  bool op_workspaces_ = false;
  // DETFORGE_CUDA_ARENA_GUARD=1 (a debugging aid, off by default): every arena buffer is followed
  // by kArenaGuardBytes of its own, which arena_overruns() watches.
  static constexpr size_t kArenaGuardBytes = 4096;
  size_t arena_guard_ = 0;
  bool arena_reuse_ = true;  // DETFORGE_CUDA_ARENA_REUSE (op_outputs)
  // DETFORGE_CUDA_FULL_EDGES: 1 (default) programmatic edges into library-kernel ops become full
  // edges after capture (harden_edges), 2 every programmatic edge, 0 none. Same-stream early
  // starts are not safe either: hardening only the cross-stream ones (a mode 3, tenth session)
  // left 16 of 16 inputs differing (CudaGraphEqualsEager, H200), so it was removed. Why: without reuse
  // of arena bytes (op_outputs, ninth session) the first op whose graph output differed from
  // the eager one was a block's second conv (runtime-compiled cuDNN kernel) whose input came
  // from another stream, with that input itself equal: it read the input before its producer
  // had finished, although the graph holds the edge (capture_misses_hazards).
  // 3 (opt-in, 22nd session): as 1 for cuDNN, and the edges into cuBLASLt's kernels made
  // programmatic, on the evidence of CudaLibraryWaits (its kernels wait before their first access).
  int full_edges_ = 1;
  void upload_input(const float* pixels, int batch);
  void queue_download(int batch);
  std::vector<HostTensor> collect(int batch) const;
  // Upload, device preprocessing and the forward of run_images(), queued on stream_.
  void queue_images(const ImageU8* const* images, int batch, const ImageInputSpec& spec);

  graph::Graph g_;  // structure only: constant data is dropped after upload
  int max_batch_ = 1;
  bool half_ = false;
  bool check_finite_ = false;
  bool fuse_conv_ = true;  // DETFORGE_CUDA_FUSED_CONV=0 turns it off (A/B timing)
  int max_streams_ = 4;    // DETFORGE_CUDA_STREAMS (1 = one stream, the v1-v4 behaviour)
  int conv_tune_ = 0;      // DETFORGE_CUDA_CONV_TUNE=K: time cuDNN's first K fused-conv plans
  // DETFORGE_CUDA_CONV_TUNE_GRAPH=K (0 = off, the default; not yet run on a GPU): each fused conv
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
  bool conv_as_tile(size_t i, int batch);
  // The linear (or 1x1 conv) op, seen as rows x K -> N, runs on tile_linear: fp16, the row and K
  // limits above and tile_linear_ok on its buffers.
  bool tile_takes(const graph::Op& op, int64_t rows, int N, int K) const;
  // DETFORGE_CUDA_LT_SM_TARGET=n (default 116, 0 = off): linears of 4096-16800 rows (r18vd's
  // 8400-row encoder heads at batch 1-2) ask cuBLASLt for plans on n SMs. Why: at batch 1 the
  // bbox head filled all 132 SMs, and the top-k select (one CTA needing a whole SM) waited ~7 us
  // for one (H200 timeline, 2026-12-03). Measured b1 0.6789 -> 0.6687 and 0.7016 -> 0.6930 ms in
  // two sessions; at batch 32 it cost 0-0.7 %, hence the row cap.
  int lt_sm_target_ = 116;
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
  bool conv_as_linear(size_t i) const;       // cuda_ops.cpp
  bool conv_as_im2col(size_t i, int batch) const;  // cuda_ops.cpp (conv_im2col_)
  bool feeds_only_residuals(size_t i) const;  // op i's output is only other convs' residual input
  // DETFORGE_CUDA_OFFCHAIN_OWN=1: a non-1x1 conv whose output only feeds another conv's residual
  // (r18vd: backbone stages 1-3's shortcut, the avg-pool folded 2x2/2 conv) runs on our own
  // implicit-GEMM kernel (the fastest variant that matches cuDNN's output), even when slower than
  // cuDNN. Why: it is off the dependency chain, and as an own kernel it leaves the ordered fused
  // convs (conv_handles_), so it overlaps the chain instead of waiting its turn in it. Since the
  // convs overlap freely (ninth session) that reason is gone: b1 0.6995 vs 0.6835 ms, off.
  bool offchain_own_ = false;
  bool row_mlp_ = false;   // DETFORGE_CUDA_ROW_MLP=1: linear chains as row_mlp (fp16; slower, NOTES.md v7)
  std::vector<graph::RowChain> row_chains_;
  std::vector<int> chain_of_;  // by op: the row chain it belongs to, -1
  // by op: tensors its launch reads beyond its inputs (a chain's input and the last linear's
  // residual, read at the chain's last op): kept live and ordered by plan_memory and schedule.
  std::vector<std::vector<graph::TensorId>> extra_reads_;
  // by op: tensors its launch writes beyond its outputs (a box step's refined boxes, written at
  // the step's last op): every later reader is ordered after it by schedule.
  std::vector<std::vector<graph::TensorId>> extra_writes_;
  // DETFORGE_CUDA_PRIORITY (default 0, measured no faster): the kernels of ops on or near the longest
  // path (graph::critical_ops, slack of a quarter unit) at the greatest priority, so that where an
  // off-path GEMM and a path kernel wait for SMs together the path's blocks go first. 1: through
  // the capturing stream's attribute; 2: set on the captured nodes (cuda_priority.cpp).
  int priority_ = 0;
  std::vector<char> critical_;
  // DETFORGE_CUDA_BOX_STEP (default 1): the decoder's box steps as one launch each.
  bool box_step_on_ = true;
  std::vector<BoxStep> box_steps_;
  std::vector<int> box_step_of_;  // by op: the box step it belongs to, -1
  // DETFORGE_CUDA_DEC_TAIL (default 0): the decoder tails as one cooperative launch each.
  bool dec_tail_on_ = false;
  std::vector<DecTail> dec_tails_;
  std::vector<int> dec_tail_of_;                  // by op: the tail whose launch sits there, -1
  std::vector<graph::TensorId> dec_tail_boxes_;   // refined boxes of the tails (box steps skip them)
  std::vector<char> dec_tail_member_;             // by op: part of a tail
  int64_t dec_tail_max_rows_ = 300;               // DETFORGE_CUDA_DEC_TAIL_MAX_ROWS
  // by op: launches nothing, its work done by a later op's launch (a layer_norm in its add's, an
  // upsample in its concat's; box steps and row chains keep their own marks).
  std::vector<char> absorbed_;
  // DETFORGE_CUDA_LN_ADD (default 1): by op, for an add launched with its layer_norm (second
  // output), that layer_norm's index; -1.
  bool ln_add_on_ = true;
  std::vector<int> ln_add_of_;
  // DETFORGE_CUDA_LINEAR_LN (default 0, not yet measured; cuda_linear_lns.cpp): by op, for the
  // site of a linear + layer_norm launch, the linear and the layer_norm; -1.
  int linear_ln_mode_ = 0;
  int linear_ln_split_ = 0;  // DETFORGE_CUDA_LINEAR_LN_SPLIT
  // DETFORGE_CUDA_LINEAR_LN_MAX_ROWS: one wave of 64-row blocks at two per SM (132 SMs). Beyond it
  // the kernel's weight re-reads (128 KiB per 64 rows) outgrow cuBLASLt's: r18vd's enc_output at
  // batch 32 (268,800 rows) would move ~0.7 GB through L2.
  int64_t linear_ln_max_rows_ = 264 * 64;
  std::vector<int> linear_ln_lin_, linear_ln_ln_;
  std::vector<int> linear_ln_lin_of_;  // by op: for a pair's linear, its site; -1
  // DETFORGE_CUDA_TOPK_SPLIT: the top-k's row maxima from a grid-wide kernel into the op's
  // stream workspace, then the one-SM selection from those keys (kernels/topk_rows.cu v6).
  // 0: never; 1: always; 2 (default): when a row is wider than 16 values. Measured (H100, fp16
  // b1): equal for the 8-class model's 16-byte rows; with COCO's 80 classes the one-SM kernel
  // read its 160-byte rows through the scalar path and took 184 of the 843 us (NOTES.md v22).
  int topk_split_ = 2;
  // DETFORGE_CUDA_POOL_QUAD=1 (off, measured equal): the stem's 3x3/2 max-pool computes 2x2
  // outputs per thread (kernels/pool.cu says why).
  bool pool_quad_ = false;
  // DETFORGE_CUDA_UPSAMPLE_CONCAT (default 1): by tensor, for an upsample's output that its
  // concat reads upsampled from the source, that source; kNoTensor.
  bool upsample_concat_on_ = true;
  std::vector<graph::TensorId> upsampled_from_;
  int late_value_ = 3;  // DETFORGE_CUDA_LATE_VALUE (cuda_late_values.cpp)
  // DETFORGE_CUDA_PAD_INPUT=P (cuda_input_conv.cpp): the conv that reads the input converted to
  // fp16 with P channels (zeros past the image's), and its weight, uploaded with P input channels.
  int pad_input_ = 0;
  int pad_op_ = -1;
  graph::TensorId pad_w_ = graph::kNoTensor;
  bool stem_on_ = false;   // DETFORGE_CUDA_STEM=1
  int stem_op_ = -1;       // conv reading the fp32 input directly (kernels/conv_stem.h); DETFORGE_CUDA_STEM=1: on
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
  float* d_in32_ = nullptr;             // fp32 pixels as uploaded
  float* h_in_ = nullptr;               // pinned
  std::vector<float*> d_out32_, h_out_;  // per graph output, fp32
  unsigned long long* d_count_ = nullptr;
  std::vector<std::unique_ptr<BatchPlan>> plans_;
  // Fused convs by shape/epilogue key and, unless share_conv_plans_, by op: one built cuDNN plan
  // object per conv op. Equal shapes used to share one object (DETFORGE_CUDA_SHARE_CONV_PLANS=1);
  // replays of that 4-stream r18vd graph differed from each other on the H200 (CudaDeterminism,
  // 2026-12-03; on one stream they did not), and two same-shape convs on two streams executing
  // one plan object was the suspect no byte-range hazard covers.
  std::map<std::string, std::shared_ptr<FusedConv>> fused_cache_;
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
  std::vector<cudnnHandle_t> side_cudnn_;  // per side stream (conv_handles_ == 1)
  OwnConvMode own_conv_ = OwnConvMode::fastest;  // DETFORGE_CUDA_OWN_CONV (conv_select.h)
  double own_conv_margin_ = 1.0;                 // DETFORGE_CUDA_OWN_CONV_MARGIN (conv_select.h)
  std::map<std::string, ConvChoice> own_conv_cache_;  // by the same shape key, fp16 only
  int pending_batch_ = 0;
  std::unique_ptr<ImageInput> image_input_;  // gpu-preprocess: created by the first run_images()
  // Threads that copy images into pinned memory (DETFORGE_CUDA_STAGE_THREADS, capped by the
  // machine's; image_input.h). Default 0, serial on stream_: 8 threads made batch 32's e2e 8.22 ms
  // but batch 1 gained nothing, and serial was not in that command (NOTES.md v24).
  int stage_threads_ = 0;
  bool stage_side_ = true;  // DETFORGE_CUDA_STAGE_SIDE=0: the pieces uploaded on stream_ itself
  // run_images_selected(): DETFORGE_CUDA_GPU_SELECT (default 1), and its result words for
  // max_batch images of select_k_ (device and pinned), allocated by the first call.
  bool gpu_select_ = true;
  int select_k_ = 0;
  uint32_t* d_select_ = nullptr;
  uint32_t* h_select_ = nullptr;
  std::vector<int> select_w_, select_h_;
};

}  // namespace detforge::cuda
