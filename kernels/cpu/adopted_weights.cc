#include "kernels/cpu/adopted_weights.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/host_memory.h"

namespace kvfold::kernels::cpu {

void AdoptedWeights::Add(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = buffers_[reinterpret_cast<uintptr_t>(data)];
  if (e.buffers++ == 0 || bytes > e.bytes) e.bytes = bytes;
}

void AdoptedWeights::Remove(const void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(reinterpret_cast<uintptr_t>(data));
  if (it != buffers_.end() && --it->second.buffers == 0) buffers_.erase(it);
}

const uint8_t* AdoptedWeights::Panels(ThreadPool& pool, PanelKind kind, const void* w, int64_t m,
                                      int64_t k) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(w);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.upper_bound(at);
  if (it == buffers_.begin()) return nullptr;
  --it;
  if (at + PanelSourceBytes(kind, m, k) > it->first + it->second.bytes) {
    return nullptr;
  }
  auto& panels = it->second.panels[{kind, at, m, k}];
  if (panels == nullptr) {
    panels.reset(static_cast<uint8_t*>(AllocateHost(PanelBytes(kind, m, k))));
    if (panels == nullptr) return nullptr;
    PackPanels(&pool, kind, w, m, k, panels.get());
  }
  return panels.get();
}

}  // namespace kvfold::kernels::cpu
