#include "core/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <exception>

namespace detforge {

ParallelCopy::ParallelCopy(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ParallelCopy::~ParallelCopy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ParallelCopy::copy_one() {
  const size_t c = next_.fetch_add(1, std::memory_order_relaxed);
  if (c >= chunks_.size()) return false;
  const Chunk& k = chunks_[c];
  const Part& p = (*parts_)[k.part];
  std::memcpy(static_cast<char*>(p.dst) + k.offset, static_cast<const char*>(p.src) + k.offset, k.bytes);
  left_[k.part].fetch_sub(1, std::memory_order_release);  // the caller's acquire sees the bytes
  return true;
}

// A worker joins a job only while it is open: one that wakes after the caller closed it skips it,
// so a late wake-up never delays run().
void ParallelCopy::work() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (!open_) continue;
      active_.fetch_add(1, std::memory_order_relaxed);
    }
    while (copy_one()) {
    }
    active_.fetch_sub(1, std::memory_order_release);
  }
}

void ParallelCopy::run(const std::vector<Part>& parts, const std::function<void(int)>& ready) {
  std::lock_guard<std::mutex> one(run_mu_);
  const int n = static_cast<int>(parts.size());
  if (left_cap_ < parts.size()) {
    left_ = std::make_unique<std::atomic<int>[]>(parts.size());
    left_cap_ = parts.size();
  }
  chunks_.clear();
  for (int i = 0; i < n; ++i) {
    int count = 0;
    for (size_t off = 0; off < parts[i].bytes; off += kChunk, ++count)
      chunks_.push_back({i, off, std::min(kChunk, parts[i].bytes - off)});
    left_[i].store(count, std::memory_order_relaxed);
  }
  parts_ = &parts;
  next_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);  // publishes the job to the workers that join it
    open_ = true;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr failed;
  for (int i = 0; i < n; ++i) {
    while (left_[i].load(std::memory_order_acquire) > 0)
      if (!copy_one()) std::this_thread::yield();  // the rest of part i is on a worker
    if (failed) continue;
    try {
      ready(i);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  while (active_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  parts_ = nullptr;
  if (failed) std::rethrow_exception(failed);
}

}  // namespace detforge
