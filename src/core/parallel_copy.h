// ParallelCopy: memcpy of several parts on a few threads, handing each part to the caller in order
// as soon as its bytes are all copied, so that the caller can start its upload while later parts
// are still being copied.
// Why: the CUDA engine stages decoded images into pinned memory before uploading them. One thread
// copied a 640x480 image (921,600 bytes) in ~80 us on the H100 machine while its upload took
// ~45 us, so batch 32 spent ~2.7 ms staging serially before the graph could start (e2e profile,
// bench/results/h100/ab-2026-12-06-session21/call1). With 8 threads batch 32's detect() took
// 8.22 ms against 9.4-10.0 serial, but at batch 1 the workers' wake-up (~20-40 us) left the caller
// copying mostly alone (call 2). The CUDA engine uses 4 threads by default since session 22
// (DETFORGE_CUDA_STAGE_THREADS; b32 e2e ~2 ms faster, b1 within noise: NOTES.md v25).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace detforge {

class ParallelCopy {
 public:
  struct Part {
    void* dst;
    const void* src;
    size_t bytes;
  };
  static constexpr size_t kChunk = size_t{128} << 10;  // unit of work: parts are split into these

  // threads: how many threads copy, the caller included (1: the caller alone, no workers).
  explicit ParallelCopy(int threads);
  ~ParallelCopy();
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Copies every part (parts must not overlap) and calls ready(i) on the calling thread for
  // i = 0, 1, ... in order, each as soon as part i is complete; returns when every part is copied
  // and no worker touches them any more. An exception from ready() is rethrown after the copies
  // finish. Calls from several threads take turns.
  void run(const std::vector<Part>& parts, const std::function<void(int)>& ready);

 private:
  struct Chunk {
    int part;
    size_t offset, bytes;
  };
  bool copy_one();  // claims and copies the next chunk; false when none is left
  void work();

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one run() at a time
  std::mutex mu_;
  std::condition_variable wake_;
  uint64_t generation_ = 0;  // a new job (guarded by mu_)
  bool stop_ = false;
  bool open_ = false;       // workers may join the current job (guarded by mu_)
  // The current job: read by workers between the wake-up and active_ reaching zero.
  const std::vector<Part>* parts_ = nullptr;
  std::vector<Chunk> chunks_;
  std::atomic<size_t> next_{0};
  std::unique_ptr<std::atomic<int>[]> left_;  // chunks still to copy, per part
  size_t left_cap_ = 0;
  std::atomic<int> active_{0};  // workers inside the current job
};

}  // namespace detforge
